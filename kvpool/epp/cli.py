"""``kvpool epp --host H --port P --replica URL [--replica URL ...]``: the endpoint picker.

A gRPC server (kvpool.epp.h2: HTTP/2 on the same event loop as the router's health beats and
lookups) serving Envoy's ExternalProcessor service (service.py) until SIGTERM/SIGINT. It takes the
router's replica and decision flags (kvpool.router.cli) and builds the same Router, so
``--replicas-file`` works here too, and its CORS flags (--allowed-origins, ...) give the
picker's own error answers their CORS headers (refusals.py NOTE(epp-cors)); the default port
is the Inference Extension's 9002. Its own flags bound the transport (listener.py,
docs/epp.md): ``--max-connections``, ``--max-connection-bytes``, ``--max-held-bytes``,
``--max-open-streams``, ``--idle-timeout`` and ``--first-message-timeout``;
``--model-rewrites`` rewrites a request's model before the pick (rewrite.py); ``--fallbacks``
lists more replicas after the chosen one (picker.py NOTE(fallbacks)); ``--metrics-port``
and ``--metrics-host`` place its Prometheus port (metrics.py), ``--grpc-health-port`` its gRPC
health port (health.py).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import math
import signal
import sys
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING

from kvpool.epp.calls import ENVELOPE
from kvpool.epp.listener import (DEFAULT_CONNECTION_BYTES, DEFAULT_HELD_BYTES,
                                  DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_OPEN_STREAMS,
                                  FIRST_MESSAGE_TIMEOUT, IDLE_TIMEOUT, Server)
from kvpool.epp.health import DEFAULT_HEALTH_PORT, HealthPort
from kvpool.epp.metrics import DEFAULT_METRICS_PORT, MetricsPort
from kvpool.epp.rewrite import load_rewrites
from kvpool.router import cli as router_cli

if TYPE_CHECKING:  # picker.py and service.py need the epp extra: imported when run
    from kvpool.epp.picker import Picker

__all__ = ["DEFAULT_PORT", "READY_PREFIX", "add_arguments", "health_port", "limits", "main",
           "metrics_port", "missing_extra", "picking", "run"]

READY_PREFIX = "kvpool epp: listening on grpc://"
DEFAULT_PORT = 9002  # the Inference Extension's endpoint-picker port
# the transport's cap on one message (memory): a body chunk past --max-body-bytes is the
# picker's 413, so the cap leaves room for any chunk Envoy sends (its buffer limits: 4 MiB in
# deploy/envoy/envoy.yaml)
MESSAGE_SLACK = 8 << 20
CALLS_PER_CONNECTION = 4  # largest calls the default --max-connection-bytes holds at least


def add_arguments(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    router_cli.add_arguments(p, port=DEFAULT_PORT)
    p.add_argument("--max-connections", type=int, default=DEFAULT_MAX_CONNECTIONS, metavar="N",
                   help="open gRPC connections; past it a new one is closed at once (default "
                        f"{DEFAULT_MAX_CONNECTIONS})")
    p.add_argument("--max-connection-bytes", type=int, default=None, metavar="N",
                   help="request bytes one connection's open calls may hold (its HTTP/2 "
                        f"window; default {DEFAULT_CONNECTION_BYTES >> 20} MiB, or "
                        f"{CALLS_PER_CONNECTION} of the largest call when --max-body-bytes "
                        "makes that more)")
    p.add_argument("--max-held-bytes", type=int, default=None, metavar="N",
                   help="bytes all calls may hold together (answers held back: half at most)"
                        "; past it the connection holding the most is closed (default "
                        f"{DEFAULT_HELD_BYTES >> 30} GiB, or --max-connection-bytes when that "
                        "is more)")
    p.add_argument("--max-open-streams", type=int, default=DEFAULT_MAX_OPEN_STREAMS,
                   metavar="N", help="gRPC calls open on all connections together; past it a "
                   "new stream is refused with RST_STREAM REFUSED_STREAM (default "
                   f"{DEFAULT_MAX_OPEN_STREAMS})")
    add_timeouts(p)
    p.add_argument("--metrics-port", type=int, default=DEFAULT_METRICS_PORT, metavar="N",
                   help="port of GET /metrics (Prometheus) and GET /health (0: any free; -1: "
                        f"not served; default {DEFAULT_METRICS_PORT}, as the Inference "
                        "Extension's picker)")
    p.add_argument("--metrics-host", default=None, metavar="H",
                   help="address the metrics port binds (default: --host's, itself "
                        "127.0.0.1 unless given)")
    p.add_argument("--grpc-health-port", type=int, default=DEFAULT_HEALTH_PORT, metavar="N",
                   help="port of the gRPC Health Checking Protocol on --host (0: any free; -1: "
                        f"not served; default {DEFAULT_HEALTH_PORT}, as the Inference "
                        "Extension's picker)")
    add_fallbacks(p)
    p.add_argument("--model-rewrites", default=None, metavar="FILE",
                   help="an InferenceModelRewrite (YAML or JSON: its spec.rules, matches and "
                        "weighted targets): a request's body model is rewritten to a target "
                        "before the pick (docs/epp.md, \"Model rewrite and traffic splitting\")")
    return p


def add_timeouts(p: argparse.ArgumentParser) -> None:
    """``--idle-timeout`` and ``--first-message-timeout`` (listener.py, silence.py)."""
    p.add_argument("--idle-timeout", type=float, default=IDLE_TIMEOUT, metavar="SECONDS",
                   help="a gRPC connection with no call open this long is closed gracefully "
                        f"(GOAWAY NO_ERROR; 0: never; default {IDLE_TIMEOUT:g})")
    p.add_argument("--first-message-timeout", type=float, default=FIRST_MESSAGE_TIMEOUT,
                   metavar="SECONDS",
                   help="a gRPC call that has sent no message this long is ended "
                        "DEADLINE_EXCEEDED (Envoy sends its first at once; above 0; default "
                        f"{FIRST_MESSAGE_TIMEOUT:g})")


def add_fallbacks(p: argparse.ArgumentParser) -> None:
    """``--fallbacks N`` (picker.py NOTE(fallbacks))."""
    p.add_argument("--fallbacks", type=int, default=0, metavar="N",
                   help="after the chosen replica, list up to N more healthy ones in the "
                        "router's order (the protocol's ip:port,ip:port fallbacks) for a proxy "
                        "that retries down the list (deploy/envoy/envoy-fallback.yaml); "
                        "default 0: one endpoint, as an ORIGINAL_DST cluster reads")


def health_port(args: argparse.Namespace) -> HealthPort | None:
    """The gRPC health port the flags ask for (None: -1); ValueError past the range."""
    if not -1 <= args.grpc_health_port <= 65535:
        raise ValueError(f"--grpc-health-port {args.grpc_health_port}: use 0 to 65535 (0: any "
                         "free port), or -1 to serve none")
    return None if args.grpc_health_port < 0 else HealthPort(args.host, args.grpc_health_port)


def metrics_port(args: argparse.Namespace) -> MetricsPort | None:
    """The metrics port the flags ask for (None: -1, not served); ValueError past the range."""
    if not -1 <= args.metrics_port <= 65535:
        raise ValueError(f"--metrics-port {args.metrics_port}: use 0 to 65535 (0: any free "
                         "port), or -1 to serve no metrics")
    if args.metrics_port < 0:
        return None
    return MetricsPort(args.metrics_host or args.host, args.metrics_port)


def limits(max_body_bytes: int, max_connections: int = DEFAULT_MAX_CONNECTIONS,
           max_connection_bytes: int | None = None,
           max_held_bytes: int | None = None,
           max_open_streams: int = DEFAULT_MAX_OPEN_STREAMS,
           idle_timeout: float = IDLE_TIMEOUT,
           first_message_timeout: float = FIRST_MESSAGE_TIMEOUT) -> dict[str, float]:
    """The transport's limits (Server's keywords) for bodies of at most ``max_body_bytes``;
    ValueError names the flag that cannot work."""
    max_message = max_body_bytes + MESSAGE_SLACK
    least = max_message + ENVELOPE  # one largest call (listener.py)
    if max_connection_bytes is None:
        max_connection_bytes = max(DEFAULT_CONNECTION_BYTES, CALLS_PER_CONNECTION * least)
    if max_connection_bytes < least:
        raise ValueError(f"--max-connection-bytes {max_connection_bytes}: use at least {least} "
                         f"(--max-body-bytes plus {MESSAGE_SLACK >> 20} MiB for one call)")
    if max_connections < 1:
        raise ValueError(f"--max-connections {max_connections}: use a positive count")
    if max_open_streams < 1:
        raise ValueError(f"--max-open-streams {max_open_streams}: use a positive count")
    if not (math.isfinite(idle_timeout) and idle_timeout >= 0):
        raise ValueError(f"--idle-timeout {idle_timeout:g}: use a number of seconds, at least "
                         "0 (0: connections are never closed for being idle)")
    if not (math.isfinite(first_message_timeout) and first_message_timeout > 0):
        raise ValueError(f"--first-message-timeout {first_message_timeout:g}: use a number of "
                         "seconds above 0 (Envoy sends a call's first message at once)")
    if max_held_bytes is None:  # NOTE(held-budget) in listener.py
        max_held_bytes = max(DEFAULT_HELD_BYTES, max_connection_bytes)
    if max_held_bytes < max_connection_bytes:
        raise ValueError(f"--max-held-bytes {max_held_bytes}: use at least "
                         f"--max-connection-bytes ({max_connection_bytes})")
    return {"max_message": max_message, "max_connections": max_connections,
            "max_connection_bytes": max_connection_bytes, "max_held_bytes": max_held_bytes,
            "max_open_streams": max_open_streams, "idle_timeout": idle_timeout,
            "first_message_timeout": first_message_timeout}


@contextlib.asynccontextmanager
async def picking(picker: Picker, host: str, port: int,
                  max_connections: int = DEFAULT_MAX_CONNECTIONS,
                  max_connection_bytes: int | None = None,
                  max_held_bytes: int | None = None,
                  metrics: MetricsPort | None = None,
                  max_open_streams: int = DEFAULT_MAX_OPEN_STREAMS,
                  idle_timeout: float = IDLE_TIMEOUT,
                  first_message_timeout: float = FIRST_MESSAGE_TIMEOUT) -> AsyncIterator[int]:
    """``picker`` started and served over gRPC on ``host:port``, and on ``metrics`` (its
    ``port`` the bound one) when given; yields the gRPC port."""
    from kvpool.epp.service import EndpointPicker

    service = EndpointPicker(picker)
    server = Server(service.process, **limits(
        picker.router.max_body_bytes, max_connections, max_connection_bytes, max_held_bytes,
        max_open_streams, idle_timeout, first_message_timeout))
    await picker.start()
    try:
        bound = await server.start(host, port)
        if metrics is not None:
            await metrics.start(picker, server)
        yield bound
    finally:
        if metrics is not None:
            await metrics.stop()
        service.let_answers_go()  # answers in flight go on unprocessed (NOTE(answer-phase))
        service.no_endpoint.warnings.flush()  # NOTE(said-counts) in kvpool/throttle.py
        await server.stop(grace=5)  # streams in flight get 5 s to finish their decision
        await picker.close()


async def serve(picker: Picker, args: argparse.Namespace, metrics: MetricsPort | None = None,
                health: HealthPort | None = None) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop.set)
    host = args.host
    async with picking(picker, host, args.port, args.max_connections,
                       args.max_connection_bytes, args.max_held_bytes, metrics,
                       args.max_open_streams, args.idle_timeout,
                       args.first_message_timeout) as bound:
        if health is not None:  # up once the picker is, down first at a stop (health.py)
            await health.start()
        try:
            exposed = "".join(f", {what} on {port.url}" for what, port in (
                ("gRPC health", health), ("metrics", metrics)) if port is not None)
            print(f"{READY_PREFIX}{host}:{bound} ({len(picker.router.replicas.replicas)} "
                  f"replicas){exposed}", flush=True)
            await stop.wait()
        finally:
            if health is not None:
                await health.stop()


def missing_extra() -> str | None:
    """The module of the ``epp`` extra (grpcio, protobuf, xds-protos) that is not installed;
    None when the picker can run. The parser needs none of them, so --help works without."""
    try:
        import grpc  # noqa: F401  (health.py's server)
        import kvpool.epp.service  # noqa: F401  (Envoy's ext_proc messages: protobuf, xds)
    except ModuleNotFoundError as exc:
        if (exc.name or "kvpool").split(".")[0] == "kvpool":
            raise  # our own module missing is a bug, not an extra
        return exc.name
    return None


def main(args: argparse.Namespace | Sequence[str] | None = None) -> int:
    if not isinstance(args, argparse.Namespace):
        args = add_arguments(argparse.ArgumentParser(prog="kvpool epp")).parse_args(
            None if args is None else list(args))
    if (missing := missing_extra()) is not None:
        print(f"kvpool epp needs {missing} (not installed): pip install 'kvpool[epp]'",
              file=sys.stderr)
        return 2
    from kvpool.epp.picker import Picker
    logging.basicConfig(level=args.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.admin_token_file:
        print("kvpool epp: the picker serves no HTTP admin API; change its replicas with "
              "--replicas-file", file=sys.stderr)
        return 2
    try:  # the transport's flags checked before anything starts
        limits(args.max_body_bytes, args.max_connections, args.max_connection_bytes,
               args.max_held_bytes, args.max_open_streams, args.idle_timeout,
               args.first_message_timeout)
        metrics = metrics_port(args)
        health = health_port(args)
        rewrites = None if args.model_rewrites is None else load_rewrites(args.model_rewrites)
        picker = Picker(router_cli.build_router(args), rewrites, args.fallbacks)
    except (ValueError, OSError) as exc:
        print(f"kvpool epp: {exc}", file=sys.stderr)
        return 2
    with asyncio.Runner(loop_factory=router_cli.event_loop_factory()) as runner:
        try:
            runner.run(serve(picker, args, metrics, health))
        except OSError as exc:  # a port taken or not ours to bind: said, no traceback
            print(f"kvpool epp: {exc}", file=sys.stderr)
            return 1
    return 0


run = main  # the name kvpool.cli's command registry looks for

if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
