"""What the AsyncEngine streams back to its callers (the server, the stress harness).

Plain frozen objects: a ``RequestOutput`` is one update for one request; its ``outputs`` hold a
``CompletionOutput`` per sequence (``n`` of them) with the *new* tokens and text since the
previous update (deltas), plus cumulative counters. The last update of a request has
``finished=True`` and every sequence's ``finish_reason`` set.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kvpool.runtime.model.logprobs import TokenLogprob

FINISH_REASONS = ("stop", "length", "abort", "error")


@dataclass(frozen=True, slots=True)
class CompletionOutput:
    """One sequence's progress in one update."""

    index: int  # which of the request's n sequences (0-based)
    token_ids: tuple[int, ...]  # tokens generated since the previous update (delta)
    text: str  # text generated since the previous update (delta; stop strings cut)
    num_generated: int  # tokens generated so far in total
    finish_reason: str | None = None  # None while running; else one of FINISH_REASONS
    stop_reason: str | int | None = None  # the stop string / token id that ended it, if any
    # one entry per token of token_ids when the request asked for logprobs, else None
    logprobs: tuple[TokenLogprob, ...] | None = None


@dataclass(frozen=True, slots=True)
class RequestOutput:
    """One update of one request."""

    request_id: str
    outputs: tuple[CompletionOutput, ...]  # sequences with news in this update
    finished: bool  # True on the last update of the request
    num_prompt_tokens: int
    num_cached_tokens: int = 0  # prompt tokens served by the prefix cache
    error: str | None = None  # set when the request failed (finish_reason "error")
    metrics: dict[str, float] = field(default_factory=dict)  # ttft, queue time, e2e (seconds)
    # prompt_logprobs requests: one entry per prompt token (None for the first, which nothing
    # predicts), sent once, in the first update after the prompt is computed; else None
    prompt_logprobs: tuple[TokenLogprob | None, ...] | None = None

    def then(self, later: RequestOutput) -> RequestOutput:
        """One update holding this update's deltas followed by ``later``'s, with ``later``'s
        counters, finish reasons and request fields (the one merge of deltas)."""
        merged = {c.index: c for c in self.outputs}
        for c in later.outputs:
            prev = merged.get(c.index)
            if prev is not None:
                lps = c.logprobs if prev.logprobs is None else \
                    prev.logprobs + (c.logprobs or ())
                c = CompletionOutput(c.index, prev.token_ids + c.token_ids, prev.text + c.text,
                                     c.num_generated, c.finish_reason, c.stop_reason, lps)
            merged[c.index] = c
        prompt_lps = later.prompt_logprobs if later.prompt_logprobs is not None else \
            self.prompt_logprobs
        return RequestOutput(later.request_id, tuple(merged[i] for i in sorted(merged)),
                             later.finished, later.num_prompt_tokens, later.num_cached_tokens,
                             later.error, later.metrics, prompt_lps)


async def aclose_updates(updates: object) -> None:
    """Close a stream of RequestOutput updates if it can be closed (the engine's streams and
    the server's wrappers around them have ``aclose``; a plain iterator has nothing to close)."""
    aclose = getattr(updates, "aclose", None)
    if aclose is not None:
        await aclose()
