"""bench/wingain.py: a research eviction policy (not in the product). bench.policies and
bench.policy_ceiling report it as ``wingain``.

WinGain: the product's ``adaptive`` (kvpool/core/eviction/adaptive.py) whose tuner leaves a
window configuration for the passing candidate with the largest fast-window gain, not the
nearest one by grid index.

Why: AdmitTuner's GRID puts the bonuses at indices 0-6 and the four window configurations
at 7-10. NOTE(step)'s nearest-first rule walks the bonus axis one neighbour at a time, which
means something there; from a window configuration, index distance to a bonus means
nothing. On legal_review@2@1000 the tuner sat on bonus 0.25, went to the ghost filter (8)
for 42 steps, then left it for bonus 0.5, the passing candidate nearest index 8, not the one
with the largest gain (docs/benchmarks.md "`legal_review`").

The rule: while the current choice has a window (share < 1.0), a move goes to the candidate
with the largest fast-window gain among those that pass every product test (NOTE(long),
NOTE(big), NOTE(lead)); a tie of gains goes to the nearer one. From a choice without a
window, the rule is NOTE(step)'s, unchanged.

Measured once over bench.policy_ceiling's 213 cells (docs/benchmarks.md "`wingain`: leaving
a window for the largest gain"). The rule acts at one step in each of 2 cells:
legal_review@2@1000 0.4638 against the product's 0.4626 (LRU 0.4640) and localization@2@4000
0.6061 against 0.6062 (LRU 0.6056). Both cells meet the target either way. Lost cells (41),
summed shortfall (0.1844) and the 8 cells below LRU are the product's. No new cell goes below
LRU, and the product keeps NOTE(step).
"""

from __future__ import annotations

from kvpool.core.eviction.adaptive import AdaptivePolicy
from kvpool.core.eviction.admit_tuner import AdmitTuner
from kvpool.core.eviction.tuner import BonusTuner


class GainPick(BonusTuner):
    """Invariant: BonusTuner's. The last step of the choice: the passing candidate with the
    largest gain when the current configuration has a window (GRID's share < 1.0), else
    NOTE(step)'s nearest one.

    WinGainTuner lists it after AdmitTuner, so in the MRO it sits between AdmitTuner and
    BonusTuner: AdmitTuner's ``_nearest`` filters the candidates as in the product and hands
    the survivors to this one through ``super()``."""

    def _nearest(self, passed: list[bool], gain: list[float], cur: int) -> int:
        if self.GRID[cur][1] >= 1.0:
            return super()._nearest(passed, gain, cur)
        ok = [i for i, p in enumerate(passed) if p]
        return max(ok, key=lambda i: (gain[i], -abs(i - cur))) if ok else cur


class WinGainTuner(AdmitTuner, GainPick):
    """Invariant: AdmitTuner's; a move away from a window configuration follows GainPick."""


class WinGainPolicy(AdaptivePolicy):
    """Invariant: AdaptivePolicy's, with a WinGainTuner."""

    name = "wingain"
    MOVE_SPLIT = False  # the ghost filter's share is fixed (before NOTE(arc))
    BURSTS = False  # no pass on the long window alone (before NOTE(bursts))
    SHALLOW = HOLD = False  # before NOTE(cold)'s depth test and hold
    TUNER = WinGainTuner
