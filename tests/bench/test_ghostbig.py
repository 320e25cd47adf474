"""bench.ghostbig (a research policy): admitbig whose filter asks a ghost of recent evictions,
not the sketch, whether content was seen before. Its structure under random operations, the
ghost's rule in the live policy and in the miniature, and a trace where the difference shows."""

from __future__ import annotations

import itertools
import random
from zlib import crc32

import pytest
from hypothesis import given, settings

from bench.admitbig import AdmitBigPolicy
from bench.admitlru import AdmitTuner
from bench.ghostbig import GhostBigPolicy, GhostTuner
from bench.ghostpair import GhostPairPolicy
from bench.policies import CANDIDATES
from kvpool.core.eviction import POLICIES
from kvpool.core.eviction.admit_tuner import GHOST_FILTER, WIN, MiniAdmit
from kvpool.core.eviction.ghost import ExactGhost
from kvpool.replay.loop import simulate
from tests.bench.policy_ops import OPS, evict_members
from tests.core.policy_helpers import key

FILTER = (0.0, 0.1, False)  # the sketch filter (admitbig's); GHOST_FILTER is ghostbig's


@pytest.mark.parametrize("cls, cfg", [(GhostBigPolicy, None), (GhostBigPolicy, GHOST_FILTER),
                                      (GhostPairPolicy, None), (GhostPairPolicy, FILTER)])
@settings(max_examples=40, deadline=None)
@given(ops=OPS)
def test_it_evicts_members_and_keeps_invariants(cls, cfg, ops):
    """Tuned, and fixed on the ghost filter."""
    evict_members(cls(16, sketch_min_bits=8, cfg=cfg), ops,
                  check=lambda p, m: len(p) == len(m))


def first_evicted_comes_back(p, churn: int) -> int:
    """Pool of 20 under the filter: content 0 and 19 fresh ones; content 0 (the window's
    oldest) is evicted, ``churn`` evictions of fresh content follow, then content 0 comes
    back; the block it went into."""
    ids = itertools.count(1000)
    for b in range(20):
        p.insert(b, key(0 if b == 0 else next(ids)), 0, 0.0)
    assert p.evict() == 0
    p.insert(0, key(next(ids)), 0, 0.0)
    for _ in range(churn):
        b = p.evict()
        p.insert(b, key(next(ids)), 0, 0.0)
    b = p.evict()
    p.insert(b, key(0), 0, 0.0)
    p.check_invariants()
    return b


def test_content_evicted_recently_skips_the_window_and_old_content_does_not():
    """Back within a pool's worth of evictions: main. Back after its ghost was pushed out:
    the window, where the sketch filter (which still counts it) sends it to main."""
    p = GhostBigPolicy(20, cfg=GHOST_FILTER)
    assert first_evicted_comes_back(p, 5) not in p.queue(WIN)
    p = GhostBigPolicy(20, cfg=GHOST_FILTER)
    assert first_evicted_comes_back(p, 30) in p.queue(WIN)
    s = AdmitBigPolicy(20, cfg=FILTER)
    assert first_evicted_comes_back(s, 30) not in s.queue(WIN)


def test_the_miniature_uses_the_same_rule():
    m = MiniAdmit(4, GHOST_FILTER, lambda c: 1)
    for c in range(5):
        m.access(c, 0)  # the fifth evicts the oldest (crc 0) into the ghost
    assert 0 in m.ghost and 0 not in m.where
    m.access(0, 1)
    assert m.where[0] == 1 and 0 not in m.ghost  # to main, at its class
    m.check_invariants()
    t = GhostTuner(1024, lambda c: 1)
    assert [s.cfg for s in t.shadows] == list(GhostTuner.GRID)
    # admitbig's grid with the ghost filter in the sketch filter's place
    assert GhostTuner.GRID == tuple(GHOST_FILTER if g == FILTER else g for g in AdmitTuner.GRID)
    assert FILTER in AdmitTuner.GRID and FILTER not in GhostTuner.GRID


def test_the_live_ghost_is_exact_and_keyed_by_crc():
    """Every eviction, in any configuration, leaves the victim's crc32 in an exact ghost of
    at most the pool's capacity; a ghost hit under the ghost filter forgets it."""
    p = GhostBigPolicy(4, cfg=(0.0, 1.0, False))
    assert isinstance(p._ghost, ExactGhost)
    for b in range(4):
        p.insert(b, key(b), 0, 0.0)
    for i in range(6):
        b = p.evict()
        p.insert(b, key(10 + i), 0, 0.0)
    assert list(p._ghost.ghost) == [crc32(key(i)) for i in (2, 3, 10, 11)]  # LRU's victims
    p = GhostBigPolicy(4, cfg=GHOST_FILTER)
    for b in range(4):
        p.insert(b, key(b), 0, 0.0)
    b = p.evict()
    assert crc32(key(b)) in p._ghost and len(p._ghost) == 1
    p.insert(b, key(b), 0, 0.0)  # back while a ghost: main, and the ghost is forgotten
    assert b not in p.queue(WIN) and crc32(key(b)) not in p._ghost
    p.check_invariants()


def hot_and_returning(seed: int = 3, n: int = 6000) -> list[list[int]]:
    """A hot set of 30 three-block chains, one-off 6-block scans, and 300 'returning' chains
    each used twice about one pool turnover apart: the ghost admits the second use to main,
    the sketch filter admits nearly everything (it has counted most content before)."""
    rng = random.Random(seed)
    fresh = itertools.count(10**6)
    hot = [[i * 3, i * 3 + 1, i * 3 + 2] for i in range(30)]
    ret = [[10**5 + i * 4 + j for j in range(4)] for i in range(300)]
    out: list[list[int]] = []
    for t in range(n):
        u = rng.random()
        if u < 0.4:
            out.append(list(rng.choice(hot)))
        elif u < 0.8:
            out.append([next(fresh) for _ in range(6)])
        else:
            out.append(list(ret[(t // 7) % 300]))
    return out


def test_a_ghost_filter_beats_the_sketch_filter_where_old_counts_mislead():
    reqs = hot_and_returning()
    cap = 200
    ghost = simulate(reqs, GhostBigPolicy(cap, cfg=GHOST_FILTER), cap)[0]
    sketch = simulate(reqs, AdmitBigPolicy(cap, cfg=FILTER), cap)[0]
    assert ghost > sketch, (ghost, sketch)


def test_ghostbig_is_a_research_candidate_not_a_product_choice():
    assert CANDIDATES["ghostbig"] is GhostBigPolicy and "ghostbig" not in POLICIES
