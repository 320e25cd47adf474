"""Turns sampled tokens into the deltas a request's stream sees: detokenization, stop strings,
finish reasons and the latency histograms; and those deltas, what the AsyncEngine streams back
to its callers (the server, the stress harness).

Plain frozen objects: a ``RequestOutput`` is one update for one request; its ``outputs`` hold a
``CompletionOutput`` per sequence (``n`` of them) with the *new* tokens and text since the
previous update (deltas), plus cumulative counters. A sequence's last output carries its
``finish_reason``, once, in the update of the step that finished it (NOTE(child-finish)); the
last update of a request has ``finished=True``.

NOTE(child-finish): vLLM 0.33 runs n > 1 as n child requests; each child's final output and
its e2e (``_update_stats_from_finished``) come when that child finishes. Here a choice that
stopped early got its finish_reason when its last sibling ended (twice, after a stop string),
timed as the slowest. So a step is taken in two halves: ``on_tokens`` (before the scheduler
judges the tokens) decides the stop strings, ``on_judged`` (after) gives each sequence the
scheduler ended its final output, with the scheduler's reason from its report of them
(``Scheduler.ended``). The stop rule itself (stop tokens, max_tokens, the context's end,
a completed grammar) lives in the scheduler alone (completion.py ``_judge``).

Stop strings: a sequence's text is released only up to the point where no stop string can still
start (the longest stop string minus one character is held back), so a stream never shows the
beginning of a stop string that then matches; the matched stop string and everything after it
are cut, as in the OpenAI API (vLLM's ``include_stop_str_in_output`` keeps the stop string).
"""

from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import dataclass, field

from kvpool.runtime.model import (IncrementalDetokenizer, SamplingParams, SeqHistory,
                                  TokenLogprob, Tokenizer)
from kvpool.runtime.model.repetition import RepeatStop, tail_repeats
from kvpool.sched import FinishedRequest, SeqOutput, SeqStatus
from kvpool.sched.sequence import StopLimits

FINISH_REASONS = ("stop", "length", "abort", "error", "repetition")
REPEATED = "repetition_detected"  # the stop_reason of a "repetition" finish (vLLM's)


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
    e2e: float | None = None  # with finish_reason: arrival -> this sequence's finish (seconds)


@dataclass(frozen=True, slots=True)
class RequestOutput:
    """One update of one request."""

    request_id: str
    outputs: tuple[CompletionOutput, ...]  # sequences with news in this update
    finished: bool  # True on the last update of the request
    num_prompt_tokens: int
    num_cached_tokens: int = 0  # prompt tokens served by the prefix cache
    error: str | None = None  # set when the request failed (finish_reason "error")
    # ttft, queue time, e2e (seconds); the final update's preemptions and cached (prompt
    # tokens hit at first admission) too, for the request metrics (vllm_series.py)
    metrics: dict[str, float] = field(default_factory=dict)
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
                                     c.num_generated, c.finish_reason, c.stop_reason, lps, c.e2e)
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


_REASON = {SeqStatus.FINISHED_STOPPED: "stop", SeqStatus.FINISHED_LENGTH: "length",
           SeqStatus.FINISHED_ABORTED: "abort", SeqStatus.FINISHED_IGNORED: "error"}


@dataclass(slots=True)
class Sample:
    """What sampling produced for one sequence in one step (add fields, e.g. logprobs, here:
    the output processor is their one reader)."""

    seq_id: int  # the sequence
    request_id: str  # its request
    token_id: int  # the sampled token
    logprob: TokenLogprob | None = None  # set when the request asked for logprobs


@dataclass(slots=True, eq=False)
class SeqState:
    """Output state of one sequence of a request."""

    index: int  # position among the request's n sequences
    detok: IncrementalDetokenizer  # generated ids -> text deltas
    text: str = ""  # decoded text not yet released (stop-string hold-back)
    pending_ids: list[int] = field(default_factory=list)  # tokens not yet released
    pending_logprobs: list[TokenLogprob] = field(default_factory=list)  # beside pending_ids
    output_ids: list[int] = field(default_factory=list)  # every accepted token (penalties)
    num_generated: int = 0  # tokens accepted so far
    tail: int = 0  # characters of text the last accepted token added (NOTE(stop-token-text))
    last_token_time: float | None = None  # for the inter-token latency
    finish_reason: str | None = None  # set once finished
    stop_reason: str | int | None = None  # matched stop string / token
    e2e: float | None = None  # set when its final output is made: it is made once


