"""RequestChecker: refuse at submission what the engine could never serve.

Each refusal is a :class:`~kvpool.errors.RequestError` naming the field (the server turns it
into an OpenAI error with HTTP 400) and, where a fix exists, the fix. Checked in order:

    empty prompt                          -> prompt
    a token id outside [0, vocab)         -> prompt
    prompt + max_tokens > max_model_len   -> max_tokens (prompt, if the prompt alone is too
                                             long), code context_length_exceeded
    admission NEVER for prompt + 1 token  -> prompt, code prompt_too_long_for_pool
    prompt + max_tokens > the whole pool  -> max_tokens, code context_length_exceeded

The pool check asks the manager's one admission rule, the scheduler's own, so a request
accepted here is never ignored later for its size.
"""

from __future__ import annotations

from kvpool.core import AllocStatus, BlockSpaceManager
from kvpool.errors import RequestError
from kvpool.runtime.model import SamplingParams


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
        if not prompt_ids:
            raise RequestError("the prompt is empty", "prompt")
        vocab = self.vocab_size
        bad = next((t for t in prompt_ids if not 0 <= t < vocab), None)
        if bad is not None:
            raise RequestError(f"token id {bad} is outside the vocabulary [0, {vocab})",
                               "prompt")
        n = len(prompt_ids)
        limit = self.max_model_len
        want = n + (params.max_tokens or 1)
        if n >= limit or (params.max_tokens and want > limit):
            raise RequestError(
                f"this model's maximum context length is {limit} tokens; the "
                f"request has {n} prompt tokens and asks for {params.max_tokens} more",
                "max_tokens" if n < limit else "prompt", "context_length_exceeded")
        adm = self.manager.admission([(n + 1, ())])  # the scheduler's own rule
        if adm.status is AllocStatus.NEVER:
            raise RequestError(f"the prompt (+1 token) {adm.reason}: shorten it or raise "
                               "--kv-cache-memory", "prompt", "prompt_too_long_for_pool")
        if params.max_tokens:
            # NOTE(alone): an admitted request is never dropped for capacity; alone it may
            # take every block, but no more: refuse what outgrows the whole pool now (its
            # table holds prompt + max_tokens - 1 tokens at most: the last is never stored)
            mgr = self.manager
            whole = mgr.admission([(n + params.max_tokens - 1, ())], watermark=False)
            if whole.status is AllocStatus.NEVER:  # the same one rule, against the whole pool
                total, bs = mgr.device_pool.num_blocks, mgr.block_size
                raise RequestError(
                    f"the request has {n} prompt tokens and max_tokens={params.max_tokens}: "
                    f"more than the KV cache's {total} blocks of {bs} tokens can hold; use "
                    f"max_tokens <= {total * bs - n + 1} or raise --kv-cache-memory",
                    "max_tokens", "context_length_exceeded")
