"""PromptLogprobs: the logprobs of a request's own prompt tokens (``prompt_logprobs=k``).

The forward of a prefill chunk over positions ``[start, start + q)`` yields one logits row per
position; row ``j`` predicts the token at ``start + j + 1``. So a chunk scores the prompt
tokens after its first one, and its last row scores the next chunk's first token (or the
first generated token, which is the sampler's business)::

    prompt      t0  t1  t2  t3  t4  t5        chunk A = [0, 3), chunk B = [3, 6)
    chunk A     r0  r1  r2                    r0 -> t1, r1 -> t2, r2 -> t3
    chunk B                 r0  r1  r2        r0 -> t4, r1 -> t5, r2 -> (sampled)

``t0`` has no logprob (nothing predicts it), as in vLLM.

NOTE(prompt-logprobs): a prefix-cache hit skips the forward over the hit tokens, so their
logits would not exist. Such a request reads no prefix cache (the engine queues it with
``skip_reading_prefix_cache``, as vLLM's SamplingParams sets it for ``prompt_logprobs``): each
admission, a re-admission after a recompute preemption too, computes the whole prompt, in the
forward the step runs anyway, and its lookup is not counted as a prefix-cache query. Its full
blocks are still cached under the request's own ``cache_salt`` (NOTE(skip-read) in
kvpool/core/block_table.py), so a later request with the same prompt hits them, as in vLLM.
A re-admission records nothing twice: ``add_prompt_logprobs`` keeps a position's first value.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from kvpool.runtime.engine.output_processor import OutputProcessor
from kvpool.runtime.model import compute_logprobs
from kvpool.sched import ScheduledPrefill


class PromptLogprobs:
    """Picks the prefill rows that need every position's logits and records their prompt
    logprobs into the output processor (lent by the engine), which delivers them."""

    def __init__(self, outputs: OutputProcessor) -> None:
        self.outputs = outputs
        # the live requests that asked (the engine adds and discards them): empty, the engine
        # does not call ``rows``
        self.requests: set[str] = set()

    def rows(self, entries: Sequence) -> list[int]:
        """Indices of the prefill entries whose request asked for prompt logprobs."""
        reqs = self.outputs.requests
        return [i for i, e in enumerate(entries) if isinstance(e, ScheduledPrefill)
                and (r := reqs.get(e.request_id)) is not None
                and r.params.prompt_logprobs is not None]

    def record(self, entries: Sequence, rows: list[int],
               row_logits: list[torch.Tensor]) -> None:
        """Score entry ``rows[i]``'s prompt targets with ``row_logits[i]`` (one row per
        position of its chunk; see the module docstring)."""
        reqs = self.outputs.requests
        for i, lg in zip(rows, row_logits):
            e = entries[i]
            r = reqs[e.request_id]
            targets = r.prompt_ids[e.start + 1: e.start + len(e.input_ids) + 1]
            if not targets:
                continue
            k = r.params.prompt_logprobs
            values = compute_logprobs(lg[:len(targets)], targets, [k] * len(targets))
            self.outputs.add_prompt_logprobs(e.request_id, e.start + 1, values)
