"""Prometheus metrics on a private CollectorRegistry.

Gauges and monotonic counters come from a :class:`MetricsSnapshot` built at scrape time (one
lock-free read of the pools, never the pool lock); latency histograms are observed by the
engine as requests progress. Names: docs/architecture.md#metrics; the README maps them to vLLM's.

RequestMetrics (request_metrics.py): the request-level series with vLLM's meaning.

NOTE(long-latency): the request latency histograms go on to 7680 s, as vLLM's do (TTFT's to
2560 s): ending at 80 s, a p99 query answered 80 however long requests took, and an SLO alert
above it could never fire. Their bounds are vLLM's own (NOTE(vllm-buckets) in vllm_series.py).
"""

from __future__ import annotations

import math
import threading
from bisect import bisect_left
from collections.abc import Callable, Iterator, Sequence
from itertools import accumulate
from typing import NamedTuple

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily,
                                    Metric)
from prometheus_client.registry import Collector
from prometheus_client.utils import floatToGoString

from kvpool.metrics.admission import ADMISSION_METRIC_NAMES, AdmissionRejections
from kvpool.metrics.snapshot import Family, MetricsSnapshot, snapshot_families
from kvpool.metrics.vllm_series import (ITERATION_TOKEN_BUCKETS, ITL_BUCKETS,
                                        REQUEST_LATENCY_BUCKETS, TTFT_BUCKETS, VLLM_HISTOGRAMS,
                                        VLLM_ITERATION_TOKENS, VLLM_METRIC_NAMES,
                                        engine_families, vllm_labels)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
# NOTE(scrape): every bucket is a line rendered per scrape; the latency histograms take vLLM's
# 19 to 22 (NOTE(vllm-buckets)) and the render of all of them stays well under a millisecond.
STEP_BUCKETS = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0)

# Every metric family this module exports (the Grafana dashboard test checks against it).
METRIC_NAMES = (
    "kvpool_cache_usage_ratio", "kvpool_free_blocks", "kvpool_allocatable_blocks",
    "kvpool_blocks", "kvpool_cached_blocks",
    "kvpool_fragmentation_ratio", "kvpool_swap_blocks_total", "kvpool_swap_bytes_total",
    "kvpool_copy_blocks_total", "kvpool_preemptions_total", "kvpool_prefix_cache_queries_total",
    "kvpool_prefix_cache_hits_total", "kvpool_evictions_total", "kvpool_requests",
    "kvpool_requests_in_flight",
    "kvpool_prompt_tokens_computed_total", "kvpool_generation_tokens_total",
    "kvpool_invariant_violations_total", "kvpool_time_to_first_token_seconds",
    "kvpool_inter_token_latency_seconds", "kvpool_e2e_request_latency_seconds",
    "kvpool_request_queue_time_seconds", "kvpool_step_seconds", "kvpool_iteration_tokens",
) + VLLM_METRIC_NAMES + ADMISSION_METRIC_NAMES


def metric_families(families: list[Family]) -> Iterator[Metric]:
    """Plain family tuples -> prometheus_client metric families."""
    for name, typ, doc, labelnames, samples in families:
        if typ == "counter":
            fam: Metric = CounterMetricFamily(name.removesuffix("_total"), doc,
                                              labels=list(labelnames))
        else:
            fam = GaugeMetricFamily(name, doc, labels=list(labelnames))
        for values, v in samples:
            fam.add_metric(list(values), v)
        yield fam


class _SourceCollector(Collector):
    """Families from an extra source (the server's connection counters) per scrape."""

    def __init__(self, families_fn: Callable[[], list[Family]]) -> None:
        self.families = families_fn

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        return metric_families(self.families())


class _SnapshotCollector(Collector):
    """Turns one snapshot per scrape into metric families.

    ``families`` builds plain tuples ``(name, type, doc, labelnames, [(labelvalues, value)])``
    (counter names end in ``_total``); ``collect`` wraps them for prometheus_client and
    :meth:`KVPoolMetrics.render` formats them directly."""

    def __init__(self, snapshot_fn: Callable[[], MetricsSnapshot], model_name: str,
                 cache_info: Sequence[tuple[str, str]]) -> None:
        self._snapshot_fn = snapshot_fn
        self._vllm = (model_name, tuple(cache_info))  # NOTE(vllm-names)

    def describe(self) -> list[Metric]:
        return []  # dynamic collector: no describe-time snapshot (it would run at register)

    def collect(self) -> Iterator[Metric]:
        return metric_families(self.families())

    def families(self) -> list[Family]:
        s = self._snapshot_fn()
        return snapshot_families(s) + engine_families(s, *self._vllm)


