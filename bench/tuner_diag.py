"""bench/tuner_diag.py: three one-change variants of classlru's tuner (research, not in the
product). bench.policies, bench.heldout and bench.policy_ceiling report them by name.

Each asks one question about how classlru moves between bonuses (docs/benchmarks.md
"Three tuner diagnostics"):

    retreat     A move toward LRU (a lower grid index) needs the paired test in the fast
                window only; a move away still needs both windows and the EFFECT bar. Does a
                wrong early move (code_edit@2 at 4000 blocks) cost less if the tuner is quick
                to come back?
    keyrelease  A block's eviction key is fixed when it is released: release stamp plus
                class * bonus *then*. A new bonus applies only to blocks released after the
                switch, so the pool does not evict a burst of recent class-0 blocks at the
                switch. Is the switch's transient (doc_window@2 at 4000) worth removing?
    warmstart   Tuning steps start only once the miniatures are full. Before that every
                miniature holds the same blocks, so a step carries no evidence but still
                dilutes the slow window. Does skipping them make the tuner move sooner on
                large pools (zipf_prefix at 16000)?

All three were measured in one run each over bench.policy_ceiling's 111 cells, after the
questions were written and without changing them afterwards.
"""

from __future__ import annotations

from kvpool.core.eviction.base import LinkedQueuesPolicy
from kvpool.core.eviction.classlru import ClassLRUPolicy
from kvpool.core.eviction.tuner import BonusTuner

_INF = float("inf")


class RetreatTuner(BonusTuner):
    """Invariant: BonusTuner's. A candidate below the current index also passes when the
    paired test passes it in the fast window alone."""

    retreats = 0  # moves passed by the fast window alone (a diagnostic)

    def _nearest(self, passed: list[bool], gain: list[float], cur: int) -> int:
        fast = [i < cur and not ok and self._fast_passes(i, cur) for i, ok in enumerate(passed)]
        self.retreats += sum(fast)
        return super()._nearest([ok or f for ok, f in zip(passed, fast, strict=True)], gain, cur)

    def _fast_passes(self, i: int, cur: int) -> bool:
        """BonusTuner's paired test of ``i`` over ``cur``, in the fast window only."""
        a = self.ALPHAS[0]
        n_eff = min(self.steps, (2 - a) / a)
        if n_eff <= self.MIN_PERIODS - 1:
            return False
        unbias = 1.0 / (1.0 - (1.0 - a) ** self.steps)
        m = self._mean[0][i][cur] * unbias
        var = (self._sq[0][i][cur] * unbias - m * m) * n_eff / (n_eff - 1)
        return m > 0 and m * m * n_eff > self.Z * self.Z * max(var, m)


class WarmTuner(BonusTuner):
    """Invariant: BonusTuner's; ``steps`` counts only periods in which the miniatures were
    full (they all fill at the same access: they see the same blocks)."""

    cold = 0  # periods skipped while the miniatures were filling (a diagnostic)

    def _step(self) -> bool:
        s = self.shadows[0]
        if len(s.where) < s.capacity:
            for x in self.shadows:
                x.hits = 0
            self.cold += 1
            return False
        return super()._step()


class RetreatPolicy(ClassLRUPolicy):
    """Invariant: ClassLRUPolicy's, with a RetreatTuner."""

    name = "retreat"
    TUNER = RetreatTuner


class WarmStartPolicy(ClassLRUPolicy):
    """Invariant: ClassLRUPolicy's, with a WarmTuner."""

    name = "warmstart"
    TUNER = WarmTuner


class KeyReleasePolicy(ClassLRUPolicy):
    """Invariant: ClassLRUPolicy's, except that ``_stamp`` holds each block's eviction key
    (release clock + its class's bonus at release), so a queue is in key order only while
    the bonus has not fallen; evict takes the queue head with the smallest key."""

    name = "keyrelease"

    def insert(self, block_id: int, block_hash: bytes, depth: int, now: float) -> None:
        moving = self._memo is not None  # NOTE(move): a defrag move keeps its key
        super().insert(block_id, block_hash, depth, now)
        k = self._where[block_id]
        if not moving and k < self.K:
            self._stamp[block_id] += int(self._w[k])

    def evict(self) -> int:
        nxt, key, k = self._next, self._stamp, self.K
        best, low = -1, _INF
        for q in range(k):
            n = nxt[q]
            if n != q and key[n - k] < low:
                best, low = q, key[n - k]
        if best < 0:
            raise IndexError("evict from an empty KeyReleasePolicy")
        return self._unlink_head(best)

    def check_invariants(self) -> None:
        LinkedQueuesPolicy.check_invariants(self)  # the queue links; key order may not hold
        self._sketch.check_invariants()
        if self._tuner is not None:
            self._tuner.check_invariants()
