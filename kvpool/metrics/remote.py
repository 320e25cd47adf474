"""Prometheus export of one remote tier: ``kvpool_remote_*`` (DESIGN.md "Scale-out").

Counters and the breaker gauge come from the tier's ``stats()`` copy at scrape time; the
probe/get/put latency histograms are observed by the tier itself through
:meth:`RemoteMetrics.observe` (pass it as ``RedisTier(observer=...)``). Duck-typed on the
stats' fields so metrics does not import ``kvpool.remote`` (a sibling layer).

These names are kept apart from ``collector.METRIC_NAMES`` until the Grafana row that shows
them lands (the dashboard test requires every METRIC_NAMES entry on the dashboard).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from kvpool.metrics.collector import LatencyHistogram

REMOTE_BUCKETS = (0.0001, 0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                  0.5, 1.0, 2.5)
REMOTE_METRIC_NAMES = (
    "kvpool_remote_probes_total", "kvpool_remote_hit_blocks_total",
    "kvpool_remote_miss_blocks_total", "kvpool_remote_get_bytes_total",
    "kvpool_remote_put_bytes_total", "kvpool_remote_puts_dropped_total",
    "kvpool_remote_errors_total", "kvpool_remote_breaker_state",
    "kvpool_remote_probe_seconds", "kvpool_remote_get_seconds", "kvpool_remote_put_seconds",
)
# The error kinds always exported (at 0 too), so a dashboard's rate() has a series to start.
_KINDS = ("timeout", "connection", "response", "breaker_open", "corrupt", "short", "foreign")


class _RemoteCollector(Collector):
    def __init__(self, stats_fn: Callable[[], Any]) -> None:
        self._stats_fn = stats_fn

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        s = self._stats_fn()
        for name, doc, v in (
                ("probes", "Remote prefix probes (one round trip each).", s.probes),
                ("hit_blocks", "Blocks found by remote probes (leading runs).", s.hit_blocks),
                ("miss_blocks", "Blocks probed remotely and not found.", s.miss_blocks),
                ("get_bytes", "Checked value bytes read from the remote tier.", s.get_bytes),
                ("put_bytes", "Value bytes newly stored in the remote tier.", s.put_bytes),
                ("puts_dropped", "Values not stored (failure, breaker open, backpressure).",
                 s.puts_dropped)):
            fam = CounterMetricFamily(f"kvpool_remote_{name}", doc)
            fam.add_metric([], v)
            yield fam
        err = CounterMetricFamily("kvpool_remote_errors", "Remote tier errors by kind.",
                                  labels=["kind"])
        for kind in sorted(set(_KINDS) | set(s.errors)):
            err.add_metric([kind], s.errors.get(kind, 0))
        yield err
        yield GaugeMetricFamily("kvpool_remote_breaker_state", "Circuit breaker: 0 closed, "
                                "1 half-open, 2 open.", value=s.breaker_state)


class RemoteMetrics:
    """The remote tier's families on a registry (the server's, or a private one)."""

    def __init__(self, stats_fn: Callable[[], Any],
                 registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self.registry.register(_RemoteCollector(stats_fn))
        self.hists = {op: LatencyHistogram(f"kvpool_remote_{op}_seconds",
                                           f"Remote tier {op} round trip time.", REMOTE_BUCKETS)
                      for op in ("probe", "get", "put")}
        for h in self.hists.values():
            self.registry.register(h)

    def observe(self, op: str, seconds: float) -> None:
        """The tier's observer hook; ops without a histogram (touch, health) are ignored."""
        h = self.hists.get(op)
        if h is not None:
            h.observe(seconds)
