"""Request-level series with vLLM's meaning, on a KVPoolMetrics (collector.py), observed by
the server as each request ends (the prompt token counter: NOTE(prefill-count)). Each carries
a ``model_name`` label (the first served name, as vLLM labels its series). A request of n > 1
counts as the n child requests vLLM runs it as, in these and in the engine's latency
histograms (NOTE(per-sequence)); only the n histogram counts it once:

    kvpool_prompt_tokens_total{model_name}                   whole prompts (vllm:prompt_tokens)
    kvpool_request_success_total{model_name,finished_reason} finished sequences by reason
    kvpool_request_prompt_tokens{model_name}                 histogram, per sequence
    kvpool_request_generation_tokens{model_name}             histogram, per sequence
    kvpool_request_max_generation_tokens{model_name}         histogram, per request: the most
                                                             any of its sequences generated
    kvpool_request_params_n / _params_max_tokens{model_name} histograms of what was asked
    kvpool_request_prefill_time_seconds{model_name}          first schedule -> first token
    kvpool_request_decode_time_seconds{model_name}           first token -> finish
    kvpool_request_inference_time_seconds{model_name}        first schedule -> finish

and, under vLLM's names only (NOTE(vllm-only), vllm_series.py), per sequence:
vllm:request_time_per_output_token_seconds (NOTE(tpot)), vllm:request_num_preemptions and
vllm:request_prefill_kv_computed_tokens.

The engine's own counter of the prompt tokens it computed (prefix-cache hits excluded) is
``kvpool_prompt_tokens_computed_total``.

NOTE(prefill-count): vLLM counts a request's prompt tokens in the step that gives it its first
token (``IterationStats.update_from_output``), whether or not its client stays. Counted as the
server saw the answer end, a long generation's prompt came in at its end (prompt throughput
read 0 meanwhile, then a burst) and a request whose client left never came in. The engine's
output processor now counts each sequence's whole prompt at its first token
(``KVPoolMetrics.prompt_tokens``). A sequence that ends aborted (its client left) is not
observed in the e2e and queue histograms either, as vLLM's abort path observes neither; its
TTFT and tokens, which happened, stay counted.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

from kvpool.metrics.collector import KVPoolMetrics, LatencyHistogram
from kvpool.metrics.snapshot import Family
from kvpool.metrics.vllm_series import (ITL_BUCKETS, N_BUCKETS, PREEMPTION_BUCKETS,
                                        REQUEST_LATENCY_BUCKETS, VLLM_ONLY_HISTOGRAMS,
                                        VLLM_REQUEST_HISTOGRAMS, VLLM_REQUEST_METRIC_NAMES,
                                        request_families, request_token_buckets, vllm_labels)

__all__ = ["REQUEST_METRIC_NAMES", "RequestMetrics"]

# the token histograms' cap where the server's context length is not given
UNKNOWN_CONTEXT = 100000
REQUEST_METRIC_NAMES = (
    "kvpool_prompt_tokens_total", "kvpool_request_success_total",
    "kvpool_request_prompt_tokens", "kvpool_request_generation_tokens",
    "kvpool_request_max_generation_tokens", "kvpool_request_params_n",
    "kvpool_request_params_max_tokens",
    "kvpool_request_prefill_time_seconds", "kvpool_request_decode_time_seconds",
    "kvpool_request_inference_time_seconds") + VLLM_REQUEST_METRIC_NAMES
# every finish reason of runtime/engine/output_processor.py's FINISH_REASONS ("repetition":
# vLLM's repetition_detection), vLLM's finished_reason values
_REASONS = ("stop", "length", "abort", "error", "repetition")


class RequestMetrics:
    """The series above for one served model, registered on a KVPoolMetrics."""

    def __init__(self, metrics: KVPoolMetrics, model_name: str,
                 max_model_len: int = UNKNOWN_CONTEXT) -> None:
        """``max_model_len`` caps the token histograms' buckets, as vLLM's
        (NOTE(vllm-buckets) in vllm_series.py)."""
        self.model_name = model_name
        label = (("model_name", model_name),)
        tokens = request_token_buckets(max_model_len)

        def hist(name: str, doc: str, buckets: Sequence[float]) -> LatencyHistogram:
            h = LatencyHistogram(name, doc, buckets, labels=label)
            h.alias(*VLLM_REQUEST_HISTOGRAMS[name], vllm_labels(model_name))  # NOTE(vllm-names)
            metrics.add_histogram(h)
            return h

        self.prompt_hist = hist("kvpool_request_prompt_tokens", "Prompt tokens per request.",
                                tokens)
        self.generation_hist = hist("kvpool_request_generation_tokens",
                                    "Generated tokens per request.", tokens)
        # NOTE(max-generation): vLLM observes it where it observes n, once per parent request
        # when its last child finishes (parallel_sampling.py observe_finished_request)
        self.max_generation_hist = hist("kvpool_request_max_generation_tokens", "The most "
                                        "tokens any sequence of a request generated.",
                                        tokens)
        self.n_hist = hist("kvpool_request_params_n", "The n requests ask for.", N_BUCKETS)
        self.max_tokens_hist = hist("kvpool_request_params_max_tokens",
                                    "The max_tokens requests run with.", tokens)
        self.prefill = hist("kvpool_request_prefill_time_seconds", "First schedule to first "
                            "token.", REQUEST_LATENCY_BUCKETS)
        self.decode = hist("kvpool_request_decode_time_seconds", "First token to finish.",
                           REQUEST_LATENCY_BUCKETS)
        self.inference = hist("kvpool_request_inference_time_seconds", "First schedule to "
                              "finish.", REQUEST_LATENCY_BUCKETS)
        self.tpot, self.preemptions, self.prefill_kv = (  # NOTE(vllm-only), vllm_series.py
            self._vllm_only(metrics, key, buckets) for key, buckets in (
                ("tpot", ITL_BUCKETS), ("preemptions", PREEMPTION_BUCKETS),
                ("prefill_kv", tokens)))
        self._metrics = metrics  # its prompt_tokens: NOTE(prefill-count)
        self._lock = threading.Lock()
        self._success = dict.fromkeys(_REASONS, 0)
        metrics.add_source(self.families)

    def observe(self, *, prompt_tokens: int, generated: Sequence[int], n: int, max_tokens: int,
                reasons: Sequence[str | None], timings: Sequence[dict[str, float]]) -> None:
        """One request (one prompt of it) that ended: ``generated``, ``reasons`` and
        ``timings`` per sequence. NOTE(per-sequence): vLLM runs n > 1 as n
        child requests and counts each in every per-request series (success, prompt tokens,
        the token and latency histograms), only ``request_params_n`` once per parent. Here
        success counted each sequence and every other series the request once, so for n > 1
        the series disagreed and a dashboard's prompt throughput or request rate was off by
        up to n. Each child's e2e is its own (NOTE(child-finish), output_processor.py): with
        the request's, a choice that stopped early was timed as its slowest sibling."""
        with self._lock:
            for r in reasons:
                key = r if r in self._success else "abort"
                self._success[key] += 1
        self.n_hist.observe(n)
        self.max_generation_hist.observe(max(generated, default=0))
        for tokens, times in zip(generated, timings):
            self.prompt_hist.observe(prompt_tokens)
            self.generation_hist.observe(tokens)
            self.max_tokens_hist.observe(max_tokens)
            e2e, queue, ttft = (times.get(k) for k in ("e2e", "queue", "ttft"))
            if e2e is not None and queue is not None and ttft is not None:
                self.prefill.observe(max(0.0, ttft - queue))
                self.decode.observe(max(0.0, e2e - ttft))
                self.inference.observe(max(0.0, e2e - queue))
                self._observe_vllm_only(prompt_tokens, tokens, times, max(0.0, e2e - ttft))

    def _vllm_only(self, metrics: KVPoolMetrics, key: str,
                   buckets: Sequence[float]) -> LatencyHistogram:
        h = LatencyHistogram(*VLLM_ONLY_HISTOGRAMS[key], buckets,
                             labels=vllm_labels(self.model_name))
        metrics.add_histogram(h)
        return h

    def _observe_vllm_only(self, prompt_tokens: int, tokens: int, times: dict[str, float],
                           decode: float) -> None:
        """One finished sequence into vLLM's FinishedRequestStats series (loggers.py).
        NOTE(tpot): vLLM's mean_time_per_output_token is the decode time over the tokens
        after the first, and 0 for a sequence of one token or none, observed for every
        finished request, the zeros too: so a quantile reads here as it does on vLLM. The
        decode time is kvpool_request_decode_time_seconds' (first token to finish; vLLM's
        ends at the last token, the same moment for a sequence a token ends). Prefill KV
        computed: the prompt less its prefix-cache hits at first admission, as vLLM's
        num_prompt_tokens - num_cached_tokens; an n > 1 request's sequences share one prompt
        here and each reads it as the first of vLLM's children (its later children find the
        first's full blocks and read less)."""
        self.tpot.observe(decode / (tokens - 1) if tokens > 1 else 0.0)
        self.preemptions.observe(times.get("preemptions", 0))
        cached = min(prompt_tokens, int(times.get("cached", 0)))
        self.prefill_kv.observe(prompt_tokens - cached)

    def families(self) -> list[Family]:
        with self._lock:
            success = dict(self._success)
        prompt = self._metrics.prompt_tokens
        m = self.model_name
        return [
            ("kvpool_prompt_tokens_total", "counter", "Prompt tokens of started requests, "
             "whole prompts (prefix-cache hits included; vLLM's meaning).", ("model_name",),
             [((m,), prompt)]),
            ("kvpool_request_success_total", "counter", "Finished sequences by finish reason.",
             ("finished_reason", "model_name"), [((r, m), v) for r, v in success.items()]),
        ] + request_families(m, prompt, success)
