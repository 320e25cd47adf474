"""NOTE(bursts) in admit_tuner.py: a candidate whose gain over the current choice comes in
bursts passes on the long window's evidence, where the fast window's variance test never
passes; a gain that has turned, one too small to leave LRU for, or one without the long
window's evidence does not."""

from __future__ import annotations

import pytest

from kvpool.core.eviction.adaptive import AdaptivePolicy
from kvpool.core.eviction.admit_tuner import AdmitTuner
from kvpool.errors import InvariantError

BONUS = 3  # the candidate that gains: bonus 1.0, no window (so NOTE(lead) does not apply)


def feed(tuner: AdmitTuner, periods: int, every: int, burst: int, base: int = 0) -> list[int]:
    """``periods`` periods of made-up miniature hits: every configuration gets 100 a period,
    BONUS ``100 + base``, and ``burst`` more one period in ``every``. The choice after each."""
    chosen = []
    for n in range(periods):
        extra = base + (burst if n % every == every - 1 else 0)
        for i, s in enumerate(tuner.shadows):
            s.hits = 100 + (extra if i == BONUS else 0)
        tuner.tick(tuner.period)
        chosen.append(tuner.current)
    return chosen


def tuners() -> tuple[AdmitTuner, AdmitTuner]:
    """The product's tuner and the same without NOTE(bursts) (``bursts=False``)."""
    return (AdmitTuner(4096, lambda c: 1),
            AdmitTuner(4096, lambda c: 1, bursts=False))


def test_a_gain_in_bursts_passes_on_the_long_window():
    """50 hits one period in 15 (3.3 a period, three times EFFECT's bar): the fast window's
    test never passes, so without NOTE(bursts) the tuner stays on LRU; with it the tuner
    moves once the long window is full."""
    with_bursts, without = tuners()
    chosen = feed(with_bursts, 700, 15, 50)
    assert set(feed(without, 700, 15, 50)) == {0} and without.burst_passes == 0
    moved = chosen.index(BONUS)
    assert with_bursts.BURST_STEPS - 1 <= moved < 520 and set(chosen[moved:]) == {BONUS}
    assert set(chosen[:moved]) == {0} and with_bursts.burst_passes >= 1
    with_bursts.check_invariants()


def test_a_burst_gain_below_the_effect_bar_does_not_leave_lru():
    """NOTE(effect) holds on the long window too: 3 hits one period in 15 (0.2 a period,
    under EFFECT * period) never moves the tuner off LRU, however long it lasts."""
    tuner, _ = tuners()
    assert 3 / 15 < tuner.EFFECT * tuner.period
    assert set(feed(tuner, 900, 15, 3)) == {0} and tuner.burst_passes == 0


def test_a_gain_that_has_turned_does_not_pass():
    """500 periods of bursts (50 hits one period in 15), then a steady loss of 2 hits a
    period: 60 periods on, the long window still holds a large gain but the slow window's
    mean has turned, so the tuner does not move."""
    tuner, _ = tuners()
    tuner.BURST_STEPS = 10 ** 6  # no pass until the state under test is reached
    assert set(feed(tuner, 500, 15, 50) + feed(tuner, 60, 15, 0, base=-2)) == {0}
    tuner.BURST_STEPS = AdmitTuner.BURST_STEPS
    assert set(feed(tuner, 30, 15, 0, base=-2)) == {0} and tuner.burst_passes == 0


def test_no_long_window_turns_it_off():
    """LONG = 0 (the research steps before NOTE(long)) has no long window to pass on."""

    class NoLong(AdmitTuner):
        LONG = 0.0

    tuner = NoLong(4096, lambda c: 1)
    assert set(feed(tuner, 700, 15, 50)) == {0} and tuner.burst_passes == 0


class Made(AdmitTuner):
    """The product's tuner, each one kept as it is made."""

    made: list[AdmitTuner] = []

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        Made.made.append(self)


def test_the_policy_hands_its_flag_to_the_tuner():
    """AdaptivePolicy.BURSTS reaches the tuner: False (the research steps in bench/) keeps
    the tuner on LRU where the product's moves."""

    class Product(AdaptivePolicy):
        TUNER = Made

    class Before(Product):
        BURSTS = False

    for cls, moves in ((Product, True), (Before, False)):
        cls(4096)
        assert (BONUS in feed(Made.made[-1], 700, 15, 50)) is moves


def test_check_invariants_catches_squared_gains_out_of_sync():
    tuner, _ = tuners()
    feed(tuner, 30, 15, 50)
    tuner.check_invariants()
    tuner._long_sq[BONUS][0] += 1.0
    with pytest.raises(InvariantError):
        tuner.check_invariants()
