"""RequestChecker: refuse at submission what the engine could never serve.

Each refusal is a :class:`~kvpool.errors.RequestError` naming the field (the server turns it
into an OpenAI error with HTTP 400) and, where a fix exists, the fix. Checked in order:

    empty prompt                          -> prompt
    a token id outside [0, vocab)         -> prompt
    prompt + max_tokens > max_model_len   -> max_tokens (prompt, if the prompt alone is too
                                             long), code context_length_exceeded
    admission NEVER for prompt + 1 token  -> prompt, code prompt_too_long_for_pool
    prompt + max_tokens > the whole pool  -> max_tokens, code context_length_exceeded
    n such sequences > the whole pool     -> n, code n_too_large_for_pool (the prompt's
                                             full blocks held once, each sequence's own
                                             generated blocks apart)

The pool check asks the manager's one admission rule, the scheduler's own, so a request
accepted here is never ignored later for its size. ``blocks_held`` is the same rule's count of
the blocks a request's tables can reference at most (the server's per-tenant quota charges it).

A caller that has judged the input rules itself (the server's edge: protocol.py) asks only
``check_pool``; everyone else gets both from ``check``.
"""

from __future__ import annotations

from kvpool.core import Admission, AllocStatus, BlockSpaceManager
from kvpool.errors import CONTEXT_LENGTH_CODE, RequestError, context_length_error
from kvpool.runtime.model import SamplingParams
from kvpool.sched import exceeds_context


class RequestChecker:
    """Validation against the model's vocabulary and context and the block pool (lent by the
    engine: asked, never changed). A response_format is checked where it is compiled, off
    this (caller's) thread: EngineCore.compile_grammar."""

    def __init__(self, vocab_size: int, max_model_len: int, manager: BlockSpaceManager) -> None:
        self.vocab_size = vocab_size
        self.max_model_len = max_model_len
        self.manager = manager

    def check(self, prompt_ids: list[int], params: SamplingParams) -> None:
        """Raise RequestError for what can never be served (see the module docstring)."""
        self.check_input(prompt_ids, params)
        self.check_pool(len(prompt_ids), params)

    def check_input(self, prompt_ids: list[int], params: SamplingParams) -> None:
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

    def check_pool(self, p: int, params: SamplingParams) -> None:
        """The pool checks for a prompt of ``p`` tokens: the prompt, then one sequence, then
        all ``n`` of them."""
        mgr = self.manager
        adm = mgr.admission([(p + 1, ())])  # the scheduler's own rule
        if adm.status is AllocStatus.NEVER:
            raise RequestError(f"the prompt (+1 token) {adm.reason}: shorten it or raise "
                               "--kv-cache-memory", "prompt", "prompt_too_long_for_pool")
        m = params.max_tokens
        if not m:
            return
        # NOTE(alone): an admitted request is never dropped for capacity; alone it may
        # take every block, but no more: refuse what outgrows the whole pool now (its
        # table holds prompt + max_tokens - 1 tokens at most: the last is never stored)
        total, bs = mgr.device_pool.num_blocks, mgr.block_size
        if self._group_need(p, m, 1).status is AllocStatus.NEVER:
            raise RequestError(
                f"the request has {p} prompt tokens and max_tokens={m}: more than the KV "
                f"cache's {total} blocks of {bs} tokens can hold; use max_tokens <= "
                f"{total * bs - p + 1} or raise --kv-cache-memory",
                "max_tokens", CONTEXT_LENGTH_CODE)
        seqs = params.n
        need = self._group_need(p, m, seqs)
        if need.status is AllocStatus.NEVER:
            fit = next(k for k in range(seqs - 1, 0, -1)
                       if self._group_need(p, m, k).status is not AllocStatus.NEVER)
            raise RequestError(
                f"n={seqs} sequences of {p} prompt tokens (held once) + max_tokens={m} need "
                f"{need.capacity} blocks, more than the KV cache's {total} blocks of {bs} "
                f"tokens; use n <= {fit}, lower max_tokens, or raise --kv-cache-memory",
                "n", "n_too_large_for_pool")

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
