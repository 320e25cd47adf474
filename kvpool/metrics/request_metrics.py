"""Request-level series with vLLM's meaning, observed by the server as each request ends.

Each carries a ``model_name`` label (the first served name, as vLLM labels its series):

    kvpool_prompt_tokens_total{model_name}                   whole prompts (vllm:prompt_tokens)
    kvpool_request_success_total{model_name,finished_reason} finished sequences by reason
    kvpool_request_prompt_tokens{model_name}                 histogram, per request
    kvpool_request_generation_tokens{model_name}             histogram, per request
    kvpool_request_params_n / _params_max_tokens{model_name} histograms of what was asked
    kvpool_request_prefill_time_seconds{model_name}          first schedule -> first token
    kvpool_request_decode_time_seconds{model_name}           first token -> finish
    kvpool_request_inference_time_seconds{model_name}        first schedule -> finish

The engine's own counter of the prompt tokens it computed (prefix-cache hits excluded) is
``kvpool_prompt_tokens_computed_total``.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from kvpool.metrics.collector import LATENCY_BUCKETS, Family, KVPoolMetrics, LatencyHistogram

__all__ = ["REQUEST_METRIC_NAMES", "RequestMetrics"]

TOKEN_BUCKETS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000,
                 100000)  # vLLM's 1-2-5 series, up to a long context
N_BUCKETS = (1, 2, 5, 10, 20)
REQUEST_METRIC_NAMES = (
    "kvpool_prompt_tokens_total", "kvpool_request_success_total",
    "kvpool_request_prompt_tokens", "kvpool_request_generation_tokens",
    "kvpool_request_params_n", "kvpool_request_params_max_tokens",
    "kvpool_request_prefill_time_seconds", "kvpool_request_decode_time_seconds",
    "kvpool_request_inference_time_seconds")
_REASONS = ("stop", "length", "abort", "error")


class RequestMetrics:
    """The series above for one served model, registered on a KVPoolMetrics."""

    def __init__(self, metrics: KVPoolMetrics, model_name: str) -> None:
        self.model_name = model_name
        label = (("model_name", model_name),)

        def hist(name: str, doc: str, buckets: Sequence[float]) -> LatencyHistogram:
            h = LatencyHistogram(name, doc, buckets, labels=label)
            metrics.add_histogram(h)
            return h

        self.prompt_hist = hist("kvpool_request_prompt_tokens", "Prompt tokens per request.",
                                TOKEN_BUCKETS)
        self.generation_hist = hist("kvpool_request_generation_tokens",
                                    "Generated tokens per request.", TOKEN_BUCKETS)
        self.n_hist = hist("kvpool_request_params_n", "The n requests ask for.", N_BUCKETS)
        self.max_tokens_hist = hist("kvpool_request_params_max_tokens",
                                    "The max_tokens requests run with.", TOKEN_BUCKETS)
        self.prefill = hist("kvpool_request_prefill_time_seconds", "First schedule to first "
                            "token.", LATENCY_BUCKETS)
        self.decode = hist("kvpool_request_decode_time_seconds", "First token to finish.",
                           LATENCY_BUCKETS)
        self.inference = hist("kvpool_request_inference_time_seconds", "First schedule to "
                              "finish.", LATENCY_BUCKETS)
        self._lock = threading.Lock()
        self._prompt_tokens = 0
        self._success = dict.fromkeys(_REASONS, 0)
        metrics.add_source(self.families)

    def observe(self, *, prompt_tokens: int, generation_tokens: int, n: int, max_tokens: int,
                reasons: Sequence[str | None], timings: dict[str, float]) -> None:
        """One request (one prompt of it) that ended."""
        with self._lock:
            self._prompt_tokens += prompt_tokens
            for r in reasons:
                key = r if r in self._success else "abort"
                self._success[key] += 1
        self.prompt_hist.observe(prompt_tokens)
        self.generation_hist.observe(generation_tokens)
        self.n_hist.observe(n)
        self.max_tokens_hist.observe(max_tokens)
        e2e, queue, ttft = (timings.get(k) for k in ("e2e", "queue", "ttft"))
        if e2e is not None and queue is not None and ttft is not None:
            self.prefill.observe(max(0.0, ttft - queue))
            self.decode.observe(max(0.0, e2e - ttft))
            self.inference.observe(max(0.0, e2e - queue))

    def families(self) -> list[Family]:
        with self._lock:
            prompt, success = self._prompt_tokens, dict(self._success)
        m = self.model_name
        return [
            ("kvpool_prompt_tokens_total", "counter", "Prompt tokens of finished requests, "
             "whole prompts (prefix-cache hits included; vLLM's meaning).", ("model_name",),
             [((m,), prompt)]),
            ("kvpool_request_success_total", "counter", "Finished sequences by finish reason.",
             ("finished_reason", "model_name"), [((r, m), v) for r, v in success.items()]),
        ]
