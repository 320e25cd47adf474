"""``kvpool router --host H --port P --replica URL [--replica URL ...]``.

Serves the Router app (proxy.py) with ``handler_cancellation=True`` (a client that disconnects
cancels its handler, which closes the upstream connection) until SIGTERM/SIGINT, on the
replica's guarded listener (kvpool.server.connections: a connection cap, a header-read timeout,
OpenAI error JSON for aiohttp's own parser errors such as a header too large). On the signal it
drains for up to ``--shutdown-timeout`` seconds (drain.py NOTE(router-drain)); a second signal
exits at once. ``--header-timeout`` and ``--body-timeout`` are the replica's (``kvpool serve``'s
flags: a request head, a request body), ``--request-timeout`` and ``--first-byte-timeout`` the
router's own, off by default (request_limits.py NOTE(request-timeout)).

NOTE(router-cap): a replica's cap on connections is its open-file limit less a reserve
(kvpool.server.connections.default_max_connections): past the limit accept() fails and every
client is locked out, below it a client over the cap still gets a 503. A proxied client
connection holds a second descriptor, its upstream socket to a replica (more while a retry or
a lookup is open), so the router's default cap is half that: its clients alone can no longer
use up the descriptors its relays need. Before, 90 streams under a limit of 160 (cap 96) ran
the router out of sockets and the healthy replica was blamed (connect_errors.py
NOTE(local-exhaustion)). ``--max-connections`` sets it (docs/architecture.md, Router).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Callable, Sequence

from aiohttp import web

from kvpool.errors import ConfigError
from kvpool.router.affinity import ResponseAffinity
from kvpool.router.drain import (DEFAULT_SHUTDOWN_TIMEOUT, SHUTDOWN_GRACE, Drain,
                                 install_signals)
from kvpool.router.kv_index import DEFAULT_MAX_BLOCKS
from kvpool.router.kv_routing import EventRouting
from kvpool.router.membership import Membership, read_token, replica_spec
from kvpool.router.proxy import DEFAULT_MAX_RETRIES, POLICIES, UPSTREAM_KEEPALIVE, Router
from kvpool.router.replica_tls import replica_context
from kvpool.router.replicas import (DEFAULT_DOWN_AFTER, DEFAULT_HEALTH_TIMEOUT, DEFAULT_INTERVAL,
                                     ReplicaSet)
from kvpool.router.request_limits import RequestLimits, check_seconds
from kvpool.router.scoring import LoadGuard
from kvpool.server.connections import (DEFAULT_HEADER_TIMEOUT, ConnectionLimiter,
                                       add_client_timeout_args, default_max_connections,
                                       start_listener)
from kvpool.server.cors import CorsPolicy, add_cors_args
from kvpool.server.json_body import DEFAULT_BODY_TIMEOUT, DEFAULT_MAX_BODY_BYTES
from kvpool.server.listen_errors import listening

__all__ = ["READY_PREFIX", "add_arguments", "add_kv_event_arguments",
           "add_shutdown_argument", "default_router_connections", "event_loop_factory",
           "listen", "main", "run", "serve"]

READY_PREFIX = "kvpool router: listening on http://"
DEFAULT_PORT = 8080
REPLICA_API_KEY_ENV = "KVPOOL_REPLICA_API_KEY"
log = logging.getLogger("kvpool.router")


def add_arguments(p: argparse.ArgumentParser,
                  port: int | None = None) -> argparse.ArgumentParser:
    """The router's flags on ``p``; ``port``: --port's default for another command built on
    them (kvpool epp), which gets no --shutdown-timeout (its shutdown is its own)."""
    _add_replica_arguments(p, DEFAULT_PORT if port is None else port)
    _add_routing_arguments(p)
    _add_health_arguments(p)
    if port is None:
        p.add_argument("--max-connections", type=int, default=None, metavar="N",
                       help="open client connections the router takes; beyond it new ones "
                            "get 503 and close (default: half of the open-file limit less 64, "
                            "as each one proxied holds a socket to a replica too)")
        add_shutdown_argument(p)
        _add_timeout_arguments(p)
    return p


def _add_replica_arguments(p: argparse.ArgumentParser, port: int) -> None:
    """Where the router listens and which replicas it serves."""
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1)")
    p.add_argument("--port", type=int, default=port, help=f"port (0: any free; default {port})")
    p.add_argument("--replica", action="append", default=[], metavar="[NAME=]URL",
                   help="a replica's base URL, e.g. http://127.0.0.1:8000 (repeat per "
                        "replica); NAME= labels its series on /metrics (default: HOST:PORT)")
    p.add_argument("--replicas-file", metavar="PATH",
                   help="a file of replica URLs ([NAME=]URL), one per line, re-read when it "
                        "changes: URLs that join take traffic after a passing /health, ones "
                        "that leave drain")
    p.add_argument("--admin-token-file", metavar="PATH",
                   help="enables GET/POST/DELETE /v1/kvpool/replicas with 'Authorization: "
                        "Bearer <the file's token>' (add and remove replicas at runtime); "
                        "/health names the replicas only to that token or --replica-api-key")
    p.add_argument("--replica-ca-certs", metavar="PEM",
                   help="CA certificates the router trusts for https:// replicas, instead of "
                        "the system's (health beats and requests alike)")


def _add_routing_arguments(p: argparse.ArgumentParser) -> None:
    """How a request's replica is chosen."""
    p.add_argument("--policy", choices=POLICIES, default="prefix",
                   help="prefix: ask every replica for its prefix hit and choose with the load "
                        "guard; round_robin: rotate over the healthy replicas without asking "
                        "(a baseline)")
    add_kv_event_arguments(p)
    p.add_argument("--lookup-timeout-ms", type=float, default=50.0,
                   help="a replica's lookup answer may take this long, else it scores 0 hit")
    p.add_argument("--balance-abs-threshold", type=float, default=8,
                   help="load guard: max-min in-flight requests above this ...")
    p.add_argument("--balance-rel-threshold", type=float, default=1.5,
                   help="... and max above this times min: route to the least loaded")


