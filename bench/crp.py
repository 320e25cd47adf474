"""bench/crp.py: a research eviction policy (not in the product). bench.policies,
bench.heldout and bench.policy_ceiling report it as ``crp``.

CRPPolicy: the product's ``adaptive`` (kvpool/core/eviction/adaptive.py) whose frequency
sketch counts a *return*, not every use. A use of cached content counts only when the block
comes back to the evictable set more than ``CRP`` pool turnovers after it last left it
there; uses closer together are one reference, as LRU-K's "correlated reference period"
(O'Neil et al., 1993) folds them. Content that misses and is inserted anew still counts, as
in the product.

Why: on ``call_center`` at 16000 blocks S3-FIFO beats every configuration of the grid held
fixed (docs/benchmarks.md "`call_center`: what S3-FIFO keeps"). A voice call re-sends its
whole prompt every few seconds, so its transcript, the closing instruction and the articles
retrieved for it are used five to ten times within minutes and never again (a block's identity
holds the call's own prefix). The sketch counts each of those uses, so the class bonus
protects the call's own blocks as long as a queue's SOP or a client's persona, which
different callers send hours apart. Counted per return, a call's blocks stay in class 0-1
and the shared heads climb.

In pool terms: ``on_hit`` counts nothing (it only ends NOTE(cold)); the count comes at the
revival ``insert`` (a block a hit took back, released again) when the block's release stamp
is more than ``CRP * capacity`` inserts old. Hits on a block some sequence still holds are
folded into that one count: concurrent uses are correlated by definition. No new state: the
gap is the release stamp the policy keeps anyway.

Measured once over 219 cells (docs/benchmarks.md "`crp`: counting returns, not uses"): 43 lost
(adaptive 42), summed shortfall 0.2002 (0.1891), 10 cells below LRU (8). It wins both
call_center cells at 16000 blocks and loses zipf_prefix and scan_mix cells, where popularity
is many independent requests at short gaps. Not adopted. Two variants below check where the
loss comes from (``crpclass``: the duel keeps per-use counts; ``crpage``: counts age on the
product's schedule); both keep it.
"""

from __future__ import annotations

from zlib import crc32

from kvpool.core.eviction.adaptive import AdaptivePolicy
from kvpool.core.eviction.admit_tuner import Cfg
from kvpool.core.eviction.base import PENDING
from kvpool.core.eviction.sketch import FrequencySketch
from kvpool.core.eviction.tuner import ReleaseRuns


class CRPPolicy(AdaptivePolicy):
    """Invariant: AdaptivePolicy's. The sketch counts new content at insert and a revival
    whose release stamp is more than ``CRP`` turnovers old; ``on_hit`` counts nothing."""

    name = "crp"
    MOVE_SPLIT = False  # the ghost filter's share is fixed (before NOTE(arc))
    BURSTS = False  # no pass on the long window alone (before NOTE(bursts))
    HOLD = False  # before NOTE(cold)'s hold (on_hit ends the rule at any hit)
    CRP: float = 0.05  # pool turnovers (inserts / capacity) within which uses are one

    def on_hit(self, block_hash: bytes) -> None:
        if self._cold:  # NOTE(cold): the first hit ends the rule, as in the product
            self._warm()

    def insert(self, block_id: int, block_hash: bytes, depth: int, now: float) -> None:
        where = self._where
        if (0 <= block_id < len(where) and where[block_id] == PENDING
                and self._hash[block_id] == block_hash):
            if self._clock - self._stamp[block_id] > self.CRP * self._scale:
                self._count_return(crc32(block_hash))  # the revival below reads this count
            else:
                self._fold()
        super().insert(block_id, block_hash, depth, now)

    def _fold(self) -> None:
        """A revival within the period: one reference with the last, nothing counted."""

    def _count_return(self, c: int) -> None:
        """A return of content CRC ``c``: one use in every sketch there is."""
        self._count(c)


class CRPClassPolicy(CRPPolicy):
    """Invariant: CRPPolicy's, except that the duel always has a sketch of its own, which
    counts every use as the product does (hits included); only the classes' sketch counts
    returns. The duel (W-TinyLFU's admission) keeps its frequencies."""

    name = "crpclass"

    def __init__(self, capacity: int = 0, sketch_min_bits: int = 20,
                 cfg: Cfg | None = None) -> None:
        super().__init__(capacity, sketch_min_bits, cfg)
        if self._duel is self._sketch:  # one sketch (pools above ~8700 blocks): split it
            self._duel = FrequencySketch(self._scale, sketch_min_bits)
            self._count = self._count_both
            if cfg is None:  # the tuner's duels read the new sketch
                self._tuner = self.TUNER(self._scale, self._sketch.estimate,
                                         self._duel.estimate, self.MOVE_SPLIT, self.BURSTS)
                self._sample = self._tuner.threshold
                self._runs = ReleaseRuns(self._tuner)

    def on_hit(self, block_hash: bytes) -> None:
        super().on_hit(block_hash)
        self._duel.add(crc32(block_hash))

    def _count_return(self, c: int) -> None:
        self._sketch.add(c)  # the duel's sketch counted this use's hit already


class CRPAgePolicy(CRPPolicy):
    """Invariant: CRPPolicy's. A use folded into the last reference still advances the
    sketches' halving clock (``left``), so their counts age on the product's schedule: with
    fewer additions, CRPPolicy's sketch halves less often and old counts live longer."""

    name = "crpage"

    def _fold(self) -> None:
        for s in {id(sk): sk for sk in (self._sketch, self._duel)}.values():
            s.left -= 1
            if not s.left:
                s.halve()