class LatencyHistogram(Collector):
    """A label-less histogram: flat per-bucket counts and a sum under one small lock.

    Replaces ``prometheus_client.Histogram`` (same exposition, checked by a test, minus its
    ``_created`` series) because its per-scrape ``collect`` builds ~20 sample objects per
    histogram; :meth:`lines` formats the counts with precomputed line prefixes instead.
    Invariant: ``_counts[i]`` observations fell in (bounds[i-1], bounds[i]]; the last slot is
    +Inf; ``sum(_counts)`` is the count."""

    def __init__(self, name: str, documentation: str, buckets: Sequence[float],
                 labels: Sequence[tuple[str, str]] = ()) -> None:
        """``labels``: constant (name, value) pairs on every series (e.g. model_name)."""
        bounds = tuple(float(b) for b in buckets if b != math.inf)
        if not bounds or list(bounds) != sorted(set(bounds)):
            raise ValueError(f"histogram {name}: buckets must be strictly increasing")
        self.name, self.documentation = name, documentation
        self._bounds = bounds
        self._counts = [0] * (len(bounds) + 1)
        self._sum = 0.0
        self._lock = threading.Lock()
        self._le = [floatToGoString(b) for b in bounds] + ["+Inf"]
        self._views: list[_View] = []
        self.alias(name, documentation, labels)

    def alias(self, name: str, documentation: str, labels: Sequence[tuple[str, str]]) -> None:
        """Write the same counts once more under ``name`` and ``labels`` (NOTE(vllm-names))."""
        labels = tuple(labels)
        # labels sorted by name, ``le`` among them, as prometheus_client writes them
        prefixes = [f"{name}_bucket{{{label_text(labels + (('le', le),))}}} " for le in self._le]
        tail = f"{{{label_text(labels)}}}" if labels else ""
        self._views.append(_View(name, documentation, labels, prefixes, tail,
                                 help_head(name, "histogram", documentation)))

    def observe(self, amount: float) -> None:
        i = bisect_left(self._bounds, amount)
        with self._lock:
            self._counts[i] += 1
            self._sum += amount

    def count(self) -> int:
        """Observations so far."""
        with self._lock:
            return sum(self._counts)

    def values(self) -> tuple[list[int], float]:
        """(cumulative bucket counts, sum), one consistent read."""
        with self._lock:
            counts, total = list(self._counts), self._sum
        return list(accumulate(counts)), total

    def describe(self) -> list[Metric]:
        return [HistogramMetricFamily(v.name, v.doc, labels=[k for k, _ in v.labels])
                for v in self._views]

    def collect(self) -> Iterator[Metric]:
        cum, total = self.values()
        for v in self._views:
            fam = HistogramMetricFamily(v.name, v.doc, labels=[k for k, _ in v.labels])
            fam.add_metric([x for _, x in v.labels],
                           [(le, float(n)) for le, n in zip(self._le, cum)], total)
            yield fam

    def lines(self, out: list[str]) -> None:
        cum, total = self.values()
        count, sum_ = float(cum[-1]), go_float(total)
        for v in self._views:
            out.append(v.head)
            out.extend(f"{p}{float(n)!r}\n" for p, n in zip(v.prefixes, cum))
            out.append(f"{v.name}_count{v.tail} {count!r}\n{v.name}_sum{v.tail} {sum_}\n")


