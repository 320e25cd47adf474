"""The ``kvpool`` command line: a registry of subcommands, each imported only when chosen.

Adding a command is one line in ``COMMANDS``: ``name: (module, help)``. The module provides
``add_arguments(parser)`` and ``run(args) -> int`` (the exit status)::

    kvpool serve [--model DIR] [--port 8000] ...   kvpool.server.serve
    kvpool replay TRACE.jsonl [--instant] ...      kvpool.replay.cli
    kvpool stress pool|http ...                    stress.cli
    kvpool bench pool|copy|serve|... [ARGS]        kvpool.benchcmd
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

# name -> (module with add_arguments(parser) and run(args), one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "serve": ("kvpool.server.serve",
              "serve the OpenAI-compatible API (built-in tiny model unless --model)"),
    "replay": ("kvpool.replay.cli",
               "replay a request trace through the scheduler (or --instant: cache policy only)"),
    "stress": ("stress.cli", "stress the pool or a server (bounded, loopback only)"),
    "router": ("kvpool.router.cli", "KV-aware reverse proxy in front of kvpool serve replicas"),
    "epp": ("kvpool.epp.cli", "Gateway API endpoint picker (Envoy ext_proc) for replicas"),
    "bench": ("kvpool.benchcmd", "run a benchmark from bench/ (pool, copy, serve, ...)"),
}
# stress/ and bench/ are top-level packages of the same distribution (pyproject's
# packages.find includes them), so an installed kvpool imports them like any package


def build_parser(chosen: str | None = None) -> argparse.ArgumentParser:
    """The top-level parser; only ``chosen``'s module is imported to add its arguments."""
    parser = argparse.ArgumentParser(
        prog="kvpool", description="kvpool: a paged KV-cache block manager for LLM inference")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name, (module, help_text) in COMMANDS.items():
        p = sub.add_parser(name, help=help_text, description=help_text)
        if name == chosen:
            mod = importlib.import_module(module)
            mod.add_arguments(p)
            p.set_defaults(run_command=mod.run)
    return parser


def _chosen(argv: Sequence[str] | None) -> str | None:
    """The subcommand named in ``argv`` (argparse reads the process arguments when None)."""
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("command", nargs="?")
    known, _ = pre.parse_known_args(None if argv is None else list(argv))
    return known.command if known.command in COMMANDS else None


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser(_chosen(argv))
    args = parser.parse_args(None if argv is None else list(argv))
    if getattr(args, "run_command", None) is None:
        parser.print_help()
        return 2
    try:
        return int(args.run_command(args) or 0)
    except BrokenPipeError:  # `kvpool ... | head`: stop quietly, like a Unix tool
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
