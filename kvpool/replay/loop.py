"""The instant-replay loop, and ``simulate``: a prefix-cache replay through one policy alone.

Every prefix-cache replay in the project (``kvpool replay --instant``, ``simulate``, the bench
baselines and bounds) runs ``replay``; what differs is the cache it drives, any object with::

    h in cache                  is trace hash id ``h`` cached now
    cache.touch(h, depth, n)    request the block at ``depth`` of an ``n``-block request: a hit
                                refreshes it, a miss brings it in (evicting if full)

The semantics (docs/benchmarks.md "Trace replay"): a request hits the leading run of its
hash ids that are cached; then, tail first (so the head ends most recently used), each of its
ids is touched. ``touch`` is called with ``depth == n - 1`` first for every request.
"""

from __future__ import annotations

from collections.abc import Container, Iterable, Sequence
from typing import Protocol

from kvpool.core.eviction.base import EvictionPolicy

__all__ = ["PolicyCache", "ReplayCache", "leading_run", "replay", "simulate"]


class ReplayCache(Protocol):
    def __contains__(self, h: int) -> bool: ...

    def touch(self, h: int, depth: int, n: int) -> None: ...


def leading_run(ids: Sequence[int], cached: Container[int]) -> int:
    """How many of ``ids``, from the first, are in ``cached``: a request's prefix hits."""
    n = len(ids)
    k = 0
    while k < n and ids[k] in cached:
        k += 1
    return k


def replay(requests: Iterable[Sequence[int]], cache: ReplayCache) -> tuple[int, int]:
    """(hits, blocks) of ``requests`` replayed through ``cache`` (see the module docstring)."""
    touch = cache.touch
    hits = blocks = 0
    for ids in requests:
        n = len(ids)
        hits += leading_run(ids, cache)
        blocks += n
        for d in range(n - 1, -1, -1):
            touch(ids[d], d, n)
    return hits, blocks


class PolicyCache:
    """``capacity`` blocks whose eviction ``policy`` decides, without an allocator (fast).

    Invariant: ``where`` and ``owner`` are inverse on the cached ids, every block is either
    free or cached, and the policy holds exactly the cached blocks. A touched id is on_hit +
    remove + insert (cached) or takes a free block, else ``policy.evict()``'s; ``now`` counts
    block operations, so time-aware policies replay deterministically.
    """

    def __init__(self, policy: EvictionPolicy, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity={capacity}: the replay needs at least one block")
        self.policy = policy  # the policy under test; holds every cached block
        self.where: dict[int, int] = {}  # hash id -> block
        self.owner: list[int] = [0] * capacity  # block -> hash id (valid while cached)
        self.free = list(range(capacity - 1, -1, -1))  # never-used blocks, 0 popped first
        self.now = 0  # block operations so far (the policy's logical time)

    def __contains__(self, h: int) -> bool:
        return h in self.where

    def touch(self, h: int, depth: int, n: int) -> None:
        policy, where = self.policy, self.where
        key = h.to_bytes(8, "little")
        b = where.get(h)
        if b is not None:
            policy.on_hit(key)
            policy.remove(b)
        else:
            if self.free:
                b = self.free.pop()
            else:
                b = policy.evict()
                del where[self.owner[b]]
            where[h] = b
            self.owner[b] = h
        policy.insert(b, key, depth, float(self.now))
        self.now += 1

    def check_invariants(self) -> None:
        where, owner, cap = self.where, self.owner, len(self.owner)
        if len(where) + len(self.free) != cap:
            raise AssertionError(f"{len(where)} cached + {len(self.free)} free != {cap}")
        if set(where.values()) & set(self.free):
            raise AssertionError("a block is both free and cached")
        for h, b in where.items():
            if owner[b] != h:
                raise AssertionError(f"block {b} caches {h} but owner says {owner[b]}")
        self.policy.check_invariants()


def simulate(requests: Iterable[Sequence[int]], policy: EvictionPolicy,
             capacity: int) -> tuple[int, int]:
    """Replay prefix-cache requests through ``policy`` alone; returns (hits, blocks)."""
    return replay(requests, PolicyCache(policy, capacity))
