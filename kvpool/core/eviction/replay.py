"""simulate: a prefix-cache replay through one policy alone, without an allocator (fast)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from kvpool.core.eviction.base import EvictionPolicy


def simulate(requests: Iterable[Sequence[int]], policy: EvictionPolicy,
             capacity: int) -> tuple[int, int]:
    """Replay prefix-cache requests through ``policy`` alone; returns (hits, blocks).

    The semantics of ``kvpool replay --instant`` (and ``../shared/anchors/trace_hits.py``): a
    request hits the leading run of its hash ids that are cached; then, tail first, each id is
    touched (cached: on_hit, remove, insert) or brought in (a free block id while any of the
    ``capacity`` ids remain, else ``policy.evict()``). ``now`` counts block operations.
    """
    where: dict[int, int] = {}  # hash id -> block
    if capacity < 1:
        raise ValueError(f"capacity={capacity}: the replay needs at least one block")
    owner: list[int] = [0] * capacity  # block -> hash id
    free = list(range(capacity - 1, -1, -1))
    on_hit, remove, insert, evict = policy.on_hit, policy.remove, policy.insert, policy.evict
    hits = blocks = t = 0
    for ids in requests:
        n = len(ids)
        k = 0
        while k < n and ids[k] in where:
            k += 1
        hits += k
        blocks += n
        for d in range(n - 1, -1, -1):
            h = ids[d]
            key = h.to_bytes(8, "little")
            b = where.get(h)
            if b is not None:
                on_hit(key)
                remove(b)
            else:
                if free:
                    b = free.pop()
                else:
                    b = evict()
                    del where[owner[b]]
                where[h] = b
                owner[b] = h
            insert(b, key, d, float(t))
            t += 1
    return hits, blocks
