"""bench/admitbig.py: a research eviction policy (not in the product). bench.policies and
bench.heldout report it as ``admitbig``.

AdmitBig: ``admitrun`` (bench/admitrun.py: classlru's class queues behind an admission window,
miniatures scored by leading runs) whose tuner also passes a candidate on a *large* gain
without the variance test.

Why: the tuner's test asks for a mean paired gain of Z standard errors over tuning periods.
Where a candidate's hits come in bursts, the variance across periods is large however large
the gain: on a loop longer than the pool a duel's miniature holds the loop's first blocks
and hits them once per pass (one period in ten at 1000 blocks), so the test passed only after
several passes (``admitrun`` moved at turnover 34 of 142, docs/benchmarks.md "admitrun").
A gain that large is not the noise the test guards against (bursts of a fraction of a point
on memoryless reuse), so it passes on size alone: an unbiased mean gain above ``BIG`` of a
period's sampled accesses in both evidence windows, after ``MIN_BIG`` tuning steps.

``BIG`` (4 points) and ``MIN_BIG`` (8 steps) were set once, before any run, as "well above the
1.5-point EFFECT bar" and "past the first few periods of a cold pool"; they are not fitted.
"""

from __future__ import annotations

from bench.admitlru import AdmitTuner
from bench.admitrun import AdmitRunPolicy


class BigTuner(AdmitTuner):
    """Invariant: AdmitTuner's. A candidate passes when AdmitTuner's test passes it, or when
    its unbiased mean gain over the current choice exceeds ``BIG * period`` in every window
    after ``MIN_BIG`` steps; AdmitTuner's lead rule then applies to both."""

    BIG = 0.04  # share of a period's sampled accesses
    MIN_BIG = 8  # tuning steps before a gain can pass on size alone
    bigs = 0  # candidates passed on size alone (a diagnostic)

    def _nearest(self, passed: list[bool], gain: list[float], cur: int) -> int:
        if self.steps >= self.MIN_BIG:
            big = [i != cur and not ok and self._large(i, cur) for i, ok in enumerate(passed)]
            self.bigs += sum(big)
            passed = [ok or b for ok, b in zip(passed, big, strict=True)]
        return super()._nearest(passed, gain, cur)

    def _large(self, i: int, cur: int) -> bool:
        """Candidate ``i``'s mean gain over ``cur`` is above the bar in every window."""
        bar = self.BIG * self.period
        return all(self._mean[w][i][cur] / (1.0 - (1.0 - a) ** self.steps) > bar
                   for w, a in enumerate(self.ALPHAS))


class AdmitBigPolicy(AdmitRunPolicy):
    """Invariant: AdmitRunPolicy's, with a BigTuner."""

    name = "admitbig"
    TUNER = BigTuner
