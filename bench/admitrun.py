"""bench/admitrun.py: a research eviction policy (not in the product). bench.policies and
bench.heldout report it as ``admitrun``.

AdmitRun: ``admitlru`` (bench/admitlru.py: classlru's class queues behind an admission window,
its tuner choosing among bonuses and windows with a 0.4-point bar) whose miniatures are fed
release runs and score them as the pool's lookup does, from the head up to the first block
missing, as the product's classlru has done since its scoring fix (docs/benchmarks.md
"Eviction candidates and held-out shapes"). ``admitlru`` scores block by block: a popular
block behind content no cache holds looked like a hit, and on bench.heldout's code_edit that
bought bonuses the pool could not use (code_edit@1@4000 below LRU).

Runs are collected as classlru collects them: a request's blocks are released tail first, so a
run of sampled blocks ends at depth 0 or where the depth rises; ``_miss`` is the depth of the
run's first block the sketch had never counted (no cache held it).
"""

from __future__ import annotations

from bench.admitlru import AdmitLRUPolicy, Cfg
from kvpool.core.eviction.classlru import NO_MISS
from kvpool.errors import InvariantError


class AdmitRunPolicy(AdmitLRUPolicy):
    """Invariant: AdmitLRUPolicy's, and ``_run`` is one run of strictly falling depth,
    collected only with a tuner."""

    name = "admitrun"

    def __init__(self, capacity: int = 0, sketch_min_bits: int = 20,
                 cfg: Cfg | None = None) -> None:
        super().__init__(capacity, sketch_min_bits, cfg)
        self._run: list[tuple[int, int, int]] = []  # sampled (crc, class, depth), tail first
        self._miss = NO_MISS

    def _sampled(self, c: int, k: int, depth: int, n: int) -> None:
        if n == 1:  # first seen: no cache held it, so no lookup reaches deeper
            self._miss = depth
        if (c >> 12) < self._sample:
            run = self._run
            if run and depth >= run[-1][2]:  # the depth rose: the last run is done
                self._feed(run)
                run = self._run = []
            run.append((c, k, depth))
        if not depth:  # the chain's head: the run is done
            if self._run:
                self._feed(self._run)
                self._run = []
            self._miss = NO_MISS

    def _feed(self, run: list[tuple[int, int, int]]) -> None:
        if self._tuner.access_run(run, self._miss):
            self._set_cfg(self._tuner.bonus)

    def check_invariants(self) -> None:
        super().check_invariants()
        run = self._run
        if any(a[2] <= b[2] for a, b in zip(run, run[1:])) or (run and not self._sample):
            raise InvariantError("the release run being collected is not one run of falling "
                                 "depth, or is collected with no tuner")