def _add_health_arguments(p: argparse.ArgumentParser) -> None:
    """When a replica counts as down; the body limit and the log level."""
    p.add_argument("--health-interval", type=float, default=DEFAULT_INTERVAL,
                   help="seconds between /health beats of each replica (a beat that takes "
                        "over --health-timeout takes the replica out of new choices until one "
                        "answers in time)")
    p.add_argument("--health-timeout", type=float, default=DEFAULT_HEALTH_TIMEOUT,
                   metavar="SECONDS",
                   help="a /health answer slower than this takes the replica out of new "
                        "choices (its requests in flight go on). Raise it for replicas whose "
                        "/health runs a generation (SGLang's), which a busy replica answers "
                        "late")
    p.add_argument("--down-after", type=float, default=DEFAULT_DOWN_AFTER,
                   help="seconds in which nothing came from a replica (no /health answer, "
                        "however late, no byte of an answer in flight) after which it is "
                        "silent: its in-flight requests end (streams with an SSE error event; "
                        "ones not started yet are retried elsewhere). Raise it where a "
                        "replica's API loop can stall longer")
    p.add_argument("--max-retries", type=int, default=DEFAULT_MAX_RETRIES, metavar="N",
                   help="other replicas a request is tried on after one that cannot have "
                        "started it (connection refused, a 503 refusal such as queue_full, "
                        "silent); one that took it (a 5xx, a 503 request_aborted, a "
                        "connection lost after the request) is never retried")
    p.add_argument("--upstream-keepalive", type=float, default=UPSTREAM_KEEPALIVE,
                   metavar="SECONDS",
                   help="an idle connection to a replica is reused for this long, then a new "
                        "one is opened: keep it below the replicas' own keep-alive (vLLM's "
                        "--timeout-keep-alive, 5 s; kvpool serve's --keep-alive-timeout, 15 s)")
    p.add_argument("--max-body-bytes", type=int, default=DEFAULT_MAX_BODY_BYTES,
                   help="larger request bodies get 413 (default: the replicas' default)")
    p.add_argument("--log-level", default="info",
                   choices=("debug", "info", "warning", "error"))
    add_cors_args(p)  # the CORS of the router's own answers (proxy.py NOTE(cors-own))


def add_kv_event_arguments(p: argparse.ArgumentParser) -> None:
    """The flags of placement by the replicas' KV events (kv_routing.py)."""
    p.add_argument("--kv-events", action="store_true",
                   help="prefix policy without a lookup per request: follow each replica's KV "
                        "events (replicas started with --kv-events-config; the endpoints come "
                        "from their GET /v1/kvpool/kv_events) and hash prompts here")
    p.add_argument("--kv-events-any-host", action="store_true",
                   help="follow KV event endpoints a replica names on another host than its "
                        "URL's (default: refused and logged, that replica placed by lookups)")
    p.add_argument("--replica-api-key", default=None, metavar="KEY",
                   help="the replicas' --api-key, for what the router asks them itself (where "
                        f"their KV events are); or env {REPLICA_API_KEY_ENV}. Client requests "
                        "go on with the client's own Authorization. Set, /health names the "
                        "replicas only to a request bearing it (or the admin token)")
    p.add_argument("--tenant-header", default=None, metavar="NAME",
                   help="the replicas' --tenant-header: the Responses API affinity map and "
                        "its searches are shared fairly between tenants (with "
                        "--replica-api-key and no header: tenants by API key, as the "
                        "replicas; docs/architecture.md, Router)")
    p.add_argument("--kv-index-blocks", type=int, default=DEFAULT_MAX_BLOCKS, metavar="N",
                   help="block hashes remembered per replica with --kv-events (least recently "
                        "stored forgotten first)")


