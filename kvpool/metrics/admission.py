"""Requests the server refused before they reached the engine, by reason.

NOTE(refusals): a replica shedding load answered 503 queue_full (``--max-queue``) and no
series moved: only the requests it served were counted, so "this replica is refusing work"
showed on no panel. The refusals are counted where admission is decided (the request gate,
kvpool/server/request_gate.py), by reason (a small fixed set, so the cardinality stays
bounded)::

    queue_full        503  --max-queue requests already in flight   (vllm: max_num_queued_reqs)
    shutting_down     503  the server is draining
    tenant_quota      429  the tenant's requests hold its --tenant-block-quota already
    over_tenant_quota 400  one request may need more than --tenant-block-quota
    over_queue        400  one request runs as more requests than --max-queue lets in flight
                           (child requests: NOTE(apart); vllm: max_num_queued_reqs, a 503)

``kvpool_admission_rejections_total{reason}``, and the queue limit again under vLLM's name and
labels, ``vllm:admission_rejections_total{model_name,reason="max_num_queued_reqs"}`` (vLLM's
frontend queue limit, ``vllm/v1/metrics/loggers.py`` ADMISSION_REASONS), so a dashboard or
alert made for vLLM sees the overflow too. Why refusals by reason rather than every HTTP answer
by status: the gate is where the server decides to shed load, and the reason says which limit
to raise; the 4xx of malformed requests are the client's (docs/architecture.md#metrics).
"""

from __future__ import annotations

import threading

from kvpool.metrics.snapshot import Family

REASONS = ("queue_full", "shutting_down", "tenant_quota", "over_tenant_quota", "over_queue")
# kvpool reason -> vLLM's reason label (only the limits vLLM has; several may share one)
VLLM_REASONS = {"queue_full": "max_num_queued_reqs", "over_queue": "max_num_queued_reqs"}
ADMISSION_METRIC_NAMES = ("kvpool_admission_rejections_total",
                          "vllm:admission_rejections_total")


class AdmissionRejections:
    """Counts of refused requests by reason (REASONS), written on every scrape."""

    def __init__(self, model_name: str) -> None:
        self.model_name = model_name
        self._lock = threading.Lock()
        self._counts = dict.fromkeys(REASONS, 0)

    def reject(self, reason: str) -> None:
        if reason not in self._counts:
            raise ValueError(f"unknown admission rejection reason {reason!r}")
        with self._lock:
            self._counts[reason] += 1

    def families(self) -> list[Family]:
        with self._lock:
            counts = dict(self._counts)
        theirs = dict.fromkeys(VLLM_REASONS.values(), 0)
        for ours, label in VLLM_REASONS.items():
            theirs[label] += counts[ours]
        vllm = [((self.model_name, label), v) for label, v in theirs.items()]
        return [
            ("kvpool_admission_rejections_total", "counter", "Requests refused before they "
             "reached the engine, by reason.", ("reason",), [((r,), v) for r, v in counts.items()]),
            ("vllm:admission_rejections_total", "counter", "Number of admission attempts "
             "rejected by a queue limit, by reason.", ("model_name", "reason"), vllm),
        ]
