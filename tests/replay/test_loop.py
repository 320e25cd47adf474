"""The one instant-replay loop (kvpool.replay.loop) and the caches it drives.

``reference_lru`` (tests/trace_reference.py) is written independently of the loop, an
OrderedDict LRU; the product loop through LRUPolicy, through the real BlockPool
(InstantReplay) and through bench's LRU baseline must all give its (hits, blocks).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from bench.baselines import LRU, replay as baseline_replay
from kvpool.core.eviction import POLICIES, LRUPolicy, make_policy
from kvpool.replay.instant import InstantReplay
from kvpool.replay.loop import PolicyCache, replay, simulate
from tests.trace_reference import reference_lru

# requests over a small id space, so prefixes repeat and small capacities evict
requests = st.lists(st.lists(st.integers(0, 30), min_size=0, max_size=8), max_size=40)


class Recorder:
    """A cache that holds nothing and records the loop's calls."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int, int]] = []
        self.cached = {1}

    def __contains__(self, h: int) -> bool:
        return h in self.cached

    def touch(self, h: int, depth: int, n: int) -> None:
        self.calls.append((h, depth, n))


def test_loop_counts_the_leading_run_and_touches_tail_first():
    rec = Recorder()
    assert replay([[1, 2, 1], [3], []], rec) == (1, 4)
    assert rec.calls == [(1, 2, 3), (2, 1, 3), (1, 0, 3), (3, 0, 1)]


@settings(max_examples=150, deadline=None)
@given(reqs=requests, cap=st.integers(1, 12))
def test_every_product_path_equals_the_independent_lru(reqs, cap):
    want = reference_lru(reqs, cap)
    cache = PolicyCache(LRUPolicy(cap), cap)
    got = [0, 0]
    for r in reqs:  # one request at a time, checking the cache's invariant after each
        h, b = replay([r], cache)
        got[0] += h
        got[1] += b
        cache.check_invariants()
    assert tuple(got) == want
    inst = InstantReplay(cap, "lru")
    for r in reqs:
        inst.step(r)
    assert (inst.hits, inst.blocks) == want
    assert baseline_replay(reqs, LRU(cap)) == want


@settings(max_examples=60, deadline=None)
@given(reqs=requests, cap=st.integers(1, 12), name=st.sampled_from(sorted(POLICIES)))
def test_every_policy_keeps_the_cache_invariant(reqs, name, cap):
    cache = PolicyCache(make_policy(name, cap), cap)
    hits, blocks = replay(reqs, cache)
    cache.check_invariants()
    assert 0 <= hits <= blocks == sum(map(len, reqs))
    assert len(cache.where) == min(cap, len({h for r in reqs for h in r}))
    assert simulate(reqs, make_policy(name, cap), cap) == (hits, blocks)


def test_cache_invariant_check_catches_corruption():
    cache = PolicyCache(LRUPolicy(4), 4)
    replay([[1, 2, 3]], cache)
    cache.check_invariants()
    cache.owner[cache.where[2]] = 9
    try:
        cache.check_invariants()
    except AssertionError as e:
        assert "owner" in str(e)
    else:
        raise AssertionError("a corrupted owner table passed the check")
