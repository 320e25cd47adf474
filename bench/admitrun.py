"""bench/admitrun.py: a research eviction policy (not in the product). bench.policies and
bench.heldout report it as ``admitrun``.

AdmitRun: ``admitlru`` (bench/admitlru.py: classlru's class queues behind an admission window,
its tuner choosing among bonuses and windows with a 0.4-point bar) whose miniatures are fed
release runs and score them as the pool's lookup does, from the head up to the first block
missing, as the product's classlru has done since its scoring fix (docs/benchmarks.md
"Eviction candidates and held-out shapes"). ``admitlru`` scores block by block: a popular
block behind content no cache holds looked like a hit, and on bench.heldout's code_edit that
bought bonuses the pool could not use (code_edit@1@4000 below LRU).

Runs are collected by classlru's collector (kvpool's ReleaseRuns): a request's blocks are
released tail first, so a run of sampled blocks ends at depth 0 or where the depth rises;
``miss`` is the depth of the run's first block the sketch had never counted (no cache held it).

Since the product's ``adaptive`` policy (kvpool/core/eviction/adaptive.py) scores runs this
way, admitrun is ``adaptive`` with admitlru's tuner: no ghost filter, no size rule.
"""

from __future__ import annotations

from bench.admitlru import AdmitTuner
from kvpool.core.eviction.adaptive import AdaptivePolicy


class AdmitRunPolicy(AdaptivePolicy):
    """Invariant: AdaptivePolicy's, with admitlru's tuner."""

    name = "admitrun"
    DUEL_AGE = 0  # the duel reads the classes' sketch (before NOTE(age))
    COLD = None  # a fresh pool starts as LRU whatever it sees (before NOTE(cold))
    DRAIN = False  # a window left by a switch waits while main has blocks (before NOTE(drain))
    MOVE_SPLIT = False  # the ghost filter's share is fixed (before NOTE(arc))
    BURSTS = False  # no pass on the long window alone (before NOTE(bursts))
    TUNER = AdmitTuner
