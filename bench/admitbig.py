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

The size rule is now the product tuner's NOTE(big) (kvpool/core/eviction/admit_tuner.py), so
admitbig is ``adaptive`` without the ghost filter.
"""

from __future__ import annotations

from bench.admitlru import GRID10
from kvpool.core.eviction.adaptive import AdaptivePolicy
from kvpool.core.eviction.admit_tuner import AdmitTuner


class BigTuner(AdmitTuner):
    """Invariant: the product tuner's, over GRID10 (the sketch filter, no ghost filter), with
    no long-window guard (LONG 0)."""

    GRID = GRID10
    LONG = 0.0


class AdmitBigPolicy(AdaptivePolicy):
    """Invariant: AdaptivePolicy's, with a BigTuner."""

    name = "admitbig"
    DUEL_AGE = 0  # the duel reads the classes' sketch (before NOTE(age))
    COLD = None  # a fresh pool starts as LRU whatever it sees (before NOTE(cold))
    DRAIN = False  # a window left by a switch waits while main has blocks (before NOTE(drain))
    MOVE_SPLIT = False  # the ghost filter's share is fixed (before NOTE(arc))
    BURSTS = False  # no pass on the long window alone (before NOTE(bursts))
    TUNER = BigTuner
