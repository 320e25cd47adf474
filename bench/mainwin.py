"""bench/mainwin.py: `mainwin`, the tuner's windows over the main the plain miniatures lead
with (a research candidate, not the product; docs/benchmarks.md "`rule_lab`").

Every window configuration of the product's grid (kvpool/core/eviction/admit_tuner.py) runs
over an LRU main (bonus 0). W-TinyLFU's main is SLRU, which favours content used more than
once, and held fixed over a main with bonus 1 or 4 the grid's windows meet the target in 7
of the 12 cells bench.rule_lab's hindsight says the grid loses. Eleven more miniatures (one
per window and bonus) would cost what eleven miniatures cost; here the grid is factored
instead: after each step the window miniatures take the bonus of the no-window miniature
that leads in the long window (NOTE(long)'s EWMA), and the pool, on a window configuration,
takes it too. Where LRU leads the plain ones, it is the product.
"""

from __future__ import annotations

from kvpool.core.eviction import AdaptivePolicy
from kvpool.core.eviction.admit_tuner import CLASSES, AdmitTuner, Cfg, MiniAdmit


class MainMini(MiniAdmit):
    """Invariant: MiniAdmit's. A miniature whose main's bonus can change."""

    __slots__ = ()

    def set_bonus(self, b: float) -> None:
        """Main's bonus from now on (``b`` pool turnovers per class)."""
        self.bonus = [k * b * self.capacity for k in range(CLASSES)]
        self._keyed = list(zip(self.qs[:CLASSES], self.bonus, strict=True))


class MainWinTuner(AdmitTuner):
    """Invariant: AdmitTuner's; every window miniature runs over ``main_bonus``, the bonus
    of the no-window miniature leading in the long window (ties: nearer LRU)."""

    def __init__(self, *args, **kw) -> None:
        self.main_bonus = 0.0
        self.main_moves = 0  # how often main_bonus changed (a diagnostic)
        super().__init__(*args, **kw)

    def _miniatures(self, size: int, classes: int) -> list:
        return [MainMini(size, g, self._freq, self._duel_freq, self._moving) for g in self.GRID]

    def _step(self) -> bool:
        before = self.bonus
        changed = super()._step()
        lead = self._main_lead()
        if self.GRID[lead][0] != self.main_bonus:
            self.main_bonus = self.GRID[lead][0]
            self.main_moves += 1
            for g, s in zip(self.GRID, self.shadows, strict=True):
                if g[1] < 1.0:
                    s.set_bonus(self.main_bonus)
        return changed or self.bonus != before

    def _main_lead(self) -> int:
        """The no-window miniature whose bonus the windows take (ties: nearer LRU)."""
        return max(self._plain, key=lambda i: (self._long[i], -i))

    @property
    def bonus(self) -> Cfg:
        """The configuration chosen: a window one over ``main_bonus``."""
        g = self.GRID[self.current]
        return (self.main_bonus, g[1], g[2]) if g[1] < 1.0 and self.main_bonus else g


class MainWinPolicy(AdaptivePolicy):
    """Invariant: AdaptivePolicy's. The product with MainWinTuner."""

    name = "mainwin"
    TUNER = MainWinTuner

    @property
    def tuner(self) -> MainWinTuner:
        """The tuner, for its ``main_bonus`` and ``main_moves``."""
        return self._tuner
