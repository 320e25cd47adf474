"""Plain reference models the replay and eviction tests compare against."""

from __future__ import annotations

from collections import OrderedDict


def reference_lru(reqs: list[list[int]], cap: int) -> tuple[int, int]:
    """trace_hits.py's LRU, written plainly: hits = leading cached run; then tail first,
    touch (move to most recent) or insert, dropping the least recent beyond ``cap``."""
    cache: OrderedDict[int, None] = OrderedDict()
    hits = total = 0
    for ids in reqs:
        k = 0
        while k < len(ids) and ids[k] in cache:
            k += 1
        hits += k
        total += len(ids)
        for h in reversed(ids):
            if h in cache:
                cache.move_to_end(h)
            else:
                cache[h] = None
                if len(cache) > cap:
                    cache.popitem(last=False)
    return hits, total
