"""What the held-out shapes' tests share to read a generated trace: how many leading blocks two
requests share, the tokens of a request's segments (``(segment id, tokens)`` pairs, cut into
blocks by bench.heldout_fewshot.Blocks), a run's requests grouped by a key, and where each
block was first seen."""

from __future__ import annotations

import functools
import itertools
import os
from collections import Counter, defaultdict
from collections.abc import Callable

from bench.heldout import SHAPES
from bench.heldout_fewshot import BLOCK


def first_seen(trace: list[list[int]]) -> dict[int, int]:
    """Block id -> the index of the first request of ``trace`` that holds it."""
    first: dict[int, int] = {}
    for i, req in enumerate(trace):
        for b in req:
            first.setdefault(b, i)
    return first



class SmallRuns:
    """A held-out shape's ``generate`` at a small ``scale``: ``run(seed)`` and its
    ``first(seed)`` (first_seen of its trace), each made once per seed."""

    def __init__(self, generate: Callable, scale: float = 0.2) -> None:
        self.run = functools.cache(lambda seed: generate(seed, scale))
        self.first = functools.cache(lambda seed: first_seen(self.run(seed).trace))

    def cache_clear(self) -> None:
        """Forget every run (tests/conftest.py calls this when the module's tests end)."""
        self.run.cache_clear()
        self.first.cache_clear()


def chats_of(run, kind: str) -> list:
    """(index, chat) of ``run``'s chats (``run.state.chats``) of ``kind``."""
    return [(n, c) for n, c in enumerate(run.state.chats) if c.kind == kind]


def common(a: list[int], b: list[int]) -> int:
    """How many leading block ids ``a`` and ``b`` share."""
    return len(os.path.commonprefix([a, b]))


def extends(run, sent: list[int], same: Callable[[int, int], bool]) -> int:
    """Consecutive requests of ``sent`` (indices into ``run``) share exactly the blocks of the
    segments they start with; where ``same(i, j)`` the later extends the earlier exactly (a
    chat's next turn over an unchanged head). How many did."""
    out = 0
    for i, j in itertools.pairwise(sent):
        a, b = run.meta[i][3], run.meta[j][3]
        assert common(run.trace[i], run.trace[j]) == shared_tokens(a, b) // BLOCK
        if same(i, j):
            assert b[:len(a)] == a and run.trace[j][:len(run.trace[i])] == run.trace[i]
            out += 1
    return out


def tokens(segments: list[tuple]) -> int:
    """The tokens of a request's segments."""
    return sum(t for _, t in segments)


def check_full_blocks(run) -> None:
    """Each request is the full blocks of its segments, and the same segments are always the
    same block ids."""
    first: dict[tuple, list[int]] = {}
    for i, m in enumerate(run.meta):
        assert len(run.trace[i]) == tokens(m[3]) // BLOCK
        assert first.setdefault(tuple(m[3]), run.trace[i]) == run.trace[i]


def check_chains(run, stride: int) -> None:
    """A block id always follows the same parent (none for a first block), each request is the
    full blocks of its segments (check_full_blocks), and two requests ``stride`` apart share
    exactly the blocks of the segments they start with."""
    parent: dict[int, int | None] = {}
    for req in run.trace:
        for k, b in enumerate(req):
            assert parent.setdefault(b, req[k - 1] if k else None) == (req[k - 1] if k else None)
    check_full_blocks(run)
    for i, j in itertools.pairwise(range(0, len(run.trace), stride)):
        a, b = run.meta[i][3], run.meta[j][3]
        assert common(run.trace[i], run.trace[j]) == shared_tokens(a, b) // BLOCK


def shared_tokens(a: list[tuple], b: list[tuple]) -> int:
    """Tokens of the segments that ``a`` and ``b`` both start with."""
    out = 0
    for x, y in zip(a, b):
        if x != y:
            break
        out += x[1]
    return out


def check_ordered(run, kinds) -> None:
    """Every request non-empty and in time order, and every kind of ``kinds`` there."""
    assert run.times == sorted(run.times) and all(run.trace)
    assert {m[0] for m in run.meta} == set(kinds)


def blocks_by_kind(run) -> Counter:
    """Blocks requested per kind (``run.meta[i][0]``)."""
    out: Counter = Counter()
    for q, m in zip(run.trace, run.meta):
        out[m[0]] += len(q)
    return out


def of_kind(run, kind: str) -> list[int]:
    """The indices of ``run``'s requests of ``kind`` (``meta[0]``), in order."""
    return [i for i, m in enumerate(run.meta) if m[0] == kind]


def by_kind(run, kind: str, key: Callable[[tuple], object]) -> dict[object, list[int]]:
    """key(meta) -> the indices of ``run``'s requests of ``kind`` (``meta[0]``), in order."""
    out: dict[object, list[int]] = defaultdict(list)
    for i, m in enumerate(run.meta):
        if m[0] == kind:
            out[key(m)].append(i)
    return out


def registered_small_runs(name: str, gen: Callable, generate: Callable) -> list:
    """Check that shape ``name`` is registered as ``gen``, deterministic per seed, different
    across seeds and ``generate(...).trace``; the 450-request runs of seeds 1..4 (scale 0.05),
    every request non-empty, for the caller to check that each still has every part."""
    assert SHAPES[name] is gen
    assert gen(1, 0.05) == gen(1, 0.05) != gen(2, 0.05)
    assert generate(3, 0.05).trace == gen(3, 0.05)
    runs = [generate(seed, 0.05) for seed in (1, 2, 3, 4)]
    assert all(len(r.trace) == 450 and all(r.trace) for r in runs)
    return runs
