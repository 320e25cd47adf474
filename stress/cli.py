"""The ``kvpool stress`` / ``python -m stress`` command line.

::

    python -m stress pool --threads 8 --coroutines 1000 --duration 60
    python -m stress http --clients 200 --duration 60 [--url http://127.0.0.1:8000]
    ... --json report.json --plot report.png

``add_arguments(parser)`` fills a parser (kvpool.cli's registry calls it for ``kvpool stress``);
``main(args)`` runs the chosen mode and returns the exit status: 0 when every must-be-zero
figure is 0 and every greedy output matched, 1 otherwise, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import fields

__all__ = ["add_arguments", "build_parser", "http_config", "main", "pool_config", "run"]


def _rate(text: str) -> float:
    v = float(text)
    if not 0.0 <= v <= 1.0:
        raise argparse.ArgumentTypeError(f"{text}: use a fraction in [0, 1]")
    return v


def _positive(kind):
    def parse(text: str):
        v = kind(text)
        if v <= 0:
            raise argparse.ArgumentTypeError(f"{text}: must be > 0")
        return v
    return parse


def _common(p: argparse.ArgumentParser, duration: float) -> None:
    p.add_argument("--duration", type=_positive(float), default=duration,
                   help=f"seconds of load, then drain and verdict (default {duration:g})")
    p.add_argument("--seed", type=int, default=0, help="seed of every random choice")
    p.add_argument("--json", metavar="PATH", help="write the report as JSON ('-': stdout)")
    p.add_argument("--plot", metavar="PATH", help="write latency and pool usage over time "
                                                  "as a PNG")
    p.add_argument("--quiet", action="store_true", help="no live progress line on stderr")


def add_arguments(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the ``pool`` and ``http`` modes and their flags to ``parser``."""
    sub = parser.add_subparsers(dest="mode", metavar="MODE")
    sub.required = True
    pool = sub.add_parser("pool", help="threads + coroutines hammer one BlockSpaceManager")
    _common(pool, 10.0)
    _pool_arguments(pool)
    http = sub.add_parser("http", help="K concurrent clients against kvpool serve")
    _common(http, 30.0)
    _http_load_arguments(http)
    _http_server_arguments(http)
    _http_extra_client_arguments(http)
    return parser


def _pool_arguments(pool: argparse.ArgumentParser) -> None:
    """``stress pool``: the workers and the pool they share."""
    pool.add_argument("--threads", type=int, default=4, help="worker threads (default 4)")
    pool.add_argument("--coroutines", type=int, default=100,
                      help="coroutines through PoolFront (default 100)")
    pool.add_argument("--max-ops", type=_positive(int), default=5_000_000,
                      help="stop after this many operations (default 5,000,000)")
    pool.add_argument("--blocks", type=_positive(int), default=None,
                      help="device blocks (default: max(1024, 8 per thread and coroutine); "
                           "host: half as many)")
    pool.add_argument("--host-blocks", type=int, default=None, help="host (swap) blocks")
    pool.add_argument("--block-size", type=_positive(int), default=4,
                      help="token slots per block (default 4)")
    pool.add_argument("--check-interval", type=_positive(float), default=0.25,
                      help="seconds between full quiescent invariant checks (default 0.25)")
    pool.add_argument("--no-prefix-caching", action="store_true",
                      help="run the device pool without a prefix index")
    pool.add_argument("--verify-hits", action="store_true",
                      help="check every prefix hit against the token ids kept per cached "
                           "block (CacheConfig.verify_hits)")
    pool.add_argument("--direct", type=_rate, default=0.3,
                      help="share of the threads' operations run as unbatched manager calls, "
                           "each taking only the manager's own locks (default 0.3)")
    pool.add_argument("--lock-free-allocate", action=argparse.BooleanOptionalAction,
                      default=True,
                      help="the direct operations take raw blocks through the lock-free "
                           "pool.allocate() every other time, else allocate_many (default on)")
    pool.add_argument("--kv-events", action="store_true",
                      help="attach a KV-event observer that counts the pools' events and "
                           "checks each GPU BlockStored (block_size token ids a block, "
                           "hashing to its hash under its parent); tables keep token ids")
    _race_arguments(pool)


def _race_arguments(pool: argparse.ArgumentParser) -> None:
    """The threads that race the pool's locking paths (NOTE(races) in stress/pool/races.py)."""
    pool.add_argument("--allocators", type=int, default=2,
                      help="threads taking raw blocks one by one through the lock-free "
                           "pool.allocate() only, so the magazine empties and refills often "
                           "(default 2)")
    pool.add_argument("--sharers", type=int, default=2,
                      help="threads forking and freeing over the same blocks (default 2)")
    pool.add_argument("--defrag", action=argparse.BooleanOptionalAction, default=True,
                      help="thread workers plan, copy and commit defragmentation (default on)")
    pool.add_argument("--quiet-probe", action=argparse.BooleanOptionalAction, default=True,
                      help="lock-free readers against a pool whose writer undoes each change "
                           "inside its section: any non-empty snapshot is a torn read")


