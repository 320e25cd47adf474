"""``kvpool bench NAME [ARGS...]``: run ``python -m bench.NAME ARGS...`` from a source checkout."""

from __future__ import annotations

import argparse
import importlib
import os
import sys

BENCHES = ("pool", "copy", "serve", "async_pool", "sched", "policies")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("name", choices=BENCHES, help="which benchmark (bench/NAME.py)")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="its arguments (--json, ...)")


def run(args: argparse.Namespace) -> int:
    checkout = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if checkout not in sys.path:  # bench/ sits beside the package in a source checkout
        sys.path.insert(0, checkout)
    mod = importlib.import_module(f"bench.{args.name}")
    sys.argv = [f"bench.{args.name}", *args.args]
    mod.main()
    return 0
