"""bench.baselines: each classic policy on a small hand-worked trace, the replay semantics
against ``simulate``, and a property test that every baseline stays a cache of its size."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.baselines import (ARC, BASELINES, LRU, S3FIFO, S3FIFO1, SIEVE, SLRU, WTinyLFU,
                             replay)
from kvpool.core.eviction import LRUPolicy
from kvpool.replay.loop import simulate
from tests.trace_reference import reference_lru


def singles(cache, ids):
    """Hits of one-id requests ``ids`` through ``cache``."""
    return replay([[h] for h in ids], cache)[0]


def test_replay_hits_the_leading_run_then_accesses_tail_first():
    c = LRU(2)
    assert replay([[1, 2, 3]], c) == (0, 3)
    assert set(c.q) == {1, 2}  # 3, 2, 1 accessed in that order: 3 left first
    assert replay([[1, 2, 3]], c) == (2, 3)


def test_replay_agrees_with_simulate_and_the_reference():
    rng = random.Random(9)
    docs = [[rng.randrange(10**6) for _ in range(rng.randint(1, 12))] for _ in range(60)]
    reqs = [d[:rng.randint(1, len(d))] for d in (rng.choice(docs) for _ in range(600))]
    for cap in (4, 30, 200):
        want = reference_lru(reqs, cap)
        assert replay(reqs, LRU(cap)) == want == simulate(reqs, LRUPolicy(cap), cap)


def test_sieve_keeps_a_visited_entry_through_a_scan():
    # cap 3: 1 is hit once (visited); 4 makes the hand clear 1 and evict 2, 5 evicts 3
    s = SIEVE(3)
    assert singles(s, [1, 1, 2, 3, 4, 5]) == 1
    assert set(s.visited) == {1, 4, 5}
    assert singles(s, [1]) == 1
    assert singles(LRU(3), [1, 1, 2, 3, 4, 5, 1]) == 1  # LRU lost 1 to the scan


def test_s3fifo_promotes_twice_used_ids_and_readmits_ghosts_to_main():
    s = S3FIFO(10)  # small FIFO: 1 entry at eviction time, ghost: 9
    assert singles(s, [*range(1, 11), 1, 1]) == 2
    assert singles(s, [11]) == 0  # evicts: 1 (count 2) moves to M, 2 goes to the ghost
    assert list(s.m) == [1] and 2 in s.g and 2 not in s
    assert singles(s, [2]) == 0  # 3 leaves S for the ghost; 2 comes back straight into M
    assert list(s.m) == [1, 2] and 3 not in s and 3 in s.g
    assert singles(s, [*range(12, 21), 1]) == 1  # the scan only cycles S
    assert 2 in s and len(s) == 10


def test_s3fifo1_promotes_on_the_first_reuse_where_s3fifo_needs_two():
    for cls, promoted in ((S3FIFO1, True), (S3FIFO, False)):
        s = cls(10)  # small FIFO: 1 entry at eviction time
        assert singles(s, [*range(1, 11), 1]) == 1  # 1 used once more while in S
        singles(s, [11])  # the first eviction: 1 leaves S
        assert (list(s.m) == [1]) is promoted and (1 in s) is promoted
        assert (1 in s.g) is not promoted


def test_arc_adapts_its_target_on_ghost_hits():
    a = ARC(2)
    assert singles(a, [1, 2, 1, 3]) == 1
    assert list(a.t1) == [3] and list(a.t2) == [1] and list(a.b1) == [2] and a.p == 0
    singles(a, [2])  # a B1 hit: p grows, 2 goes to T2, T2's LRU (1) to B2
    assert a.p == 1 and list(a.t2) == [2] and list(a.b2) == [1] and list(a.t1) == [3]
    singles(a, [1])  # a B2 hit: p shrinks, T1 (above p) gives up 3
    assert a.p == 0 and list(a.t2) == [2, 1] and list(a.b1) == [3] and not a.t1


def test_slru_protects_ids_hit_in_probation():
    s = SLRU(5)  # protected: 4
    assert singles(s, [1, 2, 3, 1, 2, 4, 5, 6, 7, 1]) == 3
    assert list(s.prot) == [2, 1] and list(s.prob) == [5, 6, 7]
    assert singles(LRU(5), [1, 2, 3, 1, 2, 4, 5, 6, 7, 1]) == 2
    t = SLRU(5)
    singles(t, [1, 2, 3, 4, 5, 1, 2, 3, 4, 5])  # the 5th promotion overflows protected
    assert list(t.prot) == [2, 3, 4, 5] and list(t.prob) == [1]


def test_wtinylfu_admits_the_window_candidate_only_when_used_more():
    w = WTinyLFU(100)  # window 1, main 99
    assert singles(w, [*range(100), 0, 200]) == 1
    assert 99 not in w and 1 in w and 200 in w  # 99 (1 use) lost to victim 1 (1 use)
    assert singles(w, [200, 201]) == 1
    assert 1 not in w and 200 in w and 201 in w  # 200 (2 uses) beat victim 1


@pytest.mark.parametrize("name", sorted(BASELINES))
def test_a_baseline_rejects_an_empty_cache(name):
    with pytest.raises(ValueError):
        BASELINES[name](0)


@pytest.mark.parametrize("name", sorted(BASELINES))
@settings(max_examples=40, deadline=None)
@given(cap=st.integers(1, 12), ids=st.lists(st.integers(0, 25), max_size=200))
def test_every_baseline_is_a_cache_of_its_size(name, cap, ids):
    c = BASELINES[name](cap)
    seen: list[int] = []
    for h in ids:
        was = h in c
        assert was == (was and h in seen)  # only ids accessed before can be cached
        c.access(h)
        seen.append(h)
        assert h in c and len(c) <= cap
        assert len(c) == min(cap, len(set(seen))) or name in ("wtinylfu", "s3fifo", "s3fifo1")