class VllmIterations:
    """vllm:iteration_tokens_total, observed from kvpool's steps.

    NOTE(iteration-tokens): vLLM observes, per iteration that sampled, the prompt tokens
    computed for the requests that got their first token plus the tokens sampled (loggers.py
    record()). A step fed its prefill chunks (prefix-cache hits excluded) and one token per
    decode, and each decode samples one token: so the step's fed tokens plus its first tokens
    are vLLM's figure. A step that sampled nothing (a prompt's earlier chunk) carries its
    tokens on, as vLLM counts a prompt at its first token. A recompute after a preemption is
    not counted again (vLLM's stats count a prompt at the first token only), but the token it
    samples is (SchedulerOutput.stats_tokens). An n > 1 request's forks compute their shared
    prompt once and it counts once; vLLM's children each count the part of the prompt their
    prefix-cache lookup missed (the last partial block, for all but the first)."""

    def __init__(self, model_name: str) -> None:
        self.hist = LatencyHistogram(*VLLM_ITERATION_TOKENS, ITERATION_TOKEN_BUCKETS,
                                     vllm_labels(model_name))
        self._unsampled = 0  # tokens fed since the last step that sampled
        self._sampled = (0, 0)  # (first, later) tokens sampled so far, at the last step

    def step(self, tokens: int, first_tokens: int, later_tokens: int) -> None:
        """A step that fed ``tokens``; ``first_tokens`` / ``later_tokens``: sampled so far."""
        first = first_tokens - self._sampled[0]
        self._unsampled += tokens
        if first or later_tokens != self._sampled[1]:
            self._sampled = (first_tokens, later_tokens)
            self.hist.observe(self._unsampled + first)
            self._unsampled = 0


class _View(NamedTuple):
    """One name a LatencyHistogram's counts are written under."""

    name: str
    doc: str
    labels: tuple[tuple[str, str], ...]
    prefixes: list[str]  # 'name_bucket{labels,le="..."} ' per bucket
    tail: str  # '{labels}' of _count and _sum, or ''
    head: str  # its # HELP and # TYPE lines


