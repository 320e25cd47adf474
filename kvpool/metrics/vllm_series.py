"""vLLM's own series, under vLLM's names, beside kvpool's (README "Metrics").

NOTE(vllm-names): what is built for vLLM reads ``vllm:*`` series by name: the Gateway API
Inference Extension's endpoint picker and llm-d's scorers (``vllm:num_requests_waiting``,
``vllm:num_requests_running``, ``vllm:kv_cache_usage_perc``, ``vllm:cache_config_info``),
KEDA / HPA rules on the queue, and Grafana dashboards made for vLLM. A kvpool series with the
same meaning under another name is invisible to them, so /metrics writes each of those again
under vLLM's name, type (a counter's samples end in ``_total``), unit (seconds; usage a 0..1
fraction) and labels (``model_name`` and ``engine``, "0" for kvpool's one engine), from the
same numbers, read once per scrape. NOTE(vllm-buckets): every vllm:* histogram has vLLM 0.33's
bounds (vllm/v1/metrics/buckets.py), and so has its kvpool twin, which shares its counts: an
alert on a bound picked from vLLM's list (``le="20"``) finds its series; the request token
histograms take vLLM's 1-2-5 series capped at max_model_len (``request_token_buckets``).

NOTE(child-requests): vLLM runs an n > 1 request as n child requests (AsyncLLM fans it out),
and its scheduler's gauges count those children: running and waiting here count sequences,
not requests (``MetricsSnapshot.sequences``), so n = 4, 4 and 1 running read 9, as on vLLM,
and an autoscaler or endpoint picker comparing them with --max-num-seqs reads the real load.
A child that finished has left vLLM's running queue: only live sequences count. kvpool's own
``kvpool_requests{state}`` keeps counting requests (its help says so).

Meaning as vLLM's: waiting counts every admitted sequence not running, i.e. those of the
scheduler's waiting and swapped queues (vLLM v1 puts a preempted request back in its waiting
queue) and the requests admitted but not yet in the scheduler (inbox, remote-tier prefetch),
one each (their n is not known here: a lower bound for those few). The prefix cache's
queries and hits count first admissions only: a request re-admitted after a recompute
preemption finds its own blocks again, and vLLM books it under PrefixCacheStats'
preempted_queries / preempted_hits, which it does not export; kvpool keeps those apart too
(``ManagerStats.preempted_query_tokens`` / ``preempted_hit_tokens``: NOTE(preempted-queries)
in kvpool/core/block_table.py). An n > 1 request's sequences each count a lookup, as vLLM's
children do (NOTE(child-lookups) in kvpool/core/prompt_alloc.py).
"""

from __future__ import annotations

from collections.abc import Sequence

from kvpool.metrics.snapshot import Family, MetricsSnapshot

ENGINE = "0"  # vLLM's engine label: the data-parallel engine index
LABELS = ("engine", "model_name")  # sorted, as the lean renderer and prometheus_client write

# Every vllm:* family the engine's collector exports (counters with _total, as METRIC_NAMES)
VLLM_METRIC_NAMES = (
    "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
    "vllm:cache_config_info", "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
    "vllm:num_preemptions_total", "vllm:generation_tokens_total",
    "vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
    "vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds",
    "vllm:iteration_tokens_total", "vllm:num_requests_waiting_by_reason",
    "vllm:engine_sleep_state",
)
# kvpool histogram -> (vLLM name, vLLM's help)
VLLM_HISTOGRAMS = {
    "kvpool_time_to_first_token_seconds": ("vllm:time_to_first_token_seconds",
                                           "Histogram of time to first token in seconds."),
    "kvpool_inter_token_latency_seconds": ("vllm:inter_token_latency_seconds",
                                           "Histogram of inter-token latency in seconds."),
    "kvpool_e2e_request_latency_seconds": ("vllm:e2e_request_latency_seconds",
                                           "Histogram of e2e request latency in seconds."),
    "kvpool_request_queue_time_seconds": ("vllm:request_queue_time_seconds",
                                          "Histogram of time spent in WAITING phase for "
                                          "request."),
}
# NOTE(iteration-tokens): vLLM's own observation, not kvpool_iteration_tokens' (the tokens a
# step fed the model): per iteration that sampled, the prompt tokens computed for requests that
# got their first token plus the tokens generated (loggers.py record()); KVPoolMetrics.observe_step
VLLM_ITERATION_TOKENS = ("vllm:iteration_tokens_total",
                         "Histogram of number of tokens per engine_step.")
