"""bench/rule_picks.py: choice rules for bench.rule_lab beside the product's (research, not
policies; docs/benchmarks.md "`rule_lab`").

The product's rule (kvpool/core/eviction/admit_tuner.py) moves to a candidate whose gain
over the current choice passes its tests, and of several the one nearest on the grid's
index. The variants here change only that choice:

- ``dest``: of the candidates that pass, the one whose summed gain over the current choice
  since the first step is largest (the most evidence), not the nearest;
- ``hyst``: a move between two configurations neither of which is LRU also needs the
  candidate ahead of the current choice in that sum (no round trips on a phase);
- ``dest_hyst``: both;
- ``cum``: the product's tests replaced by one on the sums since the first step (a paired
  test at the product's Z, EFFECT for a move up the index), to the passer with the largest
  sum;
- ``anytime``: NOTE(bursts)'s gate (a full long window) replaced by a boundary valid at every
  step at once (Howard et al. 2021's stitched boundary, 0.5 % per rival) on the sums since
  the first step.
"""

from __future__ import annotations

from math import log, sqrt

from kvpool.core.eviction.admit_tuner import AdmitTuner
from kvpool.core.eviction.tuner import BonusTuner


class Summed(AdmitTuner):
    """Invariant: AdmitTuner's; ``_sum[i][j]`` and ``_sumsq[i][j]`` are the sums over every step
    of hits[i] - hits[j] and its square, ``_n`` the steps summed. AdmitTuner with those
    sums, for the rules below."""

    def __init__(self, *args, **kw) -> None:
        n = len(self.GRID)
        self._sum = [[0.0] * n for _ in range(n)]
        self._sumsq = [[0.0] * n for _ in range(n)]
        self._n = 0
        super().__init__(*args, **kw)

    def _step(self) -> bool:
        hits = [s.hits for s in self.shadows]
        for hi, si, qi in zip(hits, self._sum, self._sumsq, strict=True):
            for j, hj in enumerate(hits):
                si[j] += hi - hj
                qi[j] += (hi - hj) ** 2
        self._n += 1
        return super()._step()

    def _summed(self, i: int, cur: int) -> tuple[float, float]:
        """Mean gain of ``i`` over ``cur`` per step, and its variance per step (at least the
        mean: a difference of counts varies at least like a count)."""
        k = max(self._n, 2)
        m = self._sum[i][cur] / k
        return m, max((self._sumsq[i][cur] / k - m * m) * k / (k - 1), m)

    def _most(self, ok: list[bool], cur: int) -> int:
        """Of the candidates ``ok``, the one with the largest summed gain over ``cur``."""
        if not any(ok):
            return cur
        return max((i for i, p in enumerate(ok) if p), key=lambda i: self._sum[i][cur])


class Chooser(BonusTuner):
    """Invariant: BonusTuner's. Sits after AdmitTuner in a rule's MRO, so AdmitTuner's
    filters (NOTE(bursts), NOTE(long), NOTE(big), NOTE(lead)) run first and ``_choose``
    picks among what they pass."""

    def _nearest(self, passed: list[bool], gain: list[float], cur: int) -> int:
        return self._choose(passed, gain, cur)

    def _choose(self, ok: list[bool], gain: list[float], cur: int) -> int:
        return super()._nearest(ok, gain, cur)  # the product's: the nearest


class Pick(Summed, Chooser):
    """Invariant: Summed's. The product's tests; the choice among the passers by DEST and
    HYST."""

    DEST = True  # the passer with the largest sum, not the nearest
    HYST = False  # between two configurations other than LRU, the sum must lead too

    def _choose(self, ok: list[bool], gain: list[float], cur: int) -> int:
        if self.HYST and cur:
            ok = [p and (i == 0 or self._sum[i][cur] > 0) for i, p in enumerate(ok)]
        if self.DEST:
            return self._most(ok, cur)
        return super()._choose(ok, gain, cur)


class Cum(Summed):
    """Invariant: Summed's. Moves on the sums alone: a paired test at Z on the mean gain
    since the first step, EFFECT for a move up the index, to the passer with the largest
    sum."""

    def _nearest(self, passed: list[bool], gain: list[float], cur: int) -> int:
        return self._most([self._passes(i, cur) for i in range(len(passed))], cur)

    def _passes(self, i: int, cur: int) -> bool:
        if i == cur or self._n < self.MIN_PERIODS:
            return False
        m, var = self._summed(i, cur)
        return (m > 0 and m * m * self._n > self.Z * self.Z * var
                and (i < cur or m > self.EFFECT * self.period))


class Anytime(Summed):
    """Invariant: Summed's. NOTE(bursts) on the sums since the first step, passed when the
    summed gain clears a boundary valid at every step at once, with no gate."""

    ALPHA = 0.005  # per rival: 5 % for all ten together, over the whole trace

    def _in_bursts(self, i: int, cur: int) -> bool:
        k = self._n
        if i == cur or k < self.MIN_PERIODS:
            return False
        m, var = self._summed(i, cur)
        bound = 1.7 * sqrt(k * var * (log(log(2 * k)) + 0.72 * log(5.2 / self.ALPHA)))
        return (m > 0 and self._sum[i][cur] > bound and (i < cur or m > self.EFFECT * self.period)
                and self._mean[1][i][cur] > 0)


RULES: dict[str, type[AdmitTuner]] = {
    "prod": AdmitTuner,
    "dest": Pick,
    "hyst": type("Hyst", (Pick,), {"DEST": False, "HYST": True}),
    "dest_hyst": type("DestHyst", (Pick,), {"HYST": True}),
    "cum": Cum,
    "anytime": Anytime,
}