def _add_timeout_arguments(p: argparse.ArgumentParser) -> None:
    """How long a client's request may take, in parts (``kvpool router``'s alone)."""
    add_client_timeout_args(p)  # kvpool serve's own flags, as the 408 names them
    p.add_argument("--request-timeout", type=float, default=None, metavar="SECONDS",
                   help="end a request whose answer has not finished SECONDS after its "
                   "replica was chosen: 504 replica_unresponsive, or a stream's error event "
                   "(default: none; 0: none; a longer generation is ended too, so set it "
                   "above the longest one expected)")
    p.add_argument("--first-byte-timeout", type=float, default=None, metavar="SECONDS",
                   help="end a request whose replica has not started its answer within "
                   "SECONDS of an attempt (a stuck replica that still answers /health): 504 "
                   "replica_unresponsive (default: none; a non-streamed answer starts when it "
                   "is done, so this bounds the whole generation there)")


def request_limits(args: argparse.Namespace) -> RequestLimits:
    """The bounds of ``args``' timeout flags (ValueError: one out of range; ``build_router``
    sets the body's on the router). A first-byte bound the request bound makes moot is said once,
    with the fix."""
    for flag in ("header_timeout", "body_timeout"):
        check_seconds("--" + flag.replace("_", "-"), getattr(args, flag))
    limits = RequestLimits(args.request_timeout, args.first_byte_timeout)
    if limits.total is not None and limits.first_byte is not None and \
            limits.first_byte >= limits.total:
        log.warning("--first-byte-timeout %g is not below --request-timeout %g: only the "
                    "latter applies; set the first below it, or drop it", limits.first_byte,
                    limits.total)
    return limits


