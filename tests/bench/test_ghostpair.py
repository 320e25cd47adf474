"""bench.ghostpair (a research policy): ghostbig whose tuner chooses between the sketch's
filter and the ghost's. Each configuration's window rule, that the tuner's grid (now the
product's, kvpool/core/eviction/admit_tuner.py) holds both filters side by side, and that
ghostpair is the product's ``adaptive`` with an exact ghost (its structure under random
operations: tests/bench/test_ghostbig.py)."""

from __future__ import annotations

from bench.admitbig import AdmitBigPolicy
from bench.admitlru import GRID10
from bench.ghostbig import GhostBigPolicy
from bench.ghostpair import GhostPairPolicy
from bench.policies import CANDIDATES
from kvpool.core.eviction import POLICIES, AdaptivePolicy
from kvpool.core.eviction.admit_tuner import GHOST_FILTER, WIN, AdmitTuner, MiniAdmit
from kvpool.core.eviction.ghost import ExactGhost, GhostTable
from tests.bench.test_ghostbig import FILTER, first_evicted_comes_back


def test_each_filter_keeps_its_own_memory_of_seen_before():
    """Content back after its ghost was pushed out: the ghost filter sends it to the window
    (as ghostbig does), the sketch filter to main (as admitbig does)."""
    for cls, cfg, to_window in ((GhostPairPolicy, GHOST_FILTER, True),
                                (GhostPairPolicy, FILTER, False),
                                (GhostBigPolicy, GHOST_FILTER, True),
                                (AdmitBigPolicy, FILTER, False)):
        p = cls(20, cfg=cfg)
        assert (first_evicted_comes_back(p, 30) in p.queue(WIN)) is to_window, (cls, cfg)
    p = GhostPairPolicy(20, cfg=GHOST_FILTER)
    assert first_evicted_comes_back(p, 5) not in p.queue(WIN)  # a recent ghost: main


def test_the_grid_holds_both_filters_side_by_side():
    """ghostpair's tuner is the product's: admitbig's grid (GRID10) with the ghost filter
    right after the sketch filter; one MiniAdmit per configuration, only the ghost filter's
    keeping a ghost."""
    grid = GhostPairPolicy.TUNER.GRID
    assert GhostPairPolicy.TUNER is AdmitTuner
    assert grid[:8] == GRID10[:8] and grid[9:] == GRID10[8:]
    assert grid[7] == FILTER and grid[8] == GHOST_FILTER
    t = AdmitTuner(1024, lambda c: 1)
    assert [s.cfg for s in t.shadows] == list(grid) and all(isinstance(s, MiniAdmit)
                                                             for s in t.shadows)
    m = MiniAdmit(4, FILTER, lambda c: 1)
    for c in range(6):
        m.access(c, 0)
    assert not m.ghost  # the sketch filter's miniature keeps no ghost
    g = MiniAdmit(4, GHOST_FILTER, lambda c: 1)
    for c in range(6):
        g.access(c, 0)
    assert list(g.ghost) == [0, 1]
    t.check_invariants()


def test_its_ghost_is_exact_where_adaptive_keeps_a_table():
    """ghostpair measures what the product's compact GhostTable gives up: the same policy
    and tuner, with an exact ghost."""
    assert isinstance(GhostPairPolicy(16)._ghost, ExactGhost)
    assert isinstance(AdaptivePolicy(16)._ghost, GhostTable)
    assert GhostPairPolicy.TUNER is AdaptivePolicy.TUNER


def test_ghostpair_is_a_research_candidate_not_a_product_choice():
    assert CANDIDATES["ghostpair"] is GhostPairPolicy and "ghostpair" not in POLICIES
