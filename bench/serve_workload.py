"""Request sets for bench.serve: ``(prompt token ids, max_tokens)`` pairs, seeded.

- ``uniform``: independent prompts of 16..max_prompt tokens and outputs of 16..max_out (the
  original bench.serve workload; no shared prefix).
- ``chat``: the shape of the Mooncake conversation trace (../shared/traces): every
  conversation starts with one of a few system prompts (the trace's first block, hash id 0, is
  shared by nearly every request), popular ones more often; 40% of requests continue an
  earlier conversation (its prompt + its reply + a new user turn, so the whole earlier turn is
  a shared prefix); user turns and outputs of mixed length. Scaled to fit a CPU: the trace's
  prompts are thousands of tokens, here at most ``max_prompt``.
"""

from __future__ import annotations

import random

__all__ = ["chat", "prefix_share", "uniform"]

LOW, HIGH = 3, 500  # token ids drawn from [LOW, HIGH): real tokens of any vocabulary >= 500


def uniform(n: int, seed: int = 0, max_prompt: int = 512, max_out: int = 256):
    rng = random.Random(seed)
    reqs = []
    for _ in range(n):
        p = rng.randint(16, max_prompt)
        reqs.append(([rng.randrange(LOW, HIGH) for _ in range(p)], rng.randint(16, max_out)))
    return reqs


def chat(n: int, seed: int = 0, max_prompt: int = 512, max_out: int = 256,
         system_lens: tuple[int, ...] = (), continue_p: float = 0.4):
    """``n`` requests in arrival order (see the module doc)."""
    rng = random.Random(seed)
    system_lens = system_lens or (max_prompt // 4, max_prompt // 6, max_prompt // 8)
    systems = [[rng.randrange(LOW, HIGH) for _ in range(k)] for k in system_lens]
    weights = [1 / (i + 1) for i in range(len(systems))]  # Zipf-like popularity

    def tokens(k: int) -> list[int]:
        return [rng.randrange(LOW, HIGH) for _ in range(k)]

    reqs: list[tuple[list[int], int]] = []
    while len(reqs) < n:
        user = tokens(rng.randint(8, max(8, max_prompt // 4)))
        out = rng.randint(16, max_out)
        prompt = None
        if reqs and rng.random() < continue_p:
            prev, prev_out = rng.choice(reqs)
            cand = prev + tokens(prev_out) + user  # the earlier turn, its reply, a new turn
            if len(cand) <= max_prompt:
                prompt = cand
        if prompt is None:
            prompt = rng.choices(systems, weights)[0] + user
        reqs.append((prompt[:max_prompt], out))
    return reqs


def prefix_share(reqs, block_size: int = 16) -> float:
    """Fraction of prompt tokens in full blocks that an earlier request's prompt already holds
    (the most a prefix cache can serve; a workload property, not an engine figure)."""
    seen: set[tuple[int, ...]] = set()
    shared = total = 0
    for prompt, _ in reqs:
        total += len(prompt)
        for end in range(block_size, len(prompt) + 1, block_size):
            key = tuple(prompt[:end])
            if key in seen:
                shared += block_size
            else:
                seen.add(key)
    return shared / total if total else 0.0