def add_shutdown_argument(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """``kvpool router``'s own drain flag (drain.py NOTE(router-drain)); kvpool epp has none."""
    p.add_argument("--shutdown-timeout", type=float, default=DEFAULT_SHUTDOWN_TIMEOUT,
                   metavar="SECONDS",
                   help="on SIGTERM/SIGINT, requests in flight get this long to finish; then "
                        "streams end with an error event and [DONE], others get 503 "
                        "request_aborted (a second signal exits at once; default "
                        f"{DEFAULT_SHUTDOWN_TIMEOUT:g}, as kvpool serve's)")
    return p


def build_router(args: argparse.Namespace) -> Router:
    if not args.replica and not args.replicas_file and not args.admin_token_file:
        raise ValueError("give at least one --replica URL (or --replicas-file / "
                         "--admin-token-file to add replicas at runtime)")
    specs = [replica_spec(u) for u in args.replica]
    replicas = ReplicaSet([u for u, _ in specs], interval=args.health_interval,
                          timeout=args.health_timeout, down_after=args.down_after,
                          names={u: n for u, n in specs if n},
                          tls=replica_context(args.replica_ca_certs))
    guard = LoadGuard(args.balance_abs_threshold, args.balance_rel_threshold)
    token = read_token(args.admin_token_file) if args.admin_token_file else None
    membership = (Membership(replicas, admin_token=token, replicas_file=args.replicas_file)
                  if token or args.replicas_file else None)
    key = args.replica_api_key or os.environ.get(REPLICA_API_KEY_ENV) or None
    events = (EventRouting(replicas, max_blocks=args.kv_index_blocks, api_key=key,
                           any_host=args.kv_events_any_host)
              if args.kv_events and args.policy == "prefix" else None)
    cors = CorsPolicy(args.allowed_origins, credentials=args.allow_credentials,
                      methods=args.allowed_methods, headers=args.allowed_headers)
    router = Router(replicas, guard=guard, lookup_timeout=args.lookup_timeout_ms / 1000,
                  policy=args.policy, max_body_bytes=args.max_body_bytes,
                  membership=membership, kv_events=events, cors=cors,
                  affinity=ResponseAffinity(tenant_header=args.tenant_header, keyed=bool(key)),
                  health_tokens=[t for t in (token, key) if t],  # proxy.py NOTE(health-view)
                  max_retries=args.max_retries, upstream_keepalive=args.upstream_keepalive,
                  # the replica's flag, every route's body (NOTE(slow-body)); kvpool epp has none
                  body_timeout=getattr(args, "body_timeout", DEFAULT_BODY_TIMEOUT))
    return router


def default_router_connections() -> int:
    """The router's default cap on client connections (NOTE(router-cap))."""
    return max(16, default_max_connections() // 2)


async def listen(router: Router, host: str, port: int, drain: Drain | None = None,
                 max_connections: int | None = None, limits: RequestLimits | None = None,
                 header_timeout: float = DEFAULT_HEADER_TIMEOUT
                 ) -> tuple[web.AppRunner, asyncio.Server]:
    """The router's app set up and listening (the caller closes the server, then cleans up
    the runner); with ``drain``, its requests tracked and the runner's own wait short;
    ``max_connections``: the cap on client connections (None: NOTE(router-cap));
    ``limits``: the requests' time bounds (None: none; NOTE(request-timeout))."""
    limiter = ConnectionLimiter(max_connections or default_router_connections())
    app = router.app() if drain is None else drain.install(router.app())
    if limits is not None:
        limits.install(app, router.metrics.registry)
    limiter.flush_at_cleanup(app)
    runner = web.AppRunner(app, handler_cancellation=True,
                           shutdown_timeout=10 if drain is None else SHUTDOWN_GRACE)
    await runner.setup()
    try:
        with listening(host, port):  # a port in use: one line naming it (main: exit 2)
            server = await start_listener(runner, host, port, limiter=limiter,
                                          header_timeout=header_timeout)
    except BaseException:
        await runner.cleanup()
        raise
    return runner, server


async def serve(router: Router, host: str, port: int, stop: asyncio.Event | None = None,
                shutdown_timeout: float = DEFAULT_SHUTDOWN_TIMEOUT,
                max_connections: int | None = None, limits: RequestLimits | None = None,
                header_timeout: float = DEFAULT_HEADER_TIMEOUT) -> None:
    """Serve until SIGTERM/SIGINT (or ``stop``), then drain (drain.py NOTE(router-drain));
    ``max_connections``, ``limits``, ``header_timeout``: listen's."""
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    installed = install_signals(loop, stop)
    drain = Drain()
    runner, server = await listen(router, host, port, drain, max_connections, limits,
                                  header_timeout)
    try:
        bound = server.sockets[0].getsockname()[1] if server.sockets else port
        print(f"{READY_PREFIX}{host}:{bound} ({len(router.replicas.replicas)} replicas)",
              flush=True)
        await stop.wait()
        server.close()  # stop listening first: nothing new arrives while we drain
        await drain.run(shutdown_timeout)
    finally:
        server.close()
        await runner.cleanup()  # what is left after the drain
        for sig in installed:
            loop.remove_signal_handler(sig)


def main(args: argparse.Namespace | Sequence[str] | None = None) -> int:
    if not isinstance(args, argparse.Namespace):
        args = add_arguments(argparse.ArgumentParser(prog="kvpool router")).parse_args(
            None if args is None else list(args))
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        if getattr(args, "max_connections", None) is not None and args.max_connections < 1:
            raise ValueError(f"--max-connections {args.max_connections}: use a positive count")
        limits = request_limits(args) if hasattr(args, "request_timeout") else None
        router = build_router(args)
    except (ValueError, OSError) as exc:
        print(f"kvpool router: {exc}", file=sys.stderr)
        return 2
    try:
        with asyncio.Runner(loop_factory=event_loop_factory()) as runner:
            runner.run(serve(router, args.host, args.port,
                             shutdown_timeout=getattr(args, "shutdown_timeout",
                                                      DEFAULT_SHUTDOWN_TIMEOUT),
                             max_connections=getattr(args, "max_connections", None),
                             limits=limits, header_timeout=getattr(
                                 args, "header_timeout", DEFAULT_HEADER_TIMEOUT)))
    except ConfigError as exc:  # the listener's port (listen_errors.py)
        print(f"kvpool router: {exc}", file=sys.stderr)
        return 2
    return 0


def event_loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop when installed (a dependency off Windows): its transports and scheduling cost
    a fraction of asyncio's per request, and the router's own time is its added latency."""
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


run = main  # the name kvpool.cli's command registry looks for

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
