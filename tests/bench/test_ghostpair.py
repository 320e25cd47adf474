"""bench.ghostpair (a research policy): ghostbig whose tuner chooses between the sketch's
filter and the ghost's. Each configuration's window rule, and that the tuner's grid holds both
filters side by side (its structure under random operations: tests/bench/test_ghostbig.py)."""

from __future__ import annotations

from bench.admitbig import AdmitBigPolicy
from bench.admitlru import WIN, AdmitTuner
from bench.ghostbig import GhostBigPolicy
from bench.ghostpair import GHOST_FILTER, GhostPairPolicy, MiniPair, PairTuner
from bench.policies import CANDIDATES
from kvpool.core.eviction import POLICIES
from tests.bench.test_ghostbig import FILTER, first_evicted_comes_back


def test_each_filter_keeps_its_own_memory_of_seen_before():
    """Content back after its ghost was pushed out: the ghost filter sends it to the window
    (as ghostbig does), the sketch filter to main (as admitbig does)."""
    for cls, cfg, to_window in ((GhostPairPolicy, GHOST_FILTER, True),
                                (GhostPairPolicy, FILTER, False),
                                (GhostBigPolicy, FILTER, True), (AdmitBigPolicy, FILTER, False)):
        p = cls(20, cfg=cfg)
        assert (first_evicted_comes_back(p, 30) in p.queue(WIN)) is to_window, (cls, cfg)
    p = GhostPairPolicy(20, cfg=GHOST_FILTER)
    assert first_evicted_comes_back(p, 5) not in p.queue(WIN)  # a recent ghost: main


def test_the_grid_holds_both_filters_side_by_side():
    grid = PairTuner.GRID
    assert grid[:8] == AdmitTuner.GRID[:8] and grid[9:] == AdmitTuner.GRID[8:]
    assert grid[7] == FILTER and grid[8] == GHOST_FILTER
    t = PairTuner(1024, lambda c: 1)
    assert [s.cfg for s in t.shadows] == list(grid) and all(isinstance(s, MiniPair)
                                                             for s in t.shadows)
    m = MiniPair(4, FILTER, lambda c: 1)
    for c in range(6):
        m.access(c, 0)
    assert not m.ghost  # the sketch filter's miniature keeps no ghost
    g = MiniPair(4, GHOST_FILTER, lambda c: 1)
    for c in range(6):
        g.access(c, 0)
    assert list(g.ghost) == [0, 1]
    t.check_invariants()


def test_ghostpair_is_a_research_candidate_not_a_product_choice():
    assert CANDIDATES["ghostpair"] is GhostPairPolicy and "ghostpair" not in POLICIES
