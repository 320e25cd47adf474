"""LRU: the order vLLM's prefix cache evicts in (the block released longest ago goes first)."""

from __future__ import annotations

from kvpool.core.eviction.base import LinkedQueuesPolicy
from kvpool.errors import InvalidBlockError


class LRUPolicy(LinkedQueuesPolicy):
    """Invariant: one queue holds the evictable blocks in the order they became evictable (a
    defrag move keeps its place); ``evict`` pops its head, the least recently released block.
    Every operation is O(1)."""

    name = "lru"

    def insert(self, block_id: int, block_hash: bytes, depth: int, now: float) -> None:
        where = self._where
        if not 0 <= block_id < len(where):
            self._grow(block_id)
            where = self._where
        if where[block_id] == 0:
            raise InvalidBlockError(f"block {block_id} is already evictable")
        node = block_id + 1
        memo = self._take_memo(block_hash) if self._memo is not None else None
        if memo is None:  # link at the tail of queue 0 (inlined: the hot path)
            prev = self._prev
            last = prev[0]
            prev[node] = last
            self._next[node] = 0
            self._next[last] = node
            prev[0] = node
        else:
            self._link_after(node, memo[2])
        where[block_id] = 0
        self._hash[block_id] = block_hash
        self._len += 1

    def remove(self, block_id: int) -> None:
        self._unlink(block_id)
        self._hash[block_id] = None

    def evict(self) -> int:
        if not self._len:
            raise IndexError("evict from an empty LRUPolicy")
        return self._unlink_head(0)

