"""RequestChecker: the engine's refusal at submission of what it could never serve, by the same
rules (``exceeds_context`` and the manager's admission). Each refusal is a
:class:`~kvpool.errors.RequestError` naming the field (the server turns it into an OpenAI error
with HTTP 400) and, where a fix exists, the fix. Checked in order:

    empty prompt                          -> prompt
    a token id outside [0, vocab)         -> prompt
    n sequences > max_num_seqs (or the    -> n, code n_too_large_for_batch (a request's
      tenant cap): they never run at once    sequences run together; it used to be queued
                                             and failed as a 500)
    prompt + max_tokens > max_model_len   -> max_tokens (prompt, if the prompt alone is too
                                             long), code context_length_exceeded
    admission NEVER for prompt + 1 token  -> prompt, code prompt_too_long_for_pool
    prompt + max_tokens > the whole pool  -> max_tokens, code context_length_exceeded
    n such sequences > the whole pool     -> n, code n_too_large_for_pool (the prompt's
                                             full blocks held once, each sequence's own
                                             generated blocks apart)

NOTE(apart): the ``n`` rules are the forks' (``forks_fit``). The server runs sequences that
cannot run as forks as child requests, as vLLM does (child_requests.py in
kvpool/server), each a group of ``fork_group`` forks, and asks ``check_pool(...,
apart=True)``: one sequence's 400s, as n=1 gets
(the request gate refuses more requests than --max-queue lets in flight, children counted:
n_too_large_for_queue). The engine's own ``generate`` runs forks only, and refuses them.

The pool check asks the manager's one admission rule, the scheduler's own, so a request
accepted there is never ignored later for its size. ``blocks_held`` is the same rule's count of
the blocks a request's tables can reference at most (the server's per-tenant quota charges it).
A caller that has judged the input rules itself (the server's edge: protocol.py) asks only
``check_pool``; everyone else gets both from ``check``.
"""

from __future__ import annotations

import dataclasses

from kvpool.core import Admission, AllocStatus, BlockSpaceManager
from kvpool.errors import CONTEXT_LENGTH_CODE, RequestError, context_length_error
from kvpool.sched.admission_gate import exceeds_context
from kvpool.sched.sequence import StopParams

__all__ = ["RequestChecker"]


