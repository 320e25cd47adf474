"""PlanGuard: keeps a planned eviction policy from doing worse than LRU (used by
``guarded``, eviction_guarded.py; the planner it checks is eviction_adaptive.RetentionPlanner).
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING

from kvpool.core.eviction_adaptive import ShadowCache
from kvpool.errors import InvariantError

if TYPE_CHECKING:
    from kvpool.core.eviction_adaptive import RetentionPlanner


class PlanGuard:
    """Invariant: ``lru`` and ``plan`` (a ShadowCache) each hold at most ``size`` hashes;
    ``0 <= _since < period``; ``use_plan`` changes only on a significant paired test.

    Keeps a planned policy from doing worse than LRU on a workload it models badly. Two
    miniature caches of ``size`` hashes are fed the same hash-sampled slice of the releases
    (the slice is size / capacity of hash space, so each is a scaled copy of the pool): one is
    LRU, the other evicts the class head with the smallest ``stamp + R[class]`` under the
    planner's current retentions ``R`` (the ticks are the policy's, so R needs no scaling).
    Once per ``period`` sampled releases (a quarter of a shadow turnover) it compares their
    hits (a release that found its hash held). It starts on LRU (the plan has to earn its
    place), switches to the plan when the plan's mean gain per period passes a paired
    one-sided test at Z = 1.5 standard errors in both a fast and a slower window (as
    BonusTuner's, which uses Z = 1) in STREAK = 4 periods in a row, and back to LRU (every
    retention 0) when LRU's gain passes the same test. The test is repeated every period, so a
    single pass is weak evidence: with Z = 1 or 2 and no streak, noise made the guard adopt
    plans that then lost to LRU on workloads whose classes carry no information
    (bench.policies multiturn at 4000 blocks, uniform at 16000). Per-block hits ignore prefix
    coupling; both shadows are judged alike.
    """

    ALPHAS = (0.1, 0.05)  # EWMA weight of one period: fast and slow window
    Z = 1.5  # a switch needs a mean paired gain > Z standard errors in every window
    MIN_PERIODS = 4  # ... and this many periods of evidence
    STREAK = 4  # ... and the test passed in this many periods in a row

    SIZE = 2048  # hashes per shadow at most (a quarter of a smaller pool)

    def __init__(self, capacity: int, planner: RetentionPlanner) -> None:
        size = max(8, min(self.SIZE, capacity // 4))
        self.size = size
        self.threshold = max(1, (size << 20) // max(capacity, 1))  # sample: crc >> 12 < this
        self.planner = planner  # its ``R``: the retentions the plan shadow uses
        self.nc = nc = planner.nc
        self.lru: OrderedDict[bytes, None] = OrderedDict()
        self.plan = ShadowCache(size, 0.0, nc)  # stamps are ticks, offsets the planned R
        self._offsets = planner.R  # the R the plan shadow evicts by (replaced on each plan)
        self.plan.set_offsets(planner.R)
        self.period = max(4, size // 4)
        self.use_plan = False
        self.steps = self.switches = 0
        self.hits = [0, 0]  # this period: LRU, plan
        self._since = 0
        self._streak = 0  # consecutive periods whose test passed
        self._mean = [0.0] * len(self.ALPHAS)  # per window: EWMA of (plan - LRU hits) per period
        self._sq = [0.0] * len(self.ALPHAS)  # ... and of its square

    def access(self, h: bytes, k: int, t: int) -> bool:
        """Hash ``h`` (sampled) was released into class ``k`` at tick ``t``; True when
        ``use_plan`` changed."""
        lru = self.lru
        if h in lru:
            lru.move_to_end(h)
            self.hits[0] += 1
        else:
            lru[h] = None
            if len(lru) > self.size:
                lru.popitem(last=False)
        r = self.planner.R
        if r is not self._offsets:
            self._offsets = r
            self.plan.set_offsets(r)
        if self.plan.access(h, k, t):
            self.hits[1] += 1
        self._since += 1
        if self._since < self.period:
            return False
        self._since = 0
        return self._step()

    def _step(self) -> bool:
        d = self.hits[1] - self.hits[0]
        self.hits = [0, 0]
        self.steps += 1
        sign = 1 if not self.use_plan else -1  # the gain of the other choice
        passed = True
        for w, a in enumerate(self.ALPHAS):
            self._mean[w] += a * (d - self._mean[w])
            self._sq[w] += a * (d * d - self._sq[w])
            n_eff = min(self.steps, (2 - a) / a)
            unbias = 1.0 / (1.0 - (1.0 - a) ** self.steps)
            m = sign * self._mean[w] * unbias
            bessel = n_eff / (n_eff - 1) if n_eff > max(1, self.MIN_PERIODS - 1) else 0.0
            var = (self._sq[w] * unbias - m * m) * bessel
            # NOTE(floor): a difference of hit counts varies at least like a count
            if not (bessel and m > 0 and m * m * n_eff > self.Z * self.Z * max(var, m)):
                passed = False
        self._streak = self._streak + 1 if passed else 0
        if self._streak >= self.STREAK:
            self._streak = 0
            self.use_plan = not self.use_plan
            self.switches += 1
            return True
        return False

    def check_invariants(self) -> None:
        if len(self.lru) > self.size:
            raise InvariantError("plan guard: the LRU shadow holds more than its size")
        self.plan.check_invariants()
        if not 0 <= self._since < self.period:
            raise InvariantError("plan guard: period counter out of range")
