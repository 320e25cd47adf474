"""GrammarMatchers: the step thread's llguidance matchers, one per constrained sequence.

NOTE(grammar-error): a matcher that errors mid-generation (its step ran out of fuel, or it
rejected a token) never ends its sequence as a clean stop: llguidance's mask for a broken
matcher allows only EOS, which used to end the request with finish_reason "stop" and text the
schema rejects. ``token_mask`` and ``advance`` report such sequences in ``failures``; the
engine fails their request (finish_reason "error", the message starting with the field the
client sent the grammar in, ``GrammarSpec.param``: guided_regex, structured_outputs.json, tools,
response_format...; over HTTP a 500 ``generation_error`` whose ``param`` names it, or an SSE
error event after the chunks already sent). Each sequence's field is noted once, by ``add``.

NOTE(consume-budget): llguidance's ``consume_token`` holds the GIL, on the step thread, in the
process whose event loop serves HTTP; its cost is bounded by no fuel. An ambiguous grammar
(``start: x``, ``x: x x | x x x | "a" | ""``, 40 bytes) passes the probes and then costs more
with every token (its Earley row grows: 0.5 ms a token at ~300 items, 12 ms at ~1,000, 83 ms at
~2,000, llguidance's row limit, reached ~400 tokens in: 23 s of stalls for one request). A
tighter row limit cannot tell it from a legitimate wide row: a 1,900-entry choice or a
1,200-tool ``required`` union needs a row of that size and reads a token in under 0.2 ms
(README, Structured output). So each sequence's matcher has a CPU budget instead: the thread
CPU time its ``consume_token`` calls take (unaffected by neighbours or a loaded box), at most
CONSUME_ALLOWANCE_S plus CONSUME_PER_TOKEN_S for each token it read. Legitimate grammars
measured at 0.002-0.02 ms a token (worst single token 0.2 ms; 5 ms once in a schema of 64
``^x{9900}$`` patterns); the ambiguous grammar crosses the budget near token 125, at ~3.5 ms a
token, and its request fails (NOTE(grammar-error)) after ~0.1 s of CPU instead of 23 s. The
budget grows with the tokens read, so a long legitimate output never runs out of it, and the
allowance absorbs a few expensive tokens (a lexer step up to its fuel, ~7 ms).

NOTE(overlap): a step's masks depend only on the tokens sampled by the previous step, so the
engine starts them (``prefetch_mask``) before the model's forward and picks them up when it
samples: a heavy grammar's mask time runs beside the forward instead of after it (on a GPU the
forward is queued asynchronously and the host waits for the logits anyway; on CPU the mask's
threads share the cores with torch's). Each mask step is still bounded by the fuel in LIMITS.
Every mask runs on that one thread (prefetched or not), so no two ever touch a matcher at once.

NOTE(think-grammar): a spec with ``after`` (a reasoning model's end-of-thinking token,
server/reasoning.py) leaves its sequence free until it samples that token: meanwhile the
sequence is ``waiting``, has no mask row and its matcher reads nothing; from the token after it
the matcher constrains as any other. vLLM's structured outputs wait for the end of reasoning
the same way, so a model thinks before it answers in the schema.

NOTE(late-mask): ``token_mask`` may be given a grace: a mask not ready within it comes back as a
:class:`LateMask` (its computation goes on); the engine defers those rows and resolves the mask
with ``late_mask`` once it is done (row_sampler.py).
"""

from __future__ import annotations

import logging
import os
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import llguidance
import llguidance.numpy as llg_numpy  # NOTE(no-llg-torch): not llguidance.torch
import torch

from kvpool.errors import RequestError

from .grammar import PARAM, GrammarSpec, TokenMask
from .grammar_compile import GrammarCompiler, first_error_line
from .tokenizer import Tokenizer

__all__ = ["CONSUME_ALLOWANCE_S", "CONSUME_PER_TOKEN_S", "GrammarMatchers", "LateMask"]