class RequestChecker:
    """Validation against the model's vocabulary and context and the block pool (lent by the
    engine: asked, never changed). A response_format is checked where it is compiled, off
    this (caller's) thread: EngineCore.compile_grammar."""

    def __init__(self, vocab_size: int, max_model_len: int, manager: BlockSpaceManager,
                 max_seqs: int | None = None) -> None:
        """``max_seqs``: the most sequences one request may run at once (max_num_seqs, or
        the tenant cap when lower: never_reason's rules); None: not checked here."""
        self.vocab_size = vocab_size
        self.max_model_len = max_model_len
        self.manager = manager
        self.max_seqs = max_seqs

    def check(self, prompt_ids: list[int], params: StopParams) -> None:
        """Raise RequestError for what can never be served (see the module docstring)."""
        self.check_input(prompt_ids, params)
        self.check_pool(len(prompt_ids), params)

    def check_input(self, prompt_ids: list[int], params: StopParams) -> None:
        """The prompt against the vocabulary and the context (not the pool)."""
        if not prompt_ids:
            raise RequestError("the prompt is empty", "prompt")
        vocab = self.vocab_size
        bad = next((t for t in prompt_ids if not 0 <= t < vocab), None)
        if bad is not None:
            raise RequestError(f"token id {bad} is outside the vocabulary [0, {vocab})",
                               "prompt")
        n = len(prompt_ids)
        limit = self.max_model_len
        alone = exceeds_context(n, 1, limit)  # the prompt leaves no room to generate
        if alone or exceeds_context(n, params.max_tokens or 1, limit):
            raise context_length_error(
                limit, f"the request has {n} prompt tokens and asks for {params.max_tokens} "
                "more", "prompt" if alone else "max_tokens")

    def forks_fit(self, p: int, params: StopParams) -> bool:
        """Whether ``params.n`` sequences of a ``p``-token prompt can run together as forks:
        no more than run at once, and held by the whole pool at the length asked (one
        sequence always can); NOTE(apart) where they cannot."""
        if params.n == 1:
            return True
        if self.max_seqs is not None and params.n > self.max_seqs:
            return False
        asked = self._asked(p, params)
        return asked is None or self._fits(p, asked[0], params.n)

    def fork_group(self, p: int, params: StopParams) -> int:
        """NOTE(apart): the most of ``params.n`` sequences that can run together as forks,
        one at least (``params.n`` where they all can): the size of each child request."""
        if self.forks_fit(p, params):  # the common case: one check
            return params.n
        lo, hi = 1, min(params.n, self.max_seqs or params.n)
        while lo < hi:  # forks_fit(lo), and none past hi
            mid = (lo + hi + 1) // 2
            if self.forks_fit(p, dataclasses.replace(params, n=mid)):
                lo = mid
            else:
                hi = mid - 1
        return lo

    def check_pool(self, p: int, params: StopParams, *, apart: bool = False) -> None:
        """The pool checks for a prompt of ``p`` tokens: whether ``n`` sequences can ever run
        at once, the prompt, one sequence, all ``n`` (``apart``: NOTE(apart), as one)."""
        if apart and not self.forks_fit(p, params):
            params = dataclasses.replace(params, n=1)  # one child's rules
        if self.max_seqs is not None and params.n > self.max_seqs:
            raise RequestError(
                f"n={params.n} sequences (best_of's, where it is larger) run together, more "
                f"than the {self.max_seqs} the server runs at once (--max-num-seqs, or the "
                f"tenant's cap): use n <= {self.max_seqs}", "n", "n_too_large_for_batch")
        mgr = self.manager
        adm = mgr.admission([(p + 1, ())])  # the scheduler's own rule
        if adm.status is AllocStatus.NEVER:
            raise RequestError(f"the prompt (+1 token) {adm.reason}: shorten it or raise "
                               "--kv-cache-memory", "prompt", "prompt_too_long_for_pool")
        if (asked := self._asked(p, params)) is None:
            return
        m, said = asked
        # NOTE(alone): an admitted request is never dropped for capacity; alone it may
        # take every block, but no more: refuse what outgrows the whole pool now (its
        # table holds prompt + max_tokens - 1 tokens at most: the last is never stored)
        total, bs = mgr.device_pool.num_blocks, mgr.block_size
        if self._group_need(p, m, 1).status is AllocStatus.NEVER:
            raise RequestError(
                f"the request has {p} prompt tokens and {said}: more than the KV "
                f"cache's {total} blocks of {bs} tokens can hold; use max_tokens <= "
                f"{self._fitting(p, m, params.n)} or raise --kv-cache-memory",
                "max_tokens", CONTEXT_LENGTH_CODE)
        self._check_group(p, m, said, params.n)

    def _check_group(self, p: int, m: int, said: str, seqs: int) -> None:
        """n_too_large_for_pool: ``seqs`` forks of a ``p``-token prompt growing by ``m``
        (``said``: how the request asked for it) that the whole pool can never hold."""
        need = self._group_need(p, m, seqs)
        if need.status is not AllocStatus.NEVER:
            return
        fit = next(k for k in range(seqs - 1, 0, -1)
                   if self._group_need(p, m, k).status is not AllocStatus.NEVER)
        room = self.room(p, m, seqs)
        lower = f"max_tokens <= {room}" if room and room < m else "a lower max_tokens"
        total, bs = self.manager.device_pool.num_blocks, self.manager.block_size
        raise RequestError(
            f"n={seqs} sequences of {p} prompt tokens (held once) + {said} need "
            f"{need.capacity} blocks, more than the KV cache's {total} blocks of {bs} "
            f"tokens; use n <= {fit}, {lower}, or raise --kv-cache-memory",
            "n", "n_too_large_for_pool")

    def _fitting(self, p: int, max_tokens: int, seqs: int) -> int:
        """The max_tokens to suggest when one sequence of a ``p``-token prompt cannot grow by
        ``max_tokens``: what all ``seqs`` can grow to together (one sequence's bound, which
        n > 1 would be refused again at, where that is none)."""
        mgr = self.manager
        alone = mgr.device_pool.num_blocks * mgr.block_size - p + 1
        room = self.room(p, max_tokens, seqs) if seqs > 1 else None
        return room if room and room < max_tokens else alone

    def _asked(self, p: int, params: StopParams) -> tuple[int, str] | None:
        """The tokens each sequence may grow by and how the request asked for them; None
        when it is not bounded here (one sequence, no max_tokens: it stops at the context).

        NOTE(open-n): n > 1 sequences with no max_tokens grow to the context's room together,
        so they are checked at that length: a group the pool can never hold there was
        accepted and failed part-way (finish_reason "error" after 124 tokens each); the
        server now runs such a group as child requests (NOTE(apart))."""
        if params.max_tokens is not None:  # 0: nothing to grow (echo)
            return (params.max_tokens, f"max_tokens={params.max_tokens}") \
                if params.max_tokens else None
        if params.n == 1:
            return None
        m = self.max_model_len - p
        return m, f"no max_tokens (up to {m} tokens each, the context's room)"

    def room(self, p: int, max_tokens: int | None, seqs: int) -> int | None:
        """NOTE(fit-default): the largest max_tokens, up to ``max_tokens``, that ``seqs``
        sequences of a ``p``-token prompt can all grow to in the whole pool; ``max_tokens``
        itself where they fit, or where not even one token each does. Only suggested in
        refusals: a default max_tokens (chat's: the context's room) is no longer lowered to
        it to run n forks; the server runs them as child requests (NOTE(apart))."""
        if not max_tokens or seqs == 1 or self._fits(p, max_tokens, seqs):
            return max_tokens
        lo, hi = 0, max_tokens  # fits(lo) (0: none), not fits(hi)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if self._fits(p, mid, seqs) else (lo, mid)
        return lo or max_tokens

    def _fits(self, p: int, max_tokens: int, seqs: int) -> bool:
        return self._group_need(p, max_tokens, seqs).status is not AllocStatus.NEVER

    def blocks_held(self, p: int, max_tokens: int, seqs: int) -> int:
        """The most blocks ``seqs`` sequences of a ``p``-token prompt grown to ``max_tokens``
        can hold at once (prefix hits and forks only share blocks; copy-on-write replaces a
        shared block rather than adding one)."""
        return self._group_need(p, max(1, max_tokens), seqs).capacity

    def _group_need(self, p: int, max_tokens: int, seqs: int) -> Admission:
        """The admission rule, against the whole pool, for ``seqs`` sequences of this prompt
        grown to max_tokens (the last token never stored) with diverged outputs: the
        prompt's full blocks held once, as while they decode or when they are recomputed."""
        if seqs == 1 or max_tokens == 1:  # nothing generated is stored: one shared table
            return self.manager.admission([(p + max_tokens - 1, ())], watermark=False)
        return self.manager.admission([(p + max_tokens - 1, ())] * seqs, watermark=False,
                                      shared_blocks=p // self.manager.block_size)