def _http_load_arguments(http: argparse.ArgumentParser) -> None:
    """``stress http``: the clients and their mix of requests."""
    http.add_argument("--url", help="a running server on loopback (default: start one)")
    http.add_argument("--clients", type=_positive(int), default=16,
                      help="concurrent clients (default 16)")
    http.add_argument("--max-requests", type=_positive(int), default=1_000_000,
                      help="stop after this many requests (default 1,000,000)")
    http.add_argument("--disconnect-rate", type=_rate, default=0.05,
                      help="share of requests whose client leaves early (default 0.05)")
    http.add_argument("--hostile-rate", type=_rate, default=0.05,
                      help="share of malformed / hostile requests (default 0.05)")
    http.add_argument("--greedy-rate", type=_rate, default=0.3,
                      help="share of greedy probe requests checked against the reference "
                           "(default 0.3)")
    http.add_argument("--stream-rate", type=_rate, default=0.5, help="share that streams")
    http.add_argument("--slow-rate", type=_rate, default=0.02,
                      help="share of streams read slowly (default 0.02)")
    http.add_argument("--tenants", type=_positive(int), default=4,
                      help="cache_salt tenants (tenant 0 sends none; default 4)")
    http.add_argument("--api-key", help="send (and start the server with) this API key")


def _http_server_arguments(http: argparse.ArgumentParser) -> None:
    """``stress http``: the server under load (started here, or in-process with --faults)."""
    http.add_argument("--tenant-block-quota", type=_positive(int), default=None,
                      help="start the server with this per-tenant block quota")
    http.add_argument("--faults", action="store_true",
                      help="test only: in-process server with injected copy failures, copy "
                           "delays and step failures")
    http.add_argument("--fault-device-blocks", type=_positive(int), default=24,
                      help="with --faults: the in-process server's device blocks (default 24: "
                           "swap preemption, prefix caching on, swap-in failures)")
    http.add_argument("--num-device-blocks", type=_positive(int), default=256,
                      help="the started server's device blocks (default 256: preemption "
                           "and swapping under load)")
    http.add_argument("--num-host-blocks", type=int, default=512)
    http.add_argument("--max-num-seqs", type=_positive(int), default=64)
    http.add_argument("--invariant-check-interval", type=int, default=4,
                      help="the started server checks invariants every N steps (default 4)")
    http.add_argument("--drain-timeout", type=_positive(float), default=30.0,
                      help="seconds to wait for the server to drain (default 30)")
    http.add_argument("--stream-write-timeout", type=_positive(float), default=None,
                      help="the started server's --stream-write-timeout (default: 3 s with "
                           "--slow-readers, else the server's own)")
    http.add_argument("--server-arg", action="append", default=[], metavar="FLAG",
                      help="extra `kvpool serve` flag for the started server (repeatable; "
                           "use --server-arg=--flag)")


def _http_extra_client_arguments(http: argparse.ArgumentParser) -> None:
    """``stress http``: extra hostile clients beside the load, and the /health check."""
    http.add_argument("--slowloris", type=int, default=0, metavar="N",
                      help="also hold N connections that trickle a request head (a byte a "
                           "second) and never finish it; the run fails if one outlives the "
                           "server's header timeout + 5 s (default 0)")
    http.add_argument("--slow-readers", type=int, default=0, metavar="N",
                      help="N extra clients that open streams and never read (the server's "
                           "write timeout must close them and free their queue slots)")
    http.add_argument("--big-prompts", type=int, default=0, metavar="N",
                      help="N extra clients sending ~4 MB prompts, 2M-token-id prompts and "
                           "4 MB chat messages (each must get 400 context_length_exceeded)")
    http.add_argument("--health-p99-ms", type=_positive(float), default=50.0,
                      help="fail the run when /health p99 (sampled every 50 ms all run long) "
                           "is above this (default 50)")


def build_parser() -> argparse.ArgumentParser:
    return add_arguments(argparse.ArgumentParser(
        prog="python -m stress", description="kvpool concurrency stress harness"))


def _config(cls, args: argparse.Namespace, **extra):
    """``cls`` built from the flags whose dest is one of its fields (the flags are named after
    the fields, so a new field needs only its flag), plus ``extra``."""
    given = {f.name: getattr(args, f.name) for f in fields(cls) if hasattr(args, f.name)}
    return cls(**{**given, **extra})


def pool_config(args: argparse.Namespace):
    """The PoolConfig that ``stress pool`` flags describe."""
    from stress.pool.mode import PoolConfig

    return _config(PoolConfig, args, prefix_caching=not args.no_prefix_caching,
                   progress=not args.quiet)


def http_config(args: argparse.Namespace):
    """The HttpConfig (its WorkloadConfig nested) that ``stress http`` flags describe."""
    from stress.http.mode import HttpConfig
    from stress.http.workload import WorkloadConfig

    return _config(HttpConfig, args, workload=_config(WorkloadConfig, args),
                   server_args=tuple(args.server_arg), progress=not args.quiet)


def _run_pool(args: argparse.Namespace):
    from stress.pool.mode import PoolStress

    return PoolStress(pool_config(args)).run()


def _run_http(args: argparse.Namespace):
    from stress.http.mode import HttpStress

    return HttpStress(http_config(args)).run()


def main(args: argparse.Namespace | Sequence[str] | None = None) -> int:
    """Run one mode; the exit status says whether every must-be-zero figure was 0."""
    if not isinstance(args, argparse.Namespace):
        args = build_parser().parse_args(None if args is None else list(args))
    try:
        report = _run_pool(args) if args.mode == "pool" else _run_http(args)
    except ValueError as e:  # bad combinations (e.g. a non-loopback --url)
        print(f"stress: {e}", file=sys.stderr)
        return 2
    if args.json:
        report.write_json(args.json)
    if args.plot:
        report.plot(args.plot)
    print(report.summary(), file=sys.stderr if args.json == "-" else sys.stdout)
    return 0 if report.ok else 1


run = main  # the name kvpool.cli's command registry looks for
