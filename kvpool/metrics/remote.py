"""Prometheus export of one remote tier: ``kvpool_remote_*`` (docs/architecture.md#scale-out).

Counters and the breaker gauge come from the tier's ``stats()`` copy at scrape time; the
probe/get/put latency histograms are observed by the tier itself through
:meth:`RemoteMetrics.observe` (pass it as ``RedisTier(observer=...)``), and the prefetch-wait
histogram by the engine's read path (``RemoteLink.observe``). Duck-typed on the stats' fields
so metrics does not import ``kvpool.remote`` (a sibling layer).

On a server, :meth:`RemoteMetrics.attach` puts the same families on the server's
:class:`~kvpool.metrics.collector.KVPoolMetrics`, so ``/metrics`` (its fast ``render`` and the
reference exposition alike) carries them next to the engine's.

These names are kept apart from ``collector.METRIC_NAMES`` until the Grafana row that shows
them lands (the dashboard test requires every METRIC_NAMES entry on the dashboard).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from kvpool.metrics.collector import Family, KVPoolMetrics, LatencyHistogram, metric_families

REMOTE_BUCKETS = (0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                  0.5, 1.0, 2.5)
HIST_OPS = ("probe", "get", "put", "prefetch_wait")
REMOTE_METRIC_NAMES = (
    "kvpool_remote_probes_total", "kvpool_remote_hit_blocks_total",
    "kvpool_remote_miss_blocks_total", "kvpool_remote_get_bytes_total",
    "kvpool_remote_put_bytes_total", "kvpool_remote_puts_dropped_total",
    "kvpool_remote_puts_paused_total", "kvpool_remote_oom_pauses_total",
    "kvpool_remote_health_checks_total", "kvpool_remote_health_failed_total",
    "kvpool_remote_breaker_opens_total", "kvpool_remote_errors_total",
    "kvpool_remote_redirects_total", "kvpool_remote_dedup_probes_total",
    "kvpool_remote_dedup_hit_blocks_total", "kvpool_remote_read_requests_total",
    "kvpool_remote_fetched_blocks_total",
    "kvpool_remote_breaker_state", "kvpool_remote_breakers_open",
    "kvpool_remote_probe_seconds", "kvpool_remote_get_seconds", "kvpool_remote_put_seconds",
    "kvpool_remote_prefetch_wait_seconds",
)
# The error kinds always exported (at 0 too), so a dashboard's rate() has a series to start:
# every kind kvpool.remote.tier.ERROR_KINDS names (not imported: a sibling layer).
_KINDS = ("timeout", "connection", "response", "breaker_open", "corrupt", "short", "foreign",
          "joined", "auth", "tls", "oom", "cluster", "noperm", "refused_server", "unsigned",
          "forged", "readonly")
# Read outcomes always exported: kvpool.remote.tier.READ_OUTCOMES (not imported, as _KINDS).
_OUTCOMES = ("fetched", "partial", "miss", "probe_failed", "short", "declined_cost", "unprobed",
             "no_host", "error")
_HIST_DOCS = {"probe": "Remote tier probe round trip time.",
              "get": "Remote tier get round trip time.",
              "put": "Remote tier put round trip time.",
              "prefetch_wait": "Time a request waited at admission for its remote prefix "
                               "(probe, cost model, fetch and landing)."}
_COUNTERS = (
    ("probes", "Remote prefix probes of requests (one round trip each; not the write "
               "path's, kvpool_remote_dedup_probes_total)."),
    ("hit_blocks", "Blocks found by requests' remote probes (leading runs; fetched or not: "
                   "kvpool_remote_fetched_blocks_total)."),
    ("miss_blocks", "Blocks requests probed remotely and not found."),
    ("dedup_probes", "The write path's probes: which computed blocks are stored already."),
    ("dedup_hit_blocks", "Blocks the write path found stored already (not sent again)."),
    ("fetched_blocks", "Blocks fetched from the remote tier and handed to the engine (what "
                       "the tier served)."),
    ("get_bytes", "Checked value bytes read from the remote tier."),
    ("put_bytes", "Value bytes newly stored in the remote tier."),
    ("puts_dropped", "Values not stored (failure, breaker open, backpressure)."),
    ("puts_paused", "Of the values not stored, those not sent while puts were paused after "
                    "an OOM reply."),
    ("oom_pauses", "Times an OOM reply from Redis paused the puts."),
    ("health_checks", "Background PINGs sent while the circuit breaker was open (each a "
                      "trial that closes it when answered)."),
    ("health_failed", "Of the background PINGs, the ones that failed (the breaker stayed "
                      "open)."),
    ("breaker_opens", "Circuit breaker openings (closed -> open transitions)."),
)


class _RemoteCollector(Collector):
    def __init__(self, families_fn: Callable[[], list[Family]]) -> None:
        self._families_fn = families_fn

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        return metric_families(self._families_fn())


class RemoteMetrics:
    """The remote tier's families on a private registry, and optionally on a server's."""

    def __init__(self, stats_fn: Callable[[], Any],
                 registry: CollectorRegistry | None = None) -> None:
        self._stats_fn = stats_fn
        self.registry = registry if registry is not None else CollectorRegistry()
        self.registry.register(_RemoteCollector(self.families))
        self.hists = {op: LatencyHistogram(f"kvpool_remote_{op}_seconds", _HIST_DOCS[op],
                                           REMOTE_BUCKETS) for op in HIST_OPS}
        for h in self.hists.values():
            self.registry.register(h)

    def families(self) -> list[Family]:
        """One stats copy as ``(name, type, doc, labelnames, samples)`` tuples."""
        s = self._stats_fn()
        out: list[Family] = [(f"kvpool_remote_{name}_total", "counter", doc, (),
                               [((), getattr(s, name))]) for name, doc in _COUNTERS]
        kinds = sorted(set(_KINDS) | set(s.errors))
        out.append(("kvpool_remote_errors_total", "counter", "Remote tier errors by kind.",
                    ("kind",), [((k,), s.errors.get(k, 0)) for k in kinds]))
        reads = getattr(s, "reads", {})
        out.append(("kvpool_remote_read_requests_total", "counter", "Requests' remote reads "
                    "by outcome: fetched, partial, miss, probe_failed, short, declined_cost "
                    "(the cost model chose recompute), unprobed (declined before the probe), "
                    "no_host, error.", ("outcome",),
                    [((o,), reads.get(o, 0)) for o in sorted(set(_OUTCOMES) | set(reads))]))
        moved = getattr(s, "redirects", {})
        out.append(("kvpool_remote_redirects_total", "counter", "MOVED/ASK replies the cluster "
                    "client followed, by kind (a stale slot map: after a failover or a "
                    "resharding).", ("kind",),
                    [((k,), moved.get(k, 0)) for k in sorted({"moved", "ask"} | set(moved))]))
        out.append(("kvpool_remote_breaker_state", "gauge", "Circuit breaker: 0 closed, "
                    "1 half-open, 2 open (on a cluster the most open of its nodes').", (),
                    [((), s.breaker_state)]))
        out.append(("kvpool_remote_breakers_open", "gauge", "Circuit breakers not closed: "
                    "the tier's one (0 or 1), on a cluster also one per master node "
                    "(its keys' calls are misses while it is open).", (),
                    [((), getattr(s, "breakers_open", 0))]))
        return out

    def attach(self, server: KVPoolMetrics) -> None:
        """Render these families with every scrape of ``server`` (``kvpool serve``'s
        /metrics): the counters as a source, the histograms after the engine's."""
        server.add_source(self.families)
        for h in self.hists.values():
            server.add_histogram(h)

    def observe(self, op: str, seconds: float) -> None:
        """The tier's (and the read path's) observer hook; ops without a histogram (touch,
        health) are ignored."""
        h = self.hists.get(op)
        if h is not None:
            h.observe(seconds)
