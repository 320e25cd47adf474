"""The picker's Prometheus port: GET /metrics and GET /health over HTTP on a port of its own
(``kvpool epp --metrics-port``, 9090 by default as the Inference Extension's own picker;
docs/epp.md, "Metrics").

/metrics is the registry of the picker's ``Router`` (``Router.metrics.registry``: its decisions,
predicted hits, healthy replicas, Responses API ids and, with --kv-events, the KV-event
routing's figures), served by the router's own handler, with the transport's figures added to
that registry for as long as the port is open (``TransportCollector``). /health is the router's
too: 200 while a replica is healthy, 503 otherwise, JSON naming the healthy replicas.

NOTE(scrape-time): every kvpool_epp_* figure is a plain attribute the picker and its server keep
anyway (``Picker.picks``, ``Server.refused``, ...), read when Prometheus scrapes; the picking
path updates no metric object of its own.

NOTE(metrics-edge): the port is served on the replica's guarded listener
(kvpool.server.connections): at most METRICS_CONNECTIONS connections open (a scraper needs
one, a probe one more), a request head within 10 s, aiohttp's own limits on a head (a header
over 8190 bytes is a 400, OpenAI error JSON, one INFO line) and idle connections closed after
15 s. So a client of this port holds a few descriptors at most and never the gRPC port's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import TYPE_CHECKING

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from kvpool.epp.calls import STATUS_NAMES
from kvpool.server.connections import ConnectionLimiter, start_listener
from kvpool.server.middleware import error_middleware

if TYPE_CHECKING:
    from kvpool.epp.listener import Server
    from kvpool.epp.picker import Picker

__all__ = ["DEFAULT_METRICS_PORT", "METRICS_CONNECTIONS", "MetricsPort", "TransportCollector"]

DEFAULT_METRICS_PORT = 9090  # the Inference Extension's endpoint picker serves its metrics here
METRICS_CONNECTIONS = 32  # NOTE(metrics-edge)
SHUTDOWN_TIMEOUT = 2.0  # seconds a scrape in flight gets at the picker's stop


class TransportCollector:
    """The picker's and its gRPC server's counts as kvpool_epp_* families, read at each
    collect (a prometheus_client collector; NOTE(scrape-time))."""

    def __init__(self, picker: Picker, server: Server) -> None:
        self.picker, self.server = picker, server

    def collect(self) -> Iterator[Metric]:
        picker, server = self.picker, self.server
        count, level = CounterMetricFamily, GaugeMetricFamily  # a counter gets "_total"
        yield count("kvpool_epp_picks", "Requests the picker gave an endpoint.",
                    value=picker.picks)
        yield count("kvpool_epp_full_duplex_bodies",
                    "Request bodies Envoy streamed in full duplex (decided at their end).",
                    value=picker.full_duplex)
        yield level("kvpool_epp_connections", "Open gRPC connections (Envoy's and any other).",
                    value=len(server.connections))
        yield level("kvpool_epp_max_connections", "The open connection cap (--max-connections).",
                    value=server.max_connections)
        refused = count("kvpool_epp_connections_refused",
                        "Connections closed unserved, by reason: max_connections (the cap), "
                        "tls (a TLS ClientHello: the port is plaintext h2c), http1 (an HTTP/1.x "
                        "request), not_h2c (other bytes than the HTTP/2 preface), "
                        "preface_timeout (no preface in time).", labels=["reason"])
        refused.add_metric(["max_connections"], server.refused)
        for reason, n in sorted(server.not_h2c.items()):
            refused.add_metric([reason], n)
        yield refused
        yield count("kvpool_epp_connections_cut",
                    "Connections closed with GOAWAY ENHANCE_YOUR_CALM: the largest holder at the "
                    "held-bytes budget or the open call cap, or a peer resetting calls past "
                    "its budget.", value=server.cut)
        yield count("kvpool_epp_connections_idle_closed",
                    "Connections closed gracefully (GOAWAY NO_ERROR) for want of a call: "
                    "none open for --idle-timeout seconds, or the longest without one (or with "
                    "silent calls only) when a new connection came at --max-connections.",
                    value=server.idle_closed)
        yield level("kvpool_epp_held_bytes",
                    "Bytes the open calls hold now (request bodies until their decision, "
                    "answer bytes held back for a model restore or a response id).",
                    value=server.buffered)
        yield level("kvpool_epp_max_held_bytes", "The held-bytes budget (--max-held-bytes).",
                    value=server.max_held_bytes)
        yield from self.calls()

    def calls(self) -> Iterator[Metric]:
        """The calls' figures: open, refused at the cap, ended in error; the answers'."""
        server = self.server
        count, level = CounterMetricFamily, GaugeMetricFamily
        yield level("kvpool_epp_open_streams", "gRPC calls open on all connections.",
                    value=server.open_streams)
        yield level("kvpool_epp_max_open_streams", "The open call cap (--max-open-streams).",
                    value=server.max_open_streams)
        refused = count("kvpool_epp_streams_refused",
                        "New streams refused (RST_STREAM REFUSED_STREAM), by reason: "
                        "max_open_streams (the process's open call cap), "
                        "max_concurrent_streams (the connection's own cap, 1024), going_away "
                        "(its connection past a GOAWAY).", labels=["reason"])
        for reason, n in sorted(server.streams_refused.items()):
            refused.add_metric([reason], n)
        yield refused
        failed = count("kvpool_epp_calls_failed",
                       "Calls ended with a gRPC status other than OK (RESOURCE_EXHAUSTED: a "
                       "message or a call past its bound; DEADLINE_EXCEEDED: no message within "
                       "--first-message-timeout).", labels=["code"])
        for status, n in sorted(server.failed.items()):
            failed.add_metric([STATUS_NAMES.get(status, str(status))], n)
        yield failed
        yield count("kvpool_epp_calls_crowded_out",
                    "Calls ended RESOURCE_EXHAUSTED as the oldest holding bytes when their "
                    "connection's window was full (--max-connection-bytes), so others could "
                    "send (also in kvpool_epp_calls_failed_total).", value=server.room.ended)
        yield from self.answers()

    def answers(self) -> Iterator[Metric]:
        """The picker's own error answers, why no endpoint was found, Envoy's failovers."""
        picker, count = self.picker, CounterMetricFamily
        errors = count("kvpool_epp_error_answers",
                       "The picker's own error answers to Envoy (ImmediateResponse), by HTTP "
                       "status: 400 not a JSON object, 413 body too large, 502 a pinned POST "
                       "follow-up its holder dropped, 503 no healthy replica, 504 a pinned "
                       "POST follow-up its holder went silent on.",
                       labels=["status"])
        for status, n in sorted(picker.errors.items()):
            errors.add_metric([str(status)], n)
        yield errors
        unrouted = count("kvpool_epp_no_endpoint_answers",
                         "Of the 503 error answers, those for a request that found no "
                         "endpoint, by reason: no_replica (no healthy replica), subset_down "
                         "(the subset hint names known replicas, none healthy), "
                         "subset_unknown (the hint names no replica the picker knows: its "
                         "replica addresses are not the pod addresses Envoy sends).",
                         labels=["reason"])
        for reason, n in picker.no_endpoint.items():
            unrouted.add_metric([reason], n)
        yield unrouted
        yield count("kvpool_epp_failovers",
                    "Answers Envoy served after more than one attempt (x-envoy-attempt-count "
                    "above 1: the chosen replica failed before taking the request and Envoy "
                    "went down the --fallbacks list); 0 without --fallbacks.",
                    value=0 if picker.retries is None else picker.retries.failovers)

    def describe(self) -> list[Metric]:
        """The families' names, so registering twice is refused as a duplicate."""
        return list(self.collect())


