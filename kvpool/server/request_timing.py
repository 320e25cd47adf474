"""vLLM's per-request timing metrics (``--enable-per-request-metrics``): the ``metrics`` object
of a completions or chat answer, made from the engine's timings of its one sequence.

NOTE(per-request-metrics): as vLLM 0.33 builds them (build_per_request_timing_metrics in
vllm/entrypoints/generate/base/serving.py), in milliseconds::

    queue_time_ms           arrival -> first scheduled
    time_to_first_token_ms  first scheduled -> first token (not from arrival, as vLLM's)
    generation_time_ms      first token -> last token
    mean_itl_ms             generation_time_ms / (tokens - 1), with 2 tokens or more
    tokens_per_second       tokens / (first scheduled -> last token)

A value whose times the request never reached (no token) is null. Only an answer of one
prompt and one choice has them (vLLM's rule: several sequences' times are no one request's);
the body carries ``metrics`` always (null otherwise), the stream only on its usage chunk, with
the null keys left out (vLLM writes that chunk with exclude_none).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from kvpool.server.responses import ResponseBuilder

__all__ = ["builder_metrics", "timing_metrics"]

_MS = 1000.0


def timing_metrics(timings: dict[str, float], generated: int) -> dict[str, Any]:
    """The metrics object of one sequence: ``timings`` the engine's final update's (seconds
    from arrival: queue, ttft, e2e; RequestOutput.metrics), ``generated`` its tokens."""
    queue, first, last = timings.get("queue"), timings.get("ttft"), timings.get("e2e")
    if not generated:  # never reached a token: the engine's ttft is its end, not a token's
        first = None
    out: dict[str, Any] = dict.fromkeys(("time_to_first_token_ms", "generation_time_ms",
                                         "queue_time_ms", "mean_itl_ms", "tokens_per_second"))
    if queue is not None and first is not None:
        out["time_to_first_token_ms"] = max(0.0, first - queue) * _MS
    if first is not None and last is not None:
        out["generation_time_ms"] = max(0.0, last - first) * _MS
        if generated > 1:
            out["mean_itl_ms"] = out["generation_time_ms"] / (generated - 1)
    if queue is not None:
        out["queue_time_ms"] = max(0.0, queue) * _MS
    if queue is not None and last is not None and last > queue:
        out["tokens_per_second"] = generated / (last - queue)
    out["speculative_decoding"] = None  # vLLM's body has the key (kvpool does no spec decode)
    return out


def builder_metrics(builder: ResponseBuilder, stream: bool) -> dict[str, Any] | None:
    """A ResponseBuilder's metrics object (NOTE(per-request-metrics)), or None where it has
    none: the server's flag off, several prompts or choices. ``stream``: the usage chunk's
    form, null keys left out."""
    shown = builder.returned()
    if not builder.per_request_metrics or len(builder.req.prompts) != 1 or len(shown) != 1:
        return None
    i = shown[0]
    timings = builder.timings.get(0, [{}] * builder.n)[i % builder.n]
    out = timing_metrics(timings, builder.num_generated[i])
    return {k: v for k, v in out.items() if v is not None} if stream else out
