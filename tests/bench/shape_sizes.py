"""The size check the held-out shapes' tests share: a trace at scale 1.0 has its documented
request count, blocks requested and distinct blocks, and a scaled-down one is smaller."""

from __future__ import annotations

from collections.abc import Callable

Trace = list[list[int]]


def check_size(gen: Callable[..., Trace], blocks: tuple[int, int], distinct: tuple[int, int],
               share: tuple[float, float], small_share: float) -> None:
    """``gen(1)`` has 9000 requests, blocks requested within ``blocks``, distinct blocks
    within ``distinct`` and within ``share`` of those requested; ``gen(1, 0.25)`` has 2250
    requests and fewer than ``small_share`` of the full trace's blocks."""
    full = gen(1)
    assert len(full) == 9000
    n = sum(map(len, full))
    d = len({h for r in full for h in r})
    assert blocks[0] < n < blocks[1] and distinct[0] < d < distinct[1], (n, d)
    assert share[0] * n < d < share[1] * n, (n, d)
    small = gen(1, 0.25)
    assert len(small) == 2250 and sum(map(len, small)) < small_share * n
