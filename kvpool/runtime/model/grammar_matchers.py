"""GrammarMatchers: the step thread's llguidance matchers, one per constrained sequence.

NOTE(grammar-error): a matcher that errors mid-generation (its step ran out of fuel, or it
rejected a token) never ends its sequence as a clean stop: llguidance's mask for a broken
matcher allows only EOS, which used to end the request with finish_reason "stop" and text the
schema rejects. ``token_mask`` and ``advance`` report such sequences in ``failures``; the
engine fails their request (finish_reason "error", the message naming response_format; over
HTTP a 500 ``generation_error``, or an SSE error event after the chunks already sent).

NOTE(overlap): a step's masks depend only on the tokens sampled by the previous step, so the
engine starts them (``prefetch_mask``) before the model's forward and picks them up when it
samples: a heavy grammar's mask time runs beside the forward instead of after it (on a GPU the
forward is queued asynchronously and the host waits for the logits anyway; on CPU the mask's
threads share the cores with torch's). Each mask step is still bounded by the fuel in LIMITS.
"""

from __future__ import annotations

import logging
import os
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Sequence

import llguidance
import llguidance.torch as llg_torch
import torch

from kvpool.errors import RequestError

from .grammar import PARAM, GrammarSpec, TokenMask
from .grammar_compile import GrammarCompiler
from .tokenizer import Tokenizer

__all__ = ["GrammarMatchers"]

log = logging.getLogger(__name__)


class GrammarMatchers:
    """One llguidance matcher per constrained sequence; the step thread's only.

    Invariant: every key of ``_matchers`` is a live sequence of a request with a
    ``response_format`` (added by ``add``, dropped by ``remove`` when the request leaves), and
    each matcher has consumed exactly that sequence's generated tokens.
    """

    def __init__(self, tokenizer: Tokenizer, vocab_size: int,
                 eos_token_ids: Sequence[int] = (), num_threads: int | None = None) -> None:
        self.vocab_size = vocab_size  # the model's logits width (may exceed the tokenizer's)
        self.compiler = GrammarCompiler(tokenizer, vocab_size, eos_token_ids)  # any thread
        self._num_threads = num_threads or max(1, min(4, (os.cpu_count() or 2) // 2))
        self._executor: llguidance.LLExecutor | None = None
        self._matchers: dict[int, llguidance.LLMatcher] = {}  # seq_id -> matcher
        # NOTE(grammar-error): seq_id -> why its matcher broke (the engine takes them)
        self.failures: dict[int, str] = {}
        self._pool: ThreadPoolExecutor | None = None  # NOTE(overlap): one mask thread
        self._pending: tuple[list[int], Future] | None = None  # (seq ids, their mask)

    def __len__(self) -> int:
        return len(self._matchers)

    def __contains__(self, seq_id: int) -> bool:
        return seq_id in self._matchers

    @staticmethod
    def new_matcher(spec: GrammarSpec) -> llguidance.LLMatcher:
        """A fresh copy of ``spec``'s probed matcher. The compile itself (GrammarCompiler) is
        never done here: this runs on the step thread."""
        if spec.compiled is None:
            raise RequestError(f"{PARAM}: not compiled (GrammarCompiler.compile first)", PARAM)
        return spec.compiled.deep_copy()

    def add(self, seq_ids: Sequence[int], spec: GrammarSpec) -> None:
        matchers = [self.new_matcher(spec) for _ in seq_ids]  # all or none
        self._matchers.update(zip(seq_ids, matchers))

    def remove(self, seq_id: int) -> None:
        self._matchers.pop(seq_id, None)
        self.failures.pop(seq_id, None)

    def prefetch_mask(self, seq_ids: Sequence[int]) -> None:
        """Start ``token_mask(seq_ids)`` on a helper thread (NOTE(overlap)); the next
        ``token_mask`` call waits for it. Nothing else may touch the matchers meanwhile."""
        ids = list(seq_ids)
        if not self._matchers or not any(s in self._matchers for s in ids):
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="kvpool-mask")
        self._pending = (ids, self._pool.submit(self._compute_mask, ids))

    def token_mask(self, seq_ids: Sequence[int]) -> TokenMask | None:
        """The mask for the rows (one per entry of ``seq_ids``) that have a grammar, or None
        (the prefetched one when it was started for these rows)."""
        pending, self._pending = self._pending, None
        if pending is not None:
            mask = pending[1].result()  # never two mask computations over the same matchers
            if pending[0] == list(seq_ids):
                return mask
        return self._compute_mask(seq_ids)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)

    def _compute_mask(self, seq_ids: Sequence[int]) -> TokenMask | None:
        if not self._matchers:
            return None
        get = self._matchers.get
        pairs = [(j, m) for j, s in enumerate(seq_ids) if (m := get(s)) is not None]
        if not pairs:
            return None
        # NOTE(host-mask): llguidance writes into host memory; apply_token_mask moves it to
        # the logits' device (pin_memory raises on CPU torch, so plain host memory here).
        # NOTE(zeros): start from "nothing allowed", so a word the library leaves unwritten
        # disallows. In one early probe over an all-ones buffer (llguidance's own
        # allocate_token_bitmask) token 0 (<s>) came back allowed; not reproduced since.
        bits = torch.zeros(llg_torch.get_bitmask_shape(len(pairs), self.vocab_size),
                           dtype=torch.int32)
        if self._executor is None:
            self._executor = llguidance.LLExecutor(self._num_threads)
        llg_torch.fill_next_token_bitmask_par(
            self._executor, [(m, k) for k, (_, m) in enumerate(pairs)], bits)
        for j, m in pairs:
            if m.is_error():  # out of fuel in this very mask: NOTE(grammar-error)
                self._fail(seq_ids[j], m, "its token mask")
        return TokenMask(torch.tensor([j for j, _ in pairs], dtype=torch.long), bits)

    def advance(self, seq_ids: Sequence[int], tokens: Sequence[int]) -> list[int]:
        """Feed each constrained sequence its sampled token; returns the sequences whose
        grammar is complete (nothing but EOS can follow). A sequence whose matcher broke goes
        to ``failures`` instead (NOTE(grammar-error))."""
        if not self._matchers:
            return []
        done = []
        for s, t in zip(seq_ids, tokens):
            m = self._matchers.get(s)
            if m is None or s in self.failures:
                continue
            if not m.consume_token(t):
                self._fail(s, m, f"token {t}")
            elif m.is_stopped():
                done.append(s)
        return done

    def failed_requests(self, samples: Sequence[Any]) -> dict[str, str]:
        """request id -> why, for the samples (``.seq_id``, ``.request_id``) whose grammar
        broke (NOTE(grammar-error)); the engine fails those requests."""
        fails = self.failures
        return {} if not fails else {s.request_id: fails[s.seq_id] for s in samples
                                     if s.seq_id in fails}

    def _fail(self, seq_id: int, m: llguidance.LLMatcher, where: str) -> None:
        err = (m.get_error().strip().splitlines() or ["unknown error"])[0][:200]
        log.warning("grammar of seq %d failed at %s: %s", seq_id, where, err)
        self.failures.setdefault(seq_id, f"{PARAM}: the grammar failed at {where} "
                                         f"(structured output budget or error: {err})")

    def check_invariants(self, live_seq_ids: set[int]) -> None:
        stray = set(self._matchers) - live_seq_ids
        if stray:
            raise AssertionError(f"grammar matchers for finished sequences: {sorted(stray)}")
