"""bench.wingain (a research policy): the product's ``adaptive`` whose tuner leaves a window
configuration for the passing candidate with the largest fast-window gain, not the nearest
by grid index (docs/benchmarks.md "`wingain`")."""

from __future__ import annotations

from bench.policies import CANDIDATES
from bench.wingain import GainPick, WinGainPolicy, WinGainTuner
from kvpool.core.eviction import POLICIES
from kvpool.core.eviction.admit_tuner import GHOST_FILTER, AdmitTuner
from kvpool.replay.loop import simulate


class Exposed(WinGainTuner):
    def pick(self, passed: list[bool], gain: list[float], cur: int) -> int:
        return self._nearest(passed, gain, cur)


class Product(AdmitTuner):
    def pick(self, passed: list[bool], gain: list[float], cur: int) -> int:
        return self._nearest(passed, gain, cur)


def _choices(cur: int, passing: dict[int, float]) -> tuple[int, int]:
    """(product's pick, wingain's pick) of a fresh tuner at ``cur`` with bonuses passing."""
    n = len(AdmitTuner.GRID)
    passed = [i in passing for i in range(n)]
    gain = [passing.get(i, 0.0) for i in range(n)]
    return (Product(1024, lambda c: 1).pick(passed, gain, cur),
            Exposed(1024, lambda c: 1).pick(passed, gain, cur))


def test_from_a_window_the_largest_gain_wins_not_the_nearest():
    cur = AdmitTuner.GRID.index(GHOST_FILTER)
    assert _choices(cur, {1: 0.5, 6: 0.1}) == (6, 1)
    assert _choices(cur, {2: 0.3, 5: 0.3}) == (5, 5)  # a tie of gains: the nearer
    assert _choices(cur, {}) == (cur, cur)


def test_from_a_bonus_the_rule_is_the_products():
    assert _choices(2, {1: 0.1, 6: 0.5}) == (1, 1)
    assert _choices(0, {3: 0.1, 1: 0.05}) == (1, 1)


def test_the_filters_stay_the_products():
    """AdmitTuner's filters run first: GainPick sits after it in the MRO."""
    mro = WinGainTuner.__mro__
    assert mro.index(AdmitTuner) < mro.index(GainPick)
    assert WinGainPolicy.TUNER is WinGainTuner and WinGainTuner.GRID == AdmitTuner.GRID


def test_wingain_replays_and_is_a_research_candidate():
    reqs = [[i % 97, i % 89 + 100] for i in range(3000)]
    p = WinGainPolicy(64)
    hits, blocks = simulate(reqs, p, 64)
    p.check_invariants()
    assert 0 < hits < blocks == 6000
    assert CANDIDATES["wingain"] is WinGainPolicy and "wingain" not in POLICIES