class MetricsPort:
    """/metrics and /health on ``host:port`` (0: any free port; ``port`` is the bound one once
    started) for a running picker and its gRPC server."""

    def __init__(self, host: str, port: int = DEFAULT_METRICS_PORT,
                 max_connections: int = METRICS_CONNECTIONS) -> None:
        self.host, self.port = host, port
        self.limiter = ConnectionLimiter(max_connections)
        self.collector: TransportCollector | None = None
        self.registry: CollectorRegistry | None = None  # the router's, while it holds ours
        self.runner: web.AppRunner | None = None
        self.listener: asyncio.AbstractServer | None = None

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    async def start(self, picker: Picker, server: Server) -> int:
        """Serve ``picker``'s router registry with ``server``'s figures; the bound port."""
        router = picker.router
        self.collector = TransportCollector(picker, server)
        self.registry = router.metrics.registry
        self.registry.register(self.collector)
        app = web.Application(middlewares=[error_middleware])
        # NOTE(metrics-path) in kvpool/server/handlers.py: vLLM's /metrics<anything>
        app.router.add_get("/metrics{path:.*}", router.render_metrics)
        app.router.add_get("/health", router.health)
        self.limiter.flush_at_cleanup(app)
        self.runner = web.AppRunner(app, handler_cancellation=True,
                                    shutdown_timeout=SHUTDOWN_TIMEOUT)
        await self.runner.setup()
        self.listener = await start_listener(self.runner, self.host, self.port,
                                             limiter=self.limiter)
        self.port = self.listener.sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        """Close the port and take the transport's figures out of the router's registry (also
        after a start that failed midway)."""
        if self.listener is not None:
            self.listener.close()
            self.listener = None
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None
        if self.registry is not None:
            self.registry.unregister(self.collector)
            self.registry = self.collector = None