@dataclass(slots=True, eq=False)
class RequestState:
    """Output state of one request, owned by the engine's step thread."""

    request_id: str
    params: SamplingParams
    prompt_ids: list[int]
    arrival: float  # time.monotonic() at generate()
    seqs: dict[int, SeqState]  # seq_id -> state
    num_cached_tokens: int = 0
    hold: int = 0  # characters held back for stop strings
    # NOTE(stop-token-text): a token that ends its sequence as a stop id (the eos, another
    # eos id, a stop_token_ids id) stays in token_ids, its text only with
    # include_stop_str_in_output (vLLM's detokenizer, ``stop_terminated``). The scheduler's
    # verdict decides it (on_judged drops the token's text, before anything is shown); these,
    # the ids StopLimits gives from the same tokenizer, only keep stop strings out of such a
    # token's text (vLLM judges stop ids first); empty with include_stop_str_in_output
    unsearched: frozenset[int] = frozenset()
    stop_ids: frozenset[int] = frozenset()  # the eos and stop_token_ids in effect
    repeat: RepeatStop | None = None  # repetition_detection when on (NOTE(repeat))
    interval: int = 1  # new tokens per update, at least (NOTE(interval))
    # prompt_logprobs: one slot per prompt position, filled chunk by chunk (a recomputed
    # prefill never overwrites a filled slot); None once sent or when not asked for
    prompt_lps: list[TokenLogprob | None] | None = None