class KVPoolMetrics:
    """The server's metrics: one private registry, a snapshot collector, seven histograms."""

    def __init__(self, snapshot_fn: Callable[[], MetricsSnapshot],
                 registry: CollectorRegistry | None = None, *,
                 model_name: str | None = None,
                 cache_info: Sequence[tuple[str, str]] = ()) -> None:
        """``model_name``: every histogram's label, as vLLM's (None: none on kvpool's, "" on
        vLLM's); ``cache_info``: vllm:cache_config_info's static labels (block_size, ...)."""
        self.registry = registry if registry is not None else CollectorRegistry()
        self._snapshot = _SnapshotCollector(snapshot_fn, model_name or "", cache_info)
        self.registry.register(self._snapshot)
        self._sources: list[_SourceCollector] = []
        # the request gate's refusals (admission.py NOTE(refusals)), before the histograms
        self.admission = AdmissionRejections(model_name or "")
        self.add_source(self.admission.families)
        self._prefixes: dict[tuple, str] = {}  # (name, labelnames, values) -> 'name{...} '
        self._heads: dict[tuple, str] = {}
        self._histograms(model_name)

    def _histograms(self, model_name: str | None) -> None:
        """The seven histograms, registered (their vLLM names aliased: NOTE(vllm-names))."""
        def hist(name: str, doc: str, buckets: Sequence[float]) -> LatencyHistogram:
            h = LatencyHistogram(name, doc, buckets,
                                 labels=(("model_name", model_name),) if model_name else ())
            if name in VLLM_HISTOGRAMS:  # NOTE(vllm-names)
                h.alias(*VLLM_HISTOGRAMS[name], vllm_labels(model_name or ""))
            self.registry.register(h)
            return h

        self.ttft = hist("kvpool_time_to_first_token_seconds", "Time to first token.",
                         TTFT_BUCKETS)
        self.itl = hist("kvpool_inter_token_latency_seconds", "Time between output tokens.",
                        ITL_BUCKETS)
        self.e2e = hist("kvpool_e2e_request_latency_seconds", "Request latency, arrival to "
                        "finish.", REQUEST_LATENCY_BUCKETS)
        self.queue = hist("kvpool_request_queue_time_seconds", "Time waiting before the first "
                          "schedule.", REQUEST_LATENCY_BUCKETS)
        self.prompt_tokens = 0  # request_metrics.py NOTE(prefill-count)
        self.step = hist("kvpool_step_seconds", "Engine step time (schedule, copies, forward, "
                         "sample).", STEP_BUCKETS)
        self.iteration_tokens = hist("kvpool_iteration_tokens", "Tokens computed per engine "
                                     "step (prefill chunks + decodes).", ITERATION_TOKEN_BUCKETS)
        self._hists = [self.ttft, self.itl, self.e2e, self.queue, self.step, self.iteration_tokens]
        self.vllm_iterations = VllmIterations(model_name or "")  # NOTE(iteration-tokens)
        self.add_histogram(self.vllm_iterations.hist)

    def observe_step(self, seconds: float, tokens: int, stats_tokens: int | None = None) -> None:
        """One engine step: its time, and the tokens it computed (a step of copies alone
        computed none, and is no iteration of vLLM's); ``stats_tokens``: those of them vLLM's
        stats count (SchedulerOutput.stats_tokens; None: all)."""
        self.step.observe(seconds)
        if tokens:
            self.iteration_tokens.observe(tokens)
        # every sampled token is a TTFT or an ITL observation (output_processor.py _accept)
        self.vllm_iterations.step(tokens if stats_tokens is None else stats_tokens,
                                  self.ttft.count(), self.itl.count())

    def add_source(self, families_fn: Callable[[], list[Family]]) -> None:
        """Render ``families_fn()`` (``(name, type, doc, labelnames, [(values, v)])`` tuples)
        with every scrape; for counters owned above the engine (HTTP connections)."""
        source = _SourceCollector(families_fn)
        self.registry.register(source)
        self._sources.append(source)

    def add_histogram(self, hist: LatencyHistogram) -> None:
        """Render ``hist`` with every scrape after the engine's own (the remote tier's)."""
        self.registry.register(hist)
        self._hists.append(hist)

    def render(self) -> bytes:
        """The Prometheus text exposition (format 0.0.4) of the registry.

        Same lines as ``prometheus_client.generate_latest`` (a test compares them), written
        from plain tuples with cached line prefixes: building MetricFamily / Sample objects per
        scrape cost ~1 ms on a slow core, a fifth of the 5 ms p99 budget under load."""
        out: list[str] = []
        heads, prefixes = self._heads, self._prefixes
        families = self._snapshot.families()
        for source in self._sources:
            families = families + source.families()
        for name, typ, doc, labelnames, samples in families:
            head = heads.get((name, doc))
            if head is None:
                head = heads[(name, doc)] = help_head(name, typ, doc)
            out.append(head)
            for values, v in samples:
                key = (name, labelnames, values)
                p = prefixes.get(key)
                if p is None:
                    p = prefixes[key] = _prefix(name, labelnames, values)
                out.append(f"{p}{go_float(v)}\n")
        for h in self._hists:
            h.lines(out)
        return "".join(out).encode()

    def render_reference(self) -> bytes:
        """prometheus_client's own exposition of the same registry (for tests)."""
        return generate_latest(self.registry)


def help_head(name: str, typ: str, doc: str) -> str:
    """The # HELP and # TYPE lines of a family, as prometheus_client writes them."""
    doc = doc.replace("\\", "\\\\").replace("\n", "\\n")
    return f"# HELP {name} {doc}\n# TYPE {name} {typ}\n"


def _prefix(name: str, labelnames: tuple[str, ...], values: tuple[str, ...]) -> str:
    if not labelnames:
        return name + " "
    return f"{name}{{{label_text(tuple(zip(labelnames, values)))}}} "


def label_text(pairs: Sequence[tuple[str, str]]) -> str:
    """Label pairs as prometheus_client writes them: sorted by name, values escaped."""
    return ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(pairs))


def _escape(v: str) -> str:
    if "\\" in v or '"' in v or "\n" in v:
        return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')
    return v


def go_float(v: float) -> str:
    """A sample value in Go's float format (prometheus_client's floatToGoString)."""
    if v == math.inf:
        return "+Inf"
    if v == -math.inf:
        return "-Inf"
    if v != v:
        return "NaN"
    if -1e6 < v < 1e6:  # the common case; Go's format only differs for large magnitudes
        return repr(float(v))
    return floatToGoString(v)
