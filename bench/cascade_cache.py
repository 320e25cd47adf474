"""bench/cascade_cache.py: the instant-replay cache (kvpool.replay.loop.PolicyCache) with a
chain cascade, for bench.chain_cascade (research, not in the product).

When the policy evicts a block, the cached descendants of its id (found through the trace's
``children``) can no longer be reached by a prefix lookup; the cascade takes them out of the
policy (``discard``: no access counted) and frees their blocks, except the id being touched
(its block was just used). See docs/benchmarks.md "Chain-aware eviction".
"""

from __future__ import annotations

from kvpool.core.eviction import EvictionPolicy
from kvpool.replay.loop import PolicyCache


class CascadePolicyCache(PolicyCache):
    """Invariant: PolicyCache's; and between two touches no cached id has its parent evicted
    by the policy since it was cached (each eviction dropped the victim's cached
    descendants), the touched id excepted."""

    def __init__(self, policy: EvictionPolicy, capacity: int,
                 children: dict[int, list[int]]) -> None:
        super().__init__(policy, capacity)
        self.children = children
        self.dropped = 0  # ids the cascade took out

    def touch(self, h: int, depth: int, n: int) -> None:
        if h in self.where or self.free:
            super().touch(h, depth, n)
            return
        b = self.policy.evict()  # the eviction PolicyCache.touch would make, made here
        gone = self.owner[b]
        del self.where[gone]
        self.free.append(b)
        self._drop_below(gone, h)
        super().touch(h, depth, n)  # takes a free block now

    def _drop_below(self, gone: int, keep: int) -> None:
        """Take ``gone``'s cached descendants out of the cache (``keep`` stays)."""
        where, policy = self.where, self.policy
        stack = list(self.children.get(gone, ()))
        while stack:
            c = stack.pop()
            b = where.get(c)
            if b is None or c == keep:
                continue
            policy.discard(b)
            del where[c]
            self.free.append(b)
            self.dropped += 1
            stack.extend(self.children.get(c, ()))
