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
"""

from __future__ import annotations

from bench.admitlru import AdmitLRUPolicy, Cfg
from kvpool.core.eviction.tuner import ReleaseRuns


class AdmitRunPolicy(AdmitLRUPolicy):
    """Invariant: AdmitLRUPolicy's, and ReleaseRuns's for the run being collected."""

    name = "admitrun"

    def __init__(self, capacity: int = 0, sketch_min_bits: int = 20,
                 cfg: Cfg | None = None) -> None:
        super().__init__(capacity, sketch_min_bits, cfg)
        self._runs = ReleaseRuns(self._tuner)  # sampled (crc, class, depth), tail first

    def _sampled(self, c: int, k: int, depth: int, n: int) -> None:
        runs = self._runs
        if n == 1:  # first seen: no cache held it, so no lookup reaches deeper
            runs.miss = depth
        if (c >> 12) < self._sample and runs.add(c, k, depth):
            self._set_cfg(self._tuner.bonus)
        if not depth and runs.head():
            self._set_cfg(self._tuner.bonus)

    def check_invariants(self) -> None:
        super().check_invariants()
        self._runs.check_invariants()