# RequestMetrics' series (kvpool/metrics/request_metrics.py), the same way
VLLM_REQUEST_HISTOGRAMS = {
    "kvpool_request_prompt_tokens": ("vllm:request_prompt_tokens",
                                     "Number of prefill tokens processed."),
    "kvpool_request_generation_tokens": ("vllm:request_generation_tokens",
                                         "Number of generation tokens processed."),
    "kvpool_request_max_generation_tokens": ("vllm:request_max_num_generation_tokens",
                                             "Histogram of maximum number of requested "
                                             "generation tokens."),
    "kvpool_request_params_n": ("vllm:request_params_n", "Histogram of the n request "
                                "parameter."),
    "kvpool_request_params_max_tokens": ("vllm:request_params_max_tokens", "Histogram of the "
                                         "max_tokens request parameter."),
    "kvpool_request_prefill_time_seconds": ("vllm:request_prefill_time_seconds", "Histogram "
                                            "of time spent in PREFILL phase for request."),
    "kvpool_request_decode_time_seconds": ("vllm:request_decode_time_seconds", "Histogram of "
                                           "time spent in DECODE phase for request."),
    "kvpool_request_inference_time_seconds": ("vllm:request_inference_time_seconds",
                                              "Histogram of time spent in RUNNING phase for "
                                              "request."),
}
# NOTE(vllm-only): per-request histograms vLLM writes that have no kvpool twin, written under
# vLLM's name and labels only, with vLLM's buckets (NOTE(vllm-buckets))
VLLM_ONLY_HISTOGRAMS = {
    "tpot": ("vllm:request_time_per_output_token_seconds",
             "Histogram of time_per_output_token_seconds per request."),
    "preemptions": ("vllm:request_num_preemptions",
                    "Histogram of the number of times a request was preempted."),
    "prefill_kv": ("vllm:request_prefill_kv_computed_tokens", "Histogram of new KV tokens "
                   "computed during prefill (excluding cached tokens)."),
}
# NOTE(vllm-buckets): vLLM 0.33's bucket families (vllm/v1/metrics/buckets.py), by its names
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
ITL_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0,
               7.5, 10.0, 20.0, 40.0, 80.0)  # inter-token latency and TPOT
# e2e, queue, prefill, decode and inference time (NOTE(long-latency) in collector.py)
REQUEST_LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0,
                           40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
ITERATION_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
N_BUCKETS = (1, 2, 5, 10, 20)
PREEMPTION_BUCKETS = (1, 2, 3, 4, 5, 10, 20)
VLLM_REQUEST_METRIC_NAMES = ("vllm:prompt_tokens_total", "vllm:request_success_total") + \
    tuple(name for name, _ in VLLM_REQUEST_HISTOGRAMS.values()) + \
    tuple(name for name, _ in VLLM_ONLY_HISTOGRAMS.values())
_WAITING_DOC = ("Number of waiting requests by reason. Reason labels: 'capacity' = waiting for "
                "scheduling capacity; 'deferred' = deferred by transient constraints (LoRA "
                "budget, KV transfer, blocked status). Sum of all reasons equals "
                "vllm:num_requests_waiting.")
_SLEEP_DOC = ("Engine sleep state; awake = 0 means engine is sleeping; awake = 1 means engine "
              "is awake; weights_offloaded = 1 means sleep level 1; discard_all = 1 means "
              "sleep level 2.")


def request_token_buckets(max_model_len: int) -> tuple[int, ...]:
    """vLLM's request token buckets: 1, 2, 5, 10, 20, 50, ... up to ``max_model_len``."""
    bounds: list[int] = []
    scale = 1
    while True:
        for m in (1, 2, 5):
            if m * scale > max_model_len:
                return tuple(bounds) or (1,)
            bounds.append(m * scale)
        scale *= 10


def request_families(model_name: str, prompt_tokens: int,
                     success: dict[str, int]) -> list[Family]:
    """vllm:prompt_tokens_total and vllm:request_success_total{finished_reason}."""
    lv = (ENGINE, model_name)
    return [
        ("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.", LABELS,
         [(lv, prompt_tokens)]),
        ("vllm:request_success_total", "counter", "Count of successfully processed requests.",
         ("engine", "finished_reason", "model_name"),
         [((ENGINE, r, model_name), v) for r, v in success.items()]),
    ]