class OutputProcessor:
    """Per-request detokenization and finish bookkeeping (single-threaded: the step thread)."""

    def __init__(self, tokenizer: Tokenizer, metrics=None, stream_interval: int = 1) -> None:
        self.tokenizer = tokenizer
        self.stream_interval = stream_interval  # the engine's --stream-interval
        self.metrics = metrics  # KVPoolMetrics or None
        self.requests: dict[str, RequestState] = {}
        self.generation_tokens = 0
        # the sequences the last on_tokens took a token for, in the samples' order, until
        # on_judged shows them (NOTE(child-finish))
        self._taken: list[tuple[int, RequestState, SeqState]] = []

    def add(self, request_id: str, prompt_ids: list[int], params: SamplingParams,
            seq_ids: tuple[int, ...], arrival: float) -> None:
        tok = self.tokenizer
        skip = params.skip_special_tokens
        # NOTE(prompt-context) in kvpool/runtime/model/tokenizer.py: the prompt seeds the text
        seqs = {s: SeqState(i, tok.detokenizer(skip, prompt_ids)) for i, s in enumerate(seq_ids)}
        hold = max((len(s) for s in params.stop), default=1) - 1
        stop_ids = StopLimits.stop_tokens(params, tok.eos_token_id, tok.eos_token_ids[1:])[0]
        unsearched = frozenset() if params.include_stop_str_in_output else stop_ids
        rep = params.repetition_detection
        self.requests[request_id] = RequestState(
            request_id, params, prompt_ids, arrival, seqs, hold=hold, unsearched=unsearched,
            stop_ids=stop_ids, repeat=rep if rep is not None and rep.on else None,
            interval=max(self.stream_interval, params.stream_interval),
            prompt_lps=None if params.prompt_logprobs is None else [None] * len(prompt_ids))

    def add_prompt_logprobs(self, request_id: str, start: int,
                            values: list[TokenLogprob]) -> None:
        """``values[j]`` is the logprob of prompt position ``start + j`` (a prefill chunk's
        logits row j - 1 predicts it)."""
        r = self.requests.get(request_id)
        slots = r.prompt_lps if r is not None else None
        if slots is None:
            return
        for j, v in enumerate(values):
            pos = start + j
            if 0 < pos < len(slots) and slots[pos] is None:
                slots[pos] = v

    def take_prompt_logprobs(self, request_id: str) -> tuple[TokenLogprob | None, ...] | None:
        """The prompt logprobs once the whole prompt has them, exactly once; else None."""
        r = self.requests.get(request_id)
        slots = r.prompt_lps if r is not None else None
        if slots is None or any(v is None for v in slots[1:]):
            return None
        r.prompt_lps = None
        return tuple(slots)

    def history(self, request_id: str, seq_id: int) -> SeqHistory:
        """The prompt and accepted tokens of one sequence (what penalties and min_tokens read
        before the next token is sampled)."""
        r = self.requests[request_id]
        return SeqHistory(r.prompt_ids, r.seqs[seq_id].output_ids)

    def on_tokens(self, samples: list[Sample], now: float) -> dict[int, str]:
        """Feed this step's samples, before the scheduler judges them. Returns
        ``{seq_id: stop_string}`` for the sequences a stop string (or a repetition) ends: the
        one place stop strings are decided (the scheduler finishes those sequences). Nothing
        is shown before ``on_judged`` (NOTE(child-finish))."""
        stops: dict[int, str] = {}
        self._taken = taken = []
        for sample in samples:
            r = self.requests.get(sample.request_id)
            s = r.seqs.get(sample.seq_id) if r is not None else None
            if s is None or s.finish_reason is not None:
                continue
            taken.append((sample.seq_id, r, s))
            hit = self._accept(r, s, sample, now)
            if hit is not None:
                stops[sample.seq_id] = hit
        return stops

    def on_judged(self, ended: Collection[SeqOutput]) -> dict[str, list[CompletionOutput]]:
        """The sequences the last ``on_tokens`` took a token for, once the scheduler judged
        those tokens: ``ended`` is its report of the sequences it finished
        (``Scheduler.ended``; empty: none). Each of those, and each a stop string ended, gets
        its final output here, timed at its token (NOTE(child-finish)); a stop string's
        finish stands. A token that ended its sequence as a stop id leaves its text out here,
        before any of it is shown (NOTE(stop-token-text)). Returns the deltas per request."""
        ends = {so.seq_id: so for so in ended}
        deltas: dict[str, list[CompletionOutput]] = {}
        taken, self._taken = self._taken, []
        for seq_id, r, s in taken:
            if ends and s.finish_reason is None:
                so = ends.get(seq_id)
                if so is not None:
                    s.finish_reason, s.stop_reason = _REASON[so.status], so.stop_token
                    if so.by_stop_id and not r.params.include_stop_str_in_output:
                        s.text = s.text[:len(s.text) - s.tail]  # NOTE(stop-token-text)
            if s.finish_reason is not None:
                self._close(r, s, s.last_token_time)
            out = self._release(r, s, final=s.e2e is not None)
            if out is not None:
                deltas.setdefault(r.request_id, []).append(out)
        return deltas

    def _accept(self, r: RequestState, s: SeqState, sample: Sample, now: float) -> str | None:
        """One sampled token into ``s``: counted, timed, detokenized; the stop string (or
        repetition) it completes, if any."""
        token = sample.token_id
        s.num_generated += 1
        self.generation_tokens += 1
        m = self.metrics
        if m is not None:  # NOTE(per-sequence) in kvpool/metrics/request_metrics.py
            if s.last_token_time is None:
                m.ttft.observe(now - r.arrival)
                m.prompt_tokens += len(r.prompt_ids)  # NOTE(prefill-count) there
            else:
                m.itl.observe(now - s.last_token_time)
        s.last_token_time = now
        s.pending_ids.append(token)
        s.output_ids.append(token)
        if r.params.logprobs is not None and sample.logprob is not None:
            s.pending_logprobs.append(sample.logprob)
        piece = s.detok.push(token)
        s.text += piece
        s.tail = len(piece)
        if token in r.unsearched:  # NOTE(stop-token-text): it ends the sequence as a stop id
            return None
        hit = self._match_stop(r, s, len(piece))
        if hit is None and r.repeat is not None and self._repeats(r, s, token):
            hit = REPEATED
        return hit

    def _close(self, r: RequestState, s: SeqState, now: float) -> None:
        """``s`` finished: its e2e, observed as a child request's (NOTE(per-sequence)) unless
        aborted (NOTE(prefill-count), request_metrics.py)."""
        s.e2e = now - r.arrival
        if self.metrics is not None and s.finish_reason != "abort":
            self.metrics.e2e.observe(s.e2e)

    @staticmethod
    def _match_stop(r: RequestState, s: SeqState, new: int) -> str | None:
        """NOTE(stop-strings): the stop string that ends in the ``new`` characters this token
        added, as vLLM's detokenizer decides: not before ``min_tokens`` tokens (a stop string
        within them never ends the sequence), and of several the one that ends first, ties
        by the stop list's order. Each token's text is searched once, so a string must end
        in it: the whole held text, searched, matched a string the first min_tokens held."""
        if not new or s.num_generated <= r.params.min_tokens:
            return None
        text, best = s.text, None
        for stop in r.params.stop:
            i = text.find(stop, max(0, len(text) - new - len(stop) + 1))
            if i >= 0 and (best is None or i + len(stop) < best[0] + len(best[1])):
                best = (i, stop)
        if best is None:
            return None
        # vLLM's include_stop_str_in_output keeps the stop string (what follows it is cut)
        s.text = text[: best[0] + (len(best[1]) if r.params.include_stop_str_in_output else 0)]
        s.finish_reason, s.stop_reason = "stop", best[1]
        return best[1]

    @staticmethod
    def _repeats(r: RequestState, s: SeqState, token: int) -> bool:
        """NOTE(repeat): vLLM's repetition_detection (repetition.py), checked last, as its
        check_stop does: not before min_tokens, and never where the token ends the sequence
        anyway (an eos or stop token: "stop"; max_tokens reached: "length")."""
        p = r.params
        if (s.num_generated < p.min_tokens or token in r.stop_ids
                or (p.max_tokens is not None and s.num_generated >= p.max_tokens)
                or r.repeat is None or not tail_repeats(s.output_ids, r.repeat)):
            return False
        s.finish_reason, s.stop_reason = "repetition", REPEATED
        return True

    def _release(self, r: RequestState, s: SeqState, final: bool) -> CompletionOutput | None:
        """Emit what can be shown: all text when final, else all but the hold-back tail.
        NOTE(interval): vLLM's stream_interval: after a sequence's first update, the next goes
        out once ``r.interval`` new tokens wait (or at the end); its text, ids and logprobs
        wait with them. A token went out already where fewer wait than were generated."""
        waiting = len(s.pending_ids)
        if r.interval > 1 and not final and waiting < min(r.interval, s.num_generated):
            return None
        if final or r.hold <= 0:
            text, s.text = s.text, ""
        else:
            cut = max(0, len(s.text) - r.hold)
            text, s.text = s.text[:cut], s.text[cut:]
        ids, s.pending_ids = s.pending_ids, []
        lps, s.pending_logprobs = s.pending_logprobs, []
        if not ids and not text and not final:
            return None
        return CompletionOutput(s.index, tuple(ids), text, s.num_generated, s.finish_reason,
                                s.stop_reason,
                                tuple(lps) if r.params.logprobs is not None else None, s.e2e)

    def finish(self, fr: FinishedRequest, now: float, error: str | None = None
               ) -> RequestOutput | None:
        """The request left the scheduler: flush every sequence not finished yet and build its
        last update (a sequence that finished earlier had its final output then:
        NOTE(child-finish)). The bytes of a character the last tokens left incomplete are not
        shown (vLLM's rule)."""
        prompt_lps = self.take_prompt_logprobs(fr.request_id)
        r = self.requests.pop(fr.request_id, None)
        if r is None:
            return None
        outs = []
        by_id = {so.seq_id: so for so in fr.seqs}
        for seq_id, s in r.seqs.items():
            if s.e2e is not None:
                continue
            so = by_id.get(seq_id)
            if s.finish_reason is None:
                s.finish_reason = "error" if error else _REASON.get(
                    so.status if so else fr.status, "abort")
                if so is not None and so.stop_token is not None:
                    s.stop_reason = so.stop_token
            self._close(r, s, now)
            outs.append(self._release(r, s, final=True))
        m = self.metrics
        for s in r.seqs.values() if m is not None else ():  # NOTE(per-sequence), as children
            # NOTE(child-finish): the children's one shared queue wait, known here
            if s.finish_reason != "abort" and fr.first_scheduled_time is not None:
                m.queue.observe(max(0.0, fr.first_scheduled_time - r.arrival))
        return RequestOutput(fr.request_id, tuple(outs), True, len(r.prompt_ids),
                             fr.num_cached_tokens, error,
                             {"e2e": now - r.arrival,
                              "queue": (fr.first_scheduled_time or now) - r.arrival,
                              "ttft": (fr.first_token_time or now) - r.arrival,
                              "preemptions": fr.num_preemptions, "cached": fr.num_cached_tokens},
                             prompt_lps)

    def fail(self, request_id: str, error: str, now: float | None = None) -> RequestOutput | None:
        """A request failed before the scheduler reported it (e.g. a copy failed)."""
        r = self.requests.pop(request_id, None)
        if r is None:
            return None
        outs = []
        for s in r.seqs.values():
            if s.e2e is not None:  # its final output went out: NOTE(child-finish)
                continue
            s.finish_reason = s.finish_reason or "error"
            outs.append(CompletionOutput(s.index, tuple(s.pending_ids), s.text,
                                         s.num_generated, s.finish_reason))
        return RequestOutput(request_id, tuple(outs), True, len(r.prompt_ids),
                             r.num_cached_tokens, error,
                             {"e2e": (now or time.monotonic()) - r.arrival})
