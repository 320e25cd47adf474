"""Prometheus metrics on a private CollectorRegistry.

Gauges and monotonic counters come from a :class:`MetricsSnapshot` built at scrape time (one
lock-free read of the pools, never the pool lock); latency histograms are observed by the
engine as requests progress. Names are DESIGN.md's; the README maps them to vLLM's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from kvpool.metrics.snapshot import MetricsSnapshot

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# NOTE(scrape): every bucket is a line rendered per scrape; 14 keep quantiles usable and the
# render of all five histograms well under a millisecond.
LATENCY_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
                   80.0)
STEP_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)

# Every metric family this module exports (the Grafana dashboard test checks against it).
METRIC_NAMES = (
    "kvpool_cache_usage_ratio", "kvpool_free_blocks", "kvpool_blocks", "kvpool_cached_blocks",
    "kvpool_fragmentation_ratio", "kvpool_swap_blocks_total", "kvpool_swap_bytes_total",
    "kvpool_copy_blocks_total", "kvpool_preemptions_total", "kvpool_prefix_cache_queries_total",
    "kvpool_prefix_cache_hits_total", "kvpool_evictions_total", "kvpool_requests",
    "kvpool_prompt_tokens_total", "kvpool_generation_tokens_total",
    "kvpool_invariant_violations_total", "kvpool_time_to_first_token_seconds",
    "kvpool_inter_token_latency_seconds", "kvpool_e2e_request_latency_seconds",
    "kvpool_request_queue_time_seconds", "kvpool_step_seconds",
)


class _SnapshotCollector(Collector):
    """Turns one snapshot per scrape into metric families."""

    def __init__(self, snapshot_fn: Callable[[], MetricsSnapshot]) -> None:
        self._snapshot_fn = snapshot_fn

    def describe(self) -> list[Metric]:
        return []  # dynamic collector: no describe-time snapshot (it would run at register)

    def collect(self) -> Iterator[Metric]:
        s = self._snapshot_fn()
        m = s.manager
        pools = (("device", m.device), ("host", m.host))

        def gauge(name, doc, labels=()):
            return GaugeMetricFamily(name, doc, labels=list(labels))

        def counter(name, doc, labels=()):
            # prometheus_client appends _total to counter samples itself
            return CounterMetricFamily(name.removesuffix("_total"), doc, labels=list(labels))

        usage = gauge("kvpool_cache_usage_ratio", "Fraction of KV blocks in use.", ["tier"])
        free = gauge("kvpool_free_blocks", "Blocks with no content, ready to allocate.", ["tier"])
        total = gauge("kvpool_blocks", "Blocks in the pool.", ["tier"])
        cached = gauge("kvpool_cached_blocks", "Blocks holding prefix-cached content "
                       "(in use or evictable).", ["tier"])
        for tier, p in pools:
            usage.add_metric([tier], p.usage)
            free.add_metric([tier], p.num_free)
            total.add_metric([tier], p.num_blocks)
            cached.add_metric([tier], p.num_cached)
        yield from (usage, free, total, cached)

        frag = gauge("kvpool_fragmentation_ratio", "Internal: unused slots of used blocks; "
                     "external: 1 - largest free run / free blocks.", ["tier", "kind"])
        frag.add_metric(["device", "internal"], s.fragmentation.internal)
        frag.add_metric(["device", "external"], s.fragmentation.external)
        frag.add_metric(["host", "external"], s.host_external_fragmentation)
        yield frag

        swap_blocks = counter("kvpool_swap_blocks_total", "Blocks swapped.", ["direction"])
        swap_blocks.add_metric(["out"], m.swap_out_blocks)
        swap_blocks.add_metric(["in"], m.swap_in_blocks)
        yield swap_blocks
        swap_bytes = counter("kvpool_swap_bytes_total", "Bytes swapped.", ["direction"])
        for d in ("in", "out"):
            swap_bytes.add_metric([d], s.swap_bytes.get(d, 0))
        yield swap_bytes

        copies = counter("kvpool_copy_blocks_total", "Block copies inside the device pool.",
                         ["reason"])
        copies.add_metric(["cow"], s.copy_blocks.get("cow", m.cow_copies))
        copies.add_metric(["defrag"], s.copy_blocks.get("defrag", m.defrag_moves))
        yield copies

        pre = counter("kvpool_preemptions_total", "Preempted requests.", ["mode"])
        for mode in ("swap", "recompute"):
            pre.add_metric([mode], s.preemptions.get(mode, 0))
        yield pre

        q = counter("kvpool_prefix_cache_queries_total", "Prompt tokens looked up in the "
                    "prefix cache.")
        q.add_metric([], m.prefix_query_tokens)
        h = counter("kvpool_prefix_cache_hits_total", "Prompt tokens served by the prefix "
                    "cache.")
        h.add_metric([], m.prefix_hit_tokens)
        yield from (q, h)

        ev = counter("kvpool_evictions_total", "Cached blocks evicted.", ["reason"])
        reasons = dict(s.evictions) or {"capacity": m.device.evictions}
        for reason, n in sorted(reasons.items()):
            ev.add_metric([reason], n)
        yield ev

        req = gauge("kvpool_requests", "Requests by scheduler state.", ["state"])
        for state in ("running", "waiting", "swapped"):
            req.add_metric([state], s.requests.get(state, 0))
        yield req

        pt = counter("kvpool_prompt_tokens_total", "Prompt tokens admitted.")
        pt.add_metric([], s.prompt_tokens)
        gt = counter("kvpool_generation_tokens_total", "Tokens generated.")
        gt.add_metric([], s.generation_tokens)
        iv = counter("kvpool_invariant_violations_total", "Invariant checks that failed at "
                     "run time.")
        iv.add_metric([], s.invariant_violations)
        yield from (pt, gt, iv)


class KVPoolMetrics:
    """The server's metrics: one private registry, a snapshot collector, five histograms."""

    def __init__(self, snapshot_fn: Callable[[], MetricsSnapshot],
                 registry: CollectorRegistry | None = None) -> None:
        self.registry = registry if registry is not None else CollectorRegistry()
        self._heads: dict[tuple, str] = {}  # HELP/TYPE lines per family
        self.registry.register(_SnapshotCollector(snapshot_fn))

        def hist(name: str, doc: str, buckets=LATENCY_BUCKETS) -> Histogram:
            return Histogram(name, doc, buckets=buckets, registry=self.registry)

        self.ttft = hist("kvpool_time_to_first_token_seconds", "Time to first token.")
        self.itl = hist("kvpool_inter_token_latency_seconds", "Time between output tokens.")
        self.e2e = hist("kvpool_e2e_request_latency_seconds", "Request latency, arrival to "
                        "finish.")
        self.queue = hist("kvpool_request_queue_time_seconds", "Time waiting before the first "
                          "schedule.")
        self.step = hist("kvpool_step_seconds", "Engine step time (schedule, copies, forward, "
                         "sample).", STEP_BUCKETS)

    def render(self) -> bytes:
        """The Prometheus text exposition (format 0.0.4) of the registry.

        Same samples and lines as ``prometheus_client.generate_latest`` (a test compares them),
        written by a lean formatter: generate_latest's per-sample escaping and float
        formatting cost ~1.5 ms per scrape on a slow core, most of a 5 ms p99 budget."""
        out: list[str] = []
        heads = self._heads
        for fam in self.registry.collect():
            key = (fam.name, fam.type, fam.documentation)
            head = heads.get(key)
            if head is None:
                name = fam.name + "_total" if fam.type == "counter" else fam.name
                doc = fam.documentation.replace("\\", "\\\\").replace("\n", "\\n")
                head = heads[key] = f"# HELP {name} {doc}\n# TYPE {name} {fam.type}\n"
            out.append(head)
            for smp in fam.samples:
                if smp.name.endswith("_created"):
                    continue
                if smp.labels:
                    lab = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(smp.labels.items()))
                    out.append(f"{smp.name}{{{lab}}} {_gofloat(smp.value)}\n")
                else:
                    out.append(f"{smp.name} {_gofloat(smp.value)}\n")
        return "".join(out).encode()

    def render_reference(self) -> bytes:
        """prometheus_client's own exposition of the same registry (for tests)."""
        return generate_latest(self.registry)


def _escape(v: str) -> str:
    if "\\" in v or '"' in v or "\n" in v:
        return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return v


def _gofloat(v: float) -> str:
    if v == math.inf:
        return "+Inf"
    if v == -math.inf:
        return "-Inf"
    if v != v:
        return "NaN"
    if -1e6 < v < 1e6:  # the common case; Go's format only differs for large magnitudes
        return repr(float(v))
    return floatToGoString(v)
