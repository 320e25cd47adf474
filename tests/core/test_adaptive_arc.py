"""NOTE(arc) (kvpool/core/eviction/admit_tuner.py): ``adaptive``'s ghost filter moves its
window's share as ARC moves its target, a ghost of the window growing it and a ghost of main
shrinking it; the ghosts keep their side (NOTE(side) in ghost.py)."""

from __future__ import annotations

import random

from hypothesis import given, settings
from hypothesis import strategies as st

from kvpool.core.eviction.adaptive import AdaptivePolicy
from kvpool.core.eviction.admit_tuner import GHOST_FILTER, AdmitTuner, MiniAdmit, moved
from kvpool.core.eviction.ghost import ExactGhost, GhostTable
from tests.core.policy_helpers import key

GHOST = GHOST_FILTER  # (0.0, 0.1, None): a 10 % window to start with


class FixedSplit(AdaptivePolicy):
    MOVE_SPLIT = False  # before NOTE(arc)


def test_the_target_moves_by_the_ghost_ratio_within_the_pool():
    assert moved(5.0, 10, 1, n_win=2, n_main=6) == 8.0  # + |B2| / |B1|
    assert moved(5.0, 10, 1, n_win=6, n_main=2) == 6.0  # at least one block
    assert moved(8.5, 10, 1, n_win=1, n_main=9) == 9.0  # at most the pool less one
    assert moved(5.0, 10, 0, n_win=6, n_main=2) == 2.0  # - |B1| / |B2|
    assert moved(1.5, 10, 0, n_win=1, n_main=1) == 1.0  # at least one block


def test_a_ghost_of_the_window_grows_the_share_and_a_ghost_of_main_shrinks_it():
    p = AdaptivePolicy(10, cfg=GHOST)
    assert p.share == 0.1
    for b in range(4):  # new content: all of it waits in the window
        p.insert(b, key(b), 0, 0.0)
    assert p.evict() == 0  # the window is over its share: its oldest, a ghost of the window
    p.insert(0, key(0), 0, 0.0)  # it comes back: to main, and the window grows
    grown = p.share
    assert grown == 0.2
    assert [p.evict() for _ in range(3)] == [1, 2, 3]  # the window first, while over its share
    assert p.evict() == 0  # then main's block: a ghost of main
    p.insert(0, key(0), 0, 0.0)
    assert p.share < grown
    p.check_invariants()


def test_before_the_note_the_share_stays():
    p = FixedSplit(10, cfg=GHOST)
    for b in range(4):
        p.insert(b, key(b), 0, 0.0)
    p.insert(p.evict(), key(0), 0, 0.0)
    assert p.share == 0.1
    p.check_invariants()


def test_the_miniature_moves_its_own_share_and_the_tuner_reports_it():
    m = MiniAdmit(8, GHOST, freq=lambda c: 0, moving=True)
    for c in range(9):  # the ninth evicts the window's oldest (crc 0): a ghost of the window
        m.access(c, 0)
    assert 0 in m.ghost and m.ghost.windowed == 1
    m.access(0, 0)
    assert m.share > 0.1 and m.share == m.p / m.capacity
    m.check_invariants()
    fixed = MiniAdmit(8, GHOST, freq=lambda c: 0)
    for c in [*range(9), 0]:
        fixed.access(c, 0)
    assert fixed.share == 0.1
    tuner = AdmitTuner(4000, lambda c: 0)
    assert tuner.ghost_share() == 0.1 and sum(s.moves for s in tuner.shadows) == 1


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 60), st.booleans()), max_size=400),
       st.integers(1, 64))
def test_the_table_reports_the_newest_side_and_counts_both(ops, max_slots):
    """Adds (with a side) and takes: a ghost found reports the side of its newest eviction
    (content evicted twice is a ghost twice), and the counts of ghosts and of window ghosts
    match the slots (check_invariants). CRCs far apart: no two share a fingerprint."""
    g = GhostTable(48, max_slots=max_slots, batch=7)
    last: dict[int, int] = {}
    for add, n, window in ops:
        c = n * 0x2F0B_3A4D & 0xFFFFFFFF
        if add:
            g.add(c, window)
            last[c] = window
        else:
            side = g.take_side(c)
            assert side == -1 or side == last.pop(c)
            last.pop(c, None)
        g.check_invariants()
    assert 0 <= g.windowed <= g.held == len(g)


def test_a_young_ghost_reports_its_side_in_the_table_and_the_exact_ghost():
    rng = random.Random(3)
    cs = [rng.getrandbits(32) for _ in range(300)]
    for g in (GhostTable(1000), ExactGhost(1000)):
        for i, c in enumerate(cs):
            g.add(c, i % 3 == 0)
        assert len(g) == 300 and g.windowed == 100  # len writes pending adds first
        assert [g.take_side(c) for c in cs[:6]] == [1, 0, 0, 1, 0, 0]
        assert g.take_side(cs[0]) == -1 and g.windowed == 98 and g.held == 294
        g.check_invariants()
