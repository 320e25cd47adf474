"""bench.mainev: mainwin whose windows' main moves to the leading bonus only on the tuner's
paired test (where it never moves it is the product: test_mainwin.py)."""

from bench.cells import cell_trace
from bench.mainev import MainEvPolicy
from bench.mainwin import MainWinPolicy
from bench.policies import CANDIDATES
from kvpool.replay.loop import simulate


def test_registered_as_a_research_candidate():
    assert CANDIDATES["mainev"] is MainEvPolicy and MainEvPolicy(1000).name == "mainev"


def test_the_main_moves_on_evidence_only_and_the_windows_follow():
    reqs, cap = cell_trace("zipf_prefix@1@1000")  # a bonus leads LRU here
    reqs = reqs[:1000]
    ev, win = MainEvPolicy(cap), MainWinPolicy(cap)
    simulate(reqs, ev, cap)
    simulate(reqs, win, cap)
    ev.check_invariants()
    assert 1 <= ev.tuner.main_moves < win.tuner.main_moves  # moves, and fewer (level leads)
    for s in ev.tuner.shadows:
        want = ev.tuner.main_bonus if s.cfg[1] < 1.0 else s.cfg[0]
        assert s.bonus == [k * want * s.capacity for k in range(len(s.bonus))]
