"""bench/mainev.py: `mainev`, `mainwin` with the main's bonus moved on evidence (a research
candidate, not the product; docs/benchmarks.md "`mainev`").

`mainwin` (bench/mainwin.py) hands every window miniature, and the pool on a window
configuration, the bonus of the no-window miniature leading NOTE(long)'s window: the leader
of an EWMA, noise included, so the windows' main changed bonus whenever two plain miniatures
were level. Here the windows' main moves from its bonus to the leader's only when the
leader's gain over the plain miniature of the current bonus passes the tuner's own paired
test (``Z`` standard errors, NOTE(floor)) in the slow window (~50 periods), as a move of the
pool itself must. Where that test never passes, the windows stay over an LRU main: the
product.
"""

from __future__ import annotations

from bench.mainwin import MainWinPolicy, MainWinTuner


class MainEvTuner(MainWinTuner):
    """Invariant: MainWinTuner's; ``main_bonus`` moves only to a plain miniature whose gain
    over the current main's passes the paired test in the slow window."""

    def _main_lead(self) -> int:
        lead = super()._main_lead()
        cur = self.GRID.index((self.main_bonus, 1.0, False))
        return lead if lead == cur or self._ahead(lead, cur) else cur

    def _ahead(self, i: int, j: int) -> bool:
        """Plain miniature ``i``'s mean gain over ``j`` is above ``Z`` standard errors in the
        slow window (BonusTuner's test, bias-corrected EWMAs)."""
        a = self.ALPHAS[1]
        n_eff = min(self.steps, (2 - a) / a)
        if n_eff < self.MIN_PERIODS:
            return False
        unbias = 1.0 / (1.0 - (1.0 - a) ** self.steps)
        m = self._mean[1][i][j] * unbias
        var = (self._sq[1][i][j] * unbias - m * m) * n_eff / (n_eff - 1)
        return m > 0 and m * m * n_eff > self.Z * self.Z * max(var, m)


class MainEvPolicy(MainWinPolicy):
    """Invariant: AdaptivePolicy's. The product with MainEvTuner."""

    name = "mainev"
    TUNER = MainEvTuner