log = logging.getLogger(__name__)

# NOTE(consume-budget): a sequence's matcher may spend this much thread CPU in consume_token,
# plus this much for each token it read
CONSUME_ALLOWANCE_S = 0.05
CONSUME_PER_TOKEN_S = 0.0005

_Pairs = list[tuple[int, int, llguidance.LLMatcher]]  # (row, seq id, its matcher)


@dataclass(frozen=True, eq=False)
class LateMask:
    """A mask still being computed after its grace (NOTE(late-mask))."""

    rows: list[int]  # the rows of the token_mask call that have a grammar
    pairs: _Pairs  # row k of the mask's bits is pairs[k] (its row, sequence and matcher)
    future: Future

    def done(self) -> bool:
        return self.future.done()


@dataclass(slots=True)
class _Meter:
    """One constrained sequence's count (NOTE(consume-budget))."""

    tokens: int = 0  # output tokens advance was given (the position a failure names)
    read: int = 0  # of those, the ones its matcher read (after its spec's ``after`` token)
    cpu: float = 0.0  # thread CPU seconds consume_token took on them


class GrammarMatchers:
    """One llguidance matcher per constrained sequence; the step thread's only.

    Invariant: every key of ``matchers`` is a live sequence of a request with a
    ``response_format`` (added by ``add``, dropped by ``remove`` when the request leaves), and
    each matcher has consumed exactly that sequence's generated tokens after its spec's
    ``after`` token (all of them without one); ``waiting`` holds the sequences that have not
    sampled it yet (NOTE(think-grammar)).
    """

    def __init__(self, tokenizer: Tokenizer, vocab_size: int,
                 eos_token_ids: Sequence[int] = (), num_threads: int | None = None,
                 before_mask: Callable[[list[int]], None] | None = None) -> None:
        """``before_mask(seq_ids)``: called on the mask thread before each mask (the fault
        plan's hook, runtime/faults.py)."""
        self.vocab_size = vocab_size  # the model's logits width (may exceed the tokenizer's)
        self.compiler = GrammarCompiler(tokenizer, vocab_size, eos_token_ids)  # any thread
        self._num_threads = num_threads or max(1, min(4, (os.cpu_count() or 2) // 2))
        self._executor: llguidance.LLExecutor | None = None
        # seq_id -> matcher; the engine reads it (empty: no grammar) before calling in here
        self.matchers: dict[int, llguidance.LLMatcher] = {}
        # NOTE(grammar-error): seq_id -> why its matcher broke (the engine takes them)
        self.failures: dict[int, str] = {}
        self._params: dict[int, str] = {}  # seq_id -> its spec's param (NOTE(grammar-error))
        self.waiting: dict[int, int] = {}  # seq_id -> the token it waits for (NOTE(think-grammar))
        self._meters: dict[int, _Meter] = {}  # seq_id -> its count (NOTE(consume-budget))
        self._pool: ThreadPoolExecutor | None = None  # NOTE(overlap): one mask thread
        self._pending: tuple[list[int], _Pairs, Future] | None = None  # (seq ids, rows, bits)
        self._before_mask = before_mask

    def __len__(self) -> int:
        return len(self.matchers)

    def __contains__(self, seq_id: int) -> bool:
        """Whether ``seq_id``'s next token is constrained (it has a grammar, not waiting)."""
        return seq_id in self.matchers and seq_id not in self.waiting

    @staticmethod
    def new_matcher(spec: GrammarSpec) -> llguidance.LLMatcher:
        """A fresh copy of ``spec``'s probed matcher. The compile itself (GrammarCompiler) is
        never done here: this runs on the step thread."""
        if spec.compiled is None:
            raise RequestError(f"{PARAM}: not compiled (GrammarCompiler.compile first)", PARAM)
        return spec.compiled.deep_copy()

    def add(self, seq_ids: Sequence[int], spec: GrammarSpec) -> None:
        matchers = [self.new_matcher(spec) for _ in seq_ids]  # all or none
        self.matchers.update(zip(seq_ids, matchers))
        self._params.update(dict.fromkeys(seq_ids, spec.param))
        self._meters.update((s, _Meter()) for s in seq_ids)
        if spec.after is not None:  # NOTE(think-grammar)
            self.waiting.update(dict.fromkeys(seq_ids, spec.after))

    def remove(self, seq_id: int) -> None:
        self.matchers.pop(seq_id, None)
        self._params.pop(seq_id, None)
        self.failures.pop(seq_id, None)
        self.waiting.pop(seq_id, None)
        self._meters.pop(seq_id, None)

    def prefetch_mask(self, seq_ids: Sequence[int]) -> None:
        """Start ``token_mask(seq_ids)`` on the mask thread (NOTE(overlap)); the next
        ``token_mask`` call picks it up."""
        ids = list(seq_ids)
        pairs = self._pairs(ids)
        if pairs:
            self._pending = (ids, pairs, self._submit(pairs))

    def token_mask(self, seq_ids: Sequence[int],
                   grace: float | None = None) -> TokenMask | LateMask | None:
        """The mask for the rows (one per entry of ``seq_ids``) that have a grammar, or None
        (the prefetched one when it was started for these rows). With ``grace`` (seconds), a
        prefetched mask not ready by then is a LateMask (NOTE(late-mask))."""
        pending, self._pending = self._pending, None
        if pending is not None and pending[0] == list(seq_ids):
            _, pairs, fut = pending
            try:
                return self._finish(pairs, fut.result(timeout=grace))
            except FutureTimeout:
                return LateMask([j for j, _, _ in pairs], pairs, fut)
        pairs = self._pairs(seq_ids)
        return self._finish(pairs, self._submit(pairs).result()) if pairs else None

    def late_mask(self, late: LateMask, rows: Sequence[int]) -> TokenMask:
        """The finished ``late`` mask for its rows ``rows`` (indices into ``late.rows``),
        as a mask over a batch of exactly those rows (waits for it if need be)."""
        full = self._finish(late.pairs, late.future.result())
        pick = torch.tensor(list(rows), dtype=torch.long)
        return TokenMask(torch.arange(len(pick)), full.bits[pick])

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)

    def _pairs(self, seq_ids: Sequence[int]) -> _Pairs:
        """The rows of ``seq_ids`` that have a grammar, read on the step thread."""
        if not self.matchers:
            return []
        get, waiting = self.matchers.get, self.waiting
        return [(j, s, m) for j, s in enumerate(seq_ids)
                if (m := get(s)) is not None and s not in waiting]

    def _submit(self, pairs: _Pairs) -> Future:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="kvpool-mask")
        return self._pool.submit(self._fill, pairs)

    def _fill(self, pairs: _Pairs) -> torch.Tensor:
        """The mask thread: the bits of ``pairs``' rows."""
        if self._before_mask is not None:
            self._before_mask([s for _, s, _ in pairs])
        # NOTE(host-mask): llguidance writes into host memory; apply_token_mask moves it to
        # the logits' device (pin_memory raises on CPU torch, so plain host memory here).
        # NOTE(zeros): start from "nothing allowed", so a word the library leaves unwritten
        # disallows. In one early probe over an all-ones buffer (llguidance's own
        # allocate_token_bitmask) token 0 (<s>) came back allowed; not reproduced since.
        # NOTE(no-llg-torch): llguidance.torch's module-level @torch.compile imports dynamo
        # and inductor (~2.5 s CPU and ~130 MB RSS per server start; its kernel is never used
        # here); llguidance.numpy's fill is the same executor call, and .numpy() shares the
        # tensor's memory, so the mask is written in place as before.
        bits = torch.zeros(llg_numpy.get_bitmask_shape(len(pairs), self.vocab_size),
                           dtype=torch.int32)
        if self._executor is None:
            self._executor = llguidance.LLExecutor(self._num_threads)
        llg_numpy.fill_next_token_bitmask_par(
            self._executor, [(m, k) for k, (_, _, m) in enumerate(pairs)], bits.numpy())
        return bits

    def _finish(self, pairs: _Pairs, bits: torch.Tensor) -> TokenMask:
        """The step thread: note the matchers this mask broke, then the mask itself."""
        for _, s, m in pairs:
            if m.is_error() and self.matchers.get(s) is m:  # NOTE(grammar-error)
                self._fail(s, f"its token mask after output token {self._meters[s].tokens}",
                           first_error_line(m))
        return TokenMask(torch.tensor([j for j, _, _ in pairs], dtype=torch.long), bits)

    def advance(self, seq_ids: Sequence[int], tokens: Sequence[int]) -> list[int]:
        """Feed each constrained sequence its sampled token; returns the sequences whose
        grammar is complete (nothing but EOS can follow). A sequence whose matcher broke goes
        to ``failures`` instead (NOTE(grammar-error))."""
        if not self.matchers:
            return []
        done = []
        for s, t in zip(seq_ids, tokens):
            m = self.matchers.get(s)
            if m is None or s in self.failures:
                continue
            self._meters[s].tokens += 1
            if s in self.waiting:  # NOTE(think-grammar): free until its token, then read
                if t == self.waiting[s]:
                    del self.waiting[s]
                continue
            if self._read(s, m, t) and m.is_stopped():
                done.append(s)
        return done

    def _read(self, seq_id: int, m: llguidance.LLMatcher, token: int) -> bool:
        """Feed ``token`` to ``seq_id``'s matcher, metered (NOTE(consume-budget)); False when
        the matcher broke or went over its budget (the sequence is in ``failures``)."""
        meter = self._meters[seq_id]
        start = time.thread_time()
        ok = m.consume_token(token)
        meter.cpu += time.thread_time() - start
        meter.read += 1
        if not ok:
            self._fail(seq_id, _at(meter, token), first_error_line(m))
            return False
        if meter.cpu <= CONSUME_ALLOWANCE_S + CONSUME_PER_TOKEN_S * meter.read:
            return True
        self._fail(seq_id, _at(meter, token), f"over its CPU budget: {meter.cpu * 1e3:.0f} ms "
                   f"in the matcher for {meter.read} tokens, at most "
                   f"{CONSUME_ALLOWANCE_S * 1e3:.0f} ms + {CONSUME_PER_TOKEN_S * 1e3:g} ms a "
                   "token (an ambiguous grammar?)")
        return False

    def failed_requests(self, samples: Sequence[Any]) -> dict[str, str]:
        """request id -> why, for the samples (``.seq_id``, ``.request_id``) whose grammar
        broke (NOTE(grammar-error)); the engine fails those requests."""
        fails = self.failures
        return {} if not fails else {s.request_id: fails[s.seq_id] for s in samples
                                     if s.seq_id in fails}

    def _fail(self, seq_id: int, where: str, err: str) -> None:
        log.warning("grammar of seq %d failed at %s: %s", seq_id, where, err)
        param = self._params.get(seq_id, PARAM)
        self.failures.setdefault(seq_id, f"{param}: the grammar failed at {where} "
                                         f"(structured output budget or error: {err})")

    def check_invariants(self, live_seq_ids: set[int]) -> None:
        stray = (set(self.matchers) | set(self._params) | set(self.waiting)
                 | set(self._meters)) - live_seq_ids
        if stray:
            raise AssertionError(f"grammar matchers for finished sequences: {sorted(stray)}")


def _at(meter: _Meter, token: int) -> str:
    """Where a sequence's grammar failed, for its error: the output token's position and id."""
    return f"output token {meter.tokens} (id {token})"
