"""``kvpool bench NAME [ARGS...]``: the same as ``python -m bench.NAME ARGS...``.

bench/ is a top-level package of the kvpool distribution; each benchmark's ``main(argv)``
takes its own arguments, so nothing here edits the import path or the process arguments.
"""

from __future__ import annotations

import argparse
import importlib

BENCHES = ("pool", "copy", "serve", "async_pool", "sched", "policies", "policy_bounds",
           "logprobs", "structured", "route")  # bench.remote needs tests/ (a checkout)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", choices=BENCHES, help="which benchmark (bench/NAME.py)")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="its arguments (--json, ...)")


def run(args: argparse.Namespace) -> int:
    status = importlib.import_module(f"bench.{args.name}").main(list(args.args))
    return status if isinstance(status, int) else 0  # some return their figures (a dict)
