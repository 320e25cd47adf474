"""bench.ghostwin: the research policy stays a cache of its size under any request stream,
keeps part of a loop LRU loses entirely, and moves its window only on ghosts a prefix hit
could have used."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from bench.baselines import LRU, replay
from bench.ghostwin import GhostWindowTinyLFU


@settings(max_examples=60, deadline=None)
@given(cap=st.integers(1, 16),
       reqs=st.lists(st.lists(st.integers(0, 40), min_size=1, max_size=8, unique=True),
                     max_size=60))
def test_stays_a_cache_of_its_size(cap, reqs):
    c = GhostWindowTinyLFU(cap)
    for r in reqs:
        hits, blocks = replay([r], c)
        assert 0 <= hits <= blocks == len(r)
        assert r[0] in c  # the head is touched last: always cached afterwards
        c.check_invariants()


def test_keeps_popular_prefixes_through_one_off_scans():
    hot = [list(range(10 * d, 10 * d + 10)) for d in range(10)]  # 100 ids
    scans = [list(range(10**6 + 40 * i, 10**6 + 40 * i + 40)) for i in range(300)]
    reqs = [r for i in range(300) for r in (hot[i % 10], scans[i])]
    lru = replay(reqs, LRU(120))[0]
    assert replay(reqs, GhostWindowTinyLFU(120))[0] > lru + 1000


def window_ghosts(c: GhostWindowTinyLFU, ids: list[int]) -> None:
    """Make ``ids`` window ghosts of ``c`` (duel losers) and reset the target to 1."""
    for h in ids:
        c.gm.pop(h, None)
        c.gw[h] = None
    c.target = 1.0


def test_a_ghost_behind_a_missing_id_does_not_move_the_window():
    c = GhostWindowTinyLFU(100)
    replay([[1000 + i] for i in range(100)], c)  # fill it
    window_ghosts(c, [1, 2])
    replay([[999, 1, 2]], c)  # 999 is new: 1 and 2 could not have hit
    assert c.target == 1.0
    window_ghosts(c, [3, 4])
    replay([[3, 4]], c)  # a leading run of window ghosts: a bigger window would have hit
    assert c.target > 1.0