def vllm_labels(model_name: str) -> tuple[tuple[str, str], ...]:
    """The labels every vLLM series carries."""
    return (("engine", ENGINE), ("model_name", model_name))


def waiting(s: MetricsSnapshot) -> int:
    """vLLM's num_requests_waiting: the sequences admitted and not running (module docstring:
    NOTE(child-requests)); a request not yet in the scheduler counts one."""
    return sum(waiting_by_reason(s))


def waiting_by_reason(s: MetricsSnapshot) -> tuple[int, int]:
    """(capacity, deferred), vLLM's reasons. NOTE(waiting-reasons): capacity is the
    scheduler's waiting and swapped sequences, which wait for room; deferred is the requests
    admitted but not yet in the scheduler: a remote-tier prefetch (vLLM defers a request
    whose KV transfer is pending) or the step thread's inbox, till its next step."""
    queued = s.requests.get("waiting", 0) + s.requests.get("swapped", 0)
    outside = s.requests_in_flight - s.requests.get("running", 0) - queued
    return s.sequences.get("waiting", 0) + s.sequences.get("swapped", 0), max(0, outside)


def preempted_seqs(s: MetricsSnapshot) -> int:
    """The sequences preempted so far; the preempted requests where the engine did not count
    them (NOTE(preempted-seqs))."""
    return sum(s.preemptions.values()) if s.preempted_seqs is None else s.preempted_seqs


def engine_families(s: MetricsSnapshot, model_name: str,
                    cache_info: Sequence[tuple[str, str]]) -> list[Family]:
    """The snapshot's vLLM series; ``cache_info``: static cache_config_info labels."""
    m = s.manager
    lv = (ENGINE, model_name)
    g, c = "gauge", "counter"
    info = tuple(sorted((*cache_info, ("engine", ENGINE),
                         ("num_gpu_blocks", str(m.device.num_blocks)),
                         ("num_cpu_blocks", str(m.host.num_blocks)))))
    capacity, deferred = waiting_by_reason(s)
    return [
        ("vllm:num_requests_running", g, "Number of requests in model execution batches.",
         LABELS, [(lv, s.sequences.get("running", 0))]),  # NOTE(child-requests)
        ("vllm:num_requests_waiting", g, "Number of requests waiting to be processed.",
         LABELS, [(lv, capacity + deferred)]),
        ("vllm:num_requests_waiting_by_reason", g, _WAITING_DOC, LABELS + ("reason",),
         [((*lv, "capacity"), capacity), ((*lv, "deferred"), deferred)]),
        # NOTE(sleep-state): kvpool has no sleep mode (no /sleep route), so its engine is
        # always awake: what vLLM writes while awake, or without --enable-sleep-mode
        ("vllm:engine_sleep_state", g, _SLEEP_DOC, LABELS + ("sleep_state",),
         [((*lv, "awake"), 1), ((*lv, "weights_offloaded"), 0), ((*lv, "discard_all"), 0)]),
        ("vllm:kv_cache_usage_perc", g, "KV-cache usage. 1 means 100 percent usage.", LABELS,
         [(lv, m.device.usage)]),
        ("vllm:cache_config_info", g, "Information of the LLMEngine CacheConfig",
         tuple(k for k, _ in info), [(tuple(v for _, v in info), 1)]),
        # vLLM's help texts; first admissions only, as vLLM's (module docstring)
        ("vllm:prefix_cache_queries_total", c, "Prefix cache queries, in terms of number of "
         "queried tokens.", LABELS, [(lv, m.prefix_query_tokens)]),
        ("vllm:prefix_cache_hits_total", c, "Prefix cache hits, in terms of number of cached "
         "tokens.", LABELS, [(lv, m.prefix_hit_tokens)]),
        # NOTE(preempted-seqs): vLLM preempts each child request of an n > 1 request on its
        # own, so its counter counts sequences, as vllm:request_num_preemptions' sum does
        ("vllm:num_preemptions_total", c, "Cumulative number of preemption from the engine.",
         LABELS, [(lv, preempted_seqs(s))]),
        ("vllm:generation_tokens_total", c, "Number of generation tokens processed.", LABELS,
         [(lv, s.generation_tokens)]),
    ]
