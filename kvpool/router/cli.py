"""``kvpool router --host H --port P --replica URL [--replica URL ...]``.

Serves the Router app (proxy.py) with ``handler_cancellation=True`` (a client that disconnects
cancels its handler, which closes the upstream connection) until SIGTERM/SIGINT.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
from collections.abc import Sequence

from aiohttp import web

from kvpool.router.proxy import POLICIES, Router
from kvpool.router.replicas import ReplicaSet
from kvpool.router.scoring import LoadGuard

__all__ = ["READY_PREFIX", "add_arguments", "main", "run", "serve"]

READY_PREFIX = "kvpool router: listening on http://"
log = logging.getLogger("kvpool.router")


def add_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    p.add_argument("--port", type=int, default=8080, help="port (0: any free; default 8080)")
    p.add_argument("--replica", action="append", required=True, metavar="URL",
                   help="a kvpool serve base URL, e.g. http://127.0.0.1:8000 (repeat per "
                        "replica)")
    p.add_argument("--policy", choices=POLICIES, default="prefix",
                   help="prefix: ask every replica for its prefix hit and choose with the load "
                        "guard; round_robin: rotate over the healthy replicas without asking "
                        "(a baseline)")
    p.add_argument("--lookup-timeout-ms", type=float, default=50.0,
                   help="a replica's lookup answer may take this long, else it scores 0 hit")
    p.add_argument("--health-interval", type=float, default=1.0,
                   help="seconds between /health polls of each replica")
    p.add_argument("--balance-abs-threshold", type=float, default=8,
                   help="load guard: max-min in-flight requests above this ...")
    p.add_argument("--balance-rel-threshold", type=float, default=1.5,
                   help="... and max above this times min: route to the least loaded")
    p.add_argument("--log-level", default="info",
                   choices=("debug", "info", "warning", "error"))
    return p


def build_router(args: argparse.Namespace) -> Router:
    for url in args.replica:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"--replica {url!r}: give a URL like http://127.0.0.1:8000")
    replicas = ReplicaSet(args.replica, interval=args.health_interval)
    guard = LoadGuard(args.balance_abs_threshold, args.balance_rel_threshold)
    return Router(replicas, guard=guard, lookup_timeout=args.lookup_timeout_ms / 1000,
                  policy=args.policy)


async def serve(router: Router, host: str, port: int,
                stop: asyncio.Event | None = None) -> None:
    runner = web.AppRunner(router.app(), handler_cancellation=True, shutdown_timeout=10)
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop.set)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound = runner.addresses[0][1] if runner.addresses else port
        print(f"{READY_PREFIX}{host}:{bound} ({len(router.replicas.replicas)} replicas)",
              flush=True)
        await stop.wait()
    finally:
        await runner.cleanup()


def main(args: argparse.Namespace | Sequence[str] | None = None) -> int:
    if not isinstance(args, argparse.Namespace):
        args = add_arguments(argparse.ArgumentParser(prog="kvpool router")).parse_args(
            None if args is None else list(args))
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        router = build_router(args)
    except ValueError as exc:
        print(f"kvpool router: {exc}", file=sys.stderr)
        return 2
    asyncio.run(serve(router, args.host, args.port))
    return 0


run = main  # the name kvpool.cli's command registry looks for

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
