"""A replica's load from its Prometheus ``/metrics``, when its ``/health`` carries none.

NOTE(metrics-load): kvpool serve's 200 /health carries its running and waiting requests
(replicas.py NOTE(load)); vLLM's and SGLang's answer with an empty body, so behind the router
(or the ``kvpool epp`` picker) such a replica's load was only the requests this router sent it.
Their Prometheus /metrics has the same two figures, the gauges the Gateway API Inference
Extension's model server protocol names (and llm-d's scheduler reads)::

    vLLM    vllm:num_requests_running + vllm:num_requests_waiting
    SGLang  sglang:num_running_reqs   + sglang:num_queue_reqs

each summed over its series (one per model name, engine or rank label). A beat whose 200
/health reports no load (an empty, non-JSON body, or JSON without ``num_running`` /
``num_waiting``) starts a scrape of that replica's /metrics unless one is still in flight: at
most one per replica, never more often than its beats, and apart from them, so a slow /metrics
never delays a beat (liveness). A scrape is bounded like the replica's other answers
(NOTE(small-answers)): the health timeout, and ``MAX_METRICS_BYTES`` read; only the lines of
those four gauges reach the parser (prometheus_client's, the exposition format's reference
implementation), so a long /metrics costs one split, not a parse of every histogram bucket.
A /metrics that is absent (not 200), longer than the bound, not the text format, or without
either pair leaves the load at 0 (the router's own in-flight requests: the behaviour before),
logged once per replica with what to do. The KV cache usage gauges are not read: the load guard
compares requests (scoring.py).
"""

from __future__ import annotations

import math

from prometheus_client.parser import text_string_to_metric_families

__all__ = ["ENGINE_GAUGES", "MAX_METRICS_BYTES", "load_from_metrics"]

# (running, waiting) gauge names per engine, the first one a /metrics has wins
ENGINE_GAUGES = (("vllm:num_requests_running", "vllm:num_requests_waiting"),
                 ("sglang:num_running_reqs", "sglang:num_queue_reqs"))
# vLLM's /metrics is ~50-150 KB per engine (mostly histogram buckets): room for many engines
MAX_METRICS_BYTES = 1 << 20
_MAX_COUNT = 1 << 53
_NAMES = tuple(n for pair in ENGINE_GAUGES for n in pair)
_PREFIXES = tuple(n.encode() + end for n in _NAMES for end in (b"{", b" ", b"\t"))


def load_from_metrics(body: bytes) -> int | None:
    """Running + waiting requests of a Prometheus text ``body`` (NOTE(metrics-load)), or
    None when it has neither engine's gauges, or they do not parse as counts."""
    lines = [ln for ln in body.split(b"\n") if ln.startswith(_PREFIXES)]
    sums: dict[str, float] = {}
    try:
        text = b"\n".join(lines).decode("utf-8") + "\n"
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name in _NAMES:
                    sums[sample.name] = sums.get(sample.name, 0.0) + float(sample.value)
    except (ValueError, IndexError, TypeError):  # not UTF-8, not the exposition format
        return None
    for running, waiting in ENGINE_GAUGES:
        if running in sums or waiting in sums:
            total = sums.get(running, 0.0) + sums.get(waiting, 0.0)
            if not (math.isfinite(total) and 0 <= total <= _MAX_COUNT):
                return None
            return round(total)
    return None
