"""bench/cascade_cache.py: the instant-replay cache (kvpool.replay.loop.PolicyCache) with a
chain cascade, for bench.chain_cascade (research, not in the product).

When the policy evicts a block, the cached descendants of its id (found through the trace's
``children``) can no longer be reached by a prefix lookup; the cascade takes them out of the
policy (``discard``: no access counted) and frees their blocks, except the id being touched
(its block was just used). See docs/benchmarks.md "Chain-aware eviction".
"""

from __future__ import annotations

from collections.abc import Callable

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
        self.dropped += drop_descendants(self.children, gone, h, self._drop)
        super().touch(h, depth, n)  # takes a free block now

    def _drop(self, h: int) -> bool:
        """Take cached ``h`` out of the policy and free its block; True if it was cached."""
        b = self.where.pop(h, None)
        if b is None:
            return False
        self.policy.discard(b)
        self.free.append(b)
        return True


def drop_descendants(children: dict[int, list[int]], gone: int, keep: int,
                     drop: Callable[[int], bool]) -> int:
    """``drop`` each descendant of evicted ``gone`` (through ``children``) that is still
    held, except ``keep`` (the id being inserted); below a descendant that was not held
    there is nothing left to drop. Returns how many were dropped. Both cascades' walk."""
    dropped = 0
    stack = list(children.get(gone, ()))
    while stack:
        c = stack.pop()
        if c != keep and drop(c):
            dropped += 1
            stack.extend(children.get(c, ()))
    return dropped
