"""What the held-out shapes' tests share to read a generated trace: how many leading blocks two
requests share, the tokens of a request's segments (``(segment id, tokens)`` pairs, cut into
blocks by bench.heldout_fewshot.Blocks), and a run's requests grouped by a key."""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Callable


def common(a: list[int], b: list[int]) -> int:
    """How many leading block ids ``a`` and ``b`` share."""
    return len(os.path.commonprefix([a, b]))


def tokens(segments: list[tuple]) -> int:
    """The tokens of a request's segments."""
    return sum(t for _, t in segments)


def shared_tokens(a: list[tuple], b: list[tuple]) -> int:
    """Tokens of the segments that ``a`` and ``b`` both start with."""
    out = 0
    for x, y in zip(a, b):
        if x != y:
            break
        out += x[1]
    return out


def by_kind(run, kind: str, key: Callable[[tuple], object]) -> dict[object, list[int]]:
    """key(meta) -> the indices of ``run``'s requests of ``kind`` (``meta[0]``), in order."""
    out: dict[object, list[int]] = defaultdict(list)
    for i, m in enumerate(run.meta):
        if m[0] == kind:
            out[key(m)].append(i)
    return out
