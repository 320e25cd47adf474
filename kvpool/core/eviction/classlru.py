"""ClassLRU: LRU within frequency classes, with a recency bonus for frequent content.

What it does: each evictable block is filed by how often its content was used recently (a
FrequencySketch keyed by hash, so counts survive eviction and block reuse) into one of five
FIFO queues in release order. ``evict`` takes the queue head whose ``release stamp + class *
bonus`` is smallest: content used more often is kept up to ``class * bonus`` pool turnovers
longer than once-used content released at the same time. ``bonus == 0`` is exactly LRU.

Why: LRU keeps everything for one equal time, so a burst of one-off content (a long document,
a first conversation turn that never comes back) flushes prefixes that many requests share.
How much extra time frequent content deserves depends on the workload (protecting it wins
when popularity is stable, loses when reuse is memoryless), so the bonus is not a constant: a
BonusTuner simulates every candidate on sampled shadow caches and moves off the current one
only when another wins by a significant margin. It starts as LRU, so it has to earn every
departure from LRU on the workload at hand.

Why prefix chains stay intact: a block's prefix is used at least as often as the block, so
ancestors sit in the same or a higher class and a chain is still evicted tail first.
"""

from __future__ import annotations

from zlib import crc32

from kvpool.core.eviction.base import PENDING, StampedQueuesPolicy
from kvpool.core.eviction.tuner import NO_MISS, BonusTuner, ReleaseRuns
from kvpool.errors import ConfigError, InvalidBlockError, InvariantError

_INF = float("inf")  # evict's starting key: any head's key is below it

# Frequency class of a sketch estimate: 0-1 uses -> 0, 2 -> 1, 3-4 -> 2, 5-8 -> 3, 9+ -> 4.
# NOTE(classes): a top class of 9+ separates the head of a popular set from its body; with the
# top at 5+ most of a Zipf working set shared one class and fell back to plain LRU order.
CLASS_OF_COUNT = bytes(0 if c <= 1 else min((c - 1).bit_length(), 4) for c in range(256))


class ClassLRUPolicy(StampedQueuesPolicy):
    """Invariant: queue ``k`` holds the evictable blocks whose content's estimated recent use
    count has class ``k`` (CLASS_OF_COUNT), each queue in release order (``_stamp``
    non-decreasing head to tail); ``_w[k] == k * bonus * capacity``. Every operation is O(1)
    amortized.

        evict: heads   q0: [b7 b2 ...]  key = stamp
                       q1: [b4 ...]     key = stamp + 1*bonus*capacity
                       q2: [b9 ...]     key = stamp + 2*bonus*capacity   -> pop the smallest
                       q3: []
                       q4: [b1 ...]     key = stamp + 4*bonus*capacity

    Stamps count releases (an internal clock), so ``bonus`` is in pool turnovers; ``depth``
    and ``now`` are unused. ``bonus=None`` tunes it online (see the module docstring); a number
    fixes it.
    """

    name = "classlru"
    K = 5
    TUNER = BonusTuner  # a research variant (bench/policy_ceiling.py) swaps its tuner's rules

    def __init__(self, capacity: int = 0, sketch_min_bits: int = 20,
                 bonus: float | None = None) -> None:
        if bonus is not None and not bonus >= 0:
            raise ConfigError(f"bonus={bonus} must be >= 0 (pool turnovers) or None (tuned)")
        super().__init__(capacity, sketch_min_bits)
        self._tuner = self.TUNER(self._scale, self.K) if bonus is None else None
        # sampled into the tuner's shadows: crc >> 12 below this (0: never)
        self._sample = self._tuner.threshold if self._tuner is not None else 0
        self._runs = ReleaseRuns(self._tuner)  # NOTE(runs): what the tuner is fed
        self._bonus = 0.0 if bonus is None else float(bonus)
        self._w = [0.0] * self.K  # eviction-key bonus per queue
        self._set_bonus(self._bonus)

    def _set_bonus(self, bonus: float) -> None:
        self._bonus = bonus
        self._w = [k * bonus * self._scale for k in range(self.K)]

    @property
    def bonus(self) -> float:
        """The bonus per class in use, in pool turnovers (0 = LRU)."""
        return self._bonus

    def insert(self, block_id: int, block_hash: bytes, depth: int, now: float) -> None:
        where = self._where
        if self._memo is None and 0 <= block_id < len(where):
            w = where[block_id]  # NOTE(speed): _insert_start's common case, inlined
            if w < self.K:
                raise InvalidBlockError(f"block {block_id} is already evictable")
        else:  # a new id, or a defrag move in progress
            w, memo = self._insert_start(block_id, block_hash)
            if memo is not None:
                self._insert_moved(block_id, block_hash, memo)
                return
        c = crc32(block_hash)
        if w == PENDING and self._hash[block_id] == block_hash:
            k = CLASS_OF_COUNT[self._sketch.estimate(c)]  # a revival: on_hit counted the use
        else:
            n = self._sketch.add(c)  # new content in this block: a use
            k = CLASS_OF_COUNT[n]
            if n == 1:  # NOTE(runs): first seen, so no cache held it: none reaches deeper
                self._runs.miss = depth
        self._stamp_at_tail(block_id, block_hash, k)
        # NOTE(runs): a sampled block joins its run; the chain's head ends one (if any)
        runs = self._runs
        if (c >> 12) < self._sample and runs.add(block_hash, k, depth):
            self._set_bonus(self._tuner.bonus)
        if not depth and (runs.run or runs.miss != NO_MISS) and runs.head():
            self._set_bonus(self._tuner.bonus)

    def remove(self, block_id: int) -> None:
        self._unlink(block_id)
        self._where[block_id] = PENDING  # keep the hash: a re-insert is a revival, not a use

    def evict(self) -> int:
        nxt, stamp, k = self._next, self._stamp, self.K
        best = -1
        key = _INF
        q = 0
        for wq in self._w:  # the queue head with the smallest key; ties go to the lower class
            n = nxt[q]
            if n != q:
                s = stamp[n - k] + wq
                if s < key:
                    best, key = q, s
            q += 1
        if best < 0:
            raise IndexError("evict from an empty ClassLRUPolicy")
        return self._unlink_head(best)

    def check_invariants(self) -> None:
        super().check_invariants()
        for b, w in enumerate(self._where):
            if w == PENDING and self._hash[b] is None:
                raise InvariantError(f"revived block {b} lost its hash")
        self._runs.check_invariants()
        if self._w != [k * self._bonus * self._scale for k in range(self.K)]:
            raise InvariantError("eviction-key bonuses do not match the bonus in use")
        if self._tuner is not None:
            if self._bonus != self._tuner.bonus:
                raise InvariantError("the bonus in use is not the tuner's choice")
            self._tuner.check_invariants()
        self._sketch.check_invariants()
