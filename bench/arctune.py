"""bench/arctune.py: a research eviction policy (not in the product), wintune's successor;
bench.policies and bench.heldout report it as ``arctune``.

ArcTune: wintune (bench/wintune.py) with ARC (Megiddo & Modha, FAST'03) in the place of its
fixed recency/frequency splits. wintune's configurations without the admission duel were ARC
with a frozen target and no ghosts: a block reached main only by a second use while still in
the window. On the shapes where ARC led (drift, mooncake, rag_bursty, agent) they stayed
behind it, because what ARC adds is memory of what it evicted: content evicted within the
last pool turnover that comes back goes straight to main, and which list it came back from
moves the window's target (a ghost of the window grows it, a ghost of main shrinks it).

The tuner's choices, LRU first: LRU; ARC; W-TinyLFU with windows of 50, 20, 5 and 1 %. The
ARC miniature is bench/baselines.py's ARC, fed the same hash-sampled accesses. In ARC mode
the live policy keeps ARC's target ``p`` in blocks; ghosts are a GhostFilter
(bench/doorarc_ghosts.py: one 32-bit slot per block, the queue each ghost left from), fed by
every eviction in every mode, so ARC mode starts with a pool turnover of ghosts; ``p``
starts at the window's size when the tuner switches to ARC (no jump in where victims come
from) and moves only while ARC is in use.
"""

from __future__ import annotations

from collections.abc import Callable
from zlib import crc32

from bench.baselines import ARC
from bench.doorarc_ghosts import GhostFilter
from bench.wintune import (PROBATION, PROTECTED, PROTECTED_SHARE, WINDOW, MiniWTinyLFU,
                           WindowTuner, WinTunePolicy, feed)
from kvpool.core.eviction.base import PENDING
from kvpool.core.eviction.sketch import FrequencySketch
from kvpool.core.eviction.tuner import BonusTuner
from kvpool.errors import InvariantError

ARC_CFG = (None, False)
GHOST_SLOTS = 2  # ghost table slots per pool block: fewer collisions than one, at 4 bytes each


def ghost_filter(capacity: int, slots: int = GHOST_SLOTS) -> GhostFilter:
    """A GhostFilter remembering ``capacity`` evictions (ARC's |B1| + |B2| <= c) in a table
    of ``slots`` per block: with one slot per ghost, a newer eviction overwrote an older ghost
    often enough that the ARC mode trailed bench/baselines.py's ARC on drift."""
    g = GhostFilter(slots * capacity)
    g.horizon = max(1, min(capacity, 1 << 23))
    g.ring = bytearray(b"\x03") * g.horizon
    return g  # the tuner's ARC choice: the window's share is ARC's to move


class MiniARC:
    """Invariant: the ARC holds at most ``capacity`` ids. bench/baselines.py's ARC, counting
    ``hits`` (accesses found held) for the tuner."""

    __slots__ = ("arc", "cfg", "hits")

    def __init__(self, capacity: int) -> None:
        self.arc = ARC(capacity)
        self.cfg = ARC_CFG
        self.hits = 0

    def access(self, c: int, _k: int = 0) -> bool:
        hit = c in self.arc
        self.arc.access(c)
        self.hits += hit
        return hit

    def check_invariants(self) -> None:
        if len(self.arc) > self.arc.capacity:
            raise InvariantError("the ARC miniature holds more than its capacity")


class ArcTuner(WindowTuner):
    """WindowTuner whose second choice is ARC (MiniARC) instead of fixed splits."""

    GRID = ((1.0, False), ARC_CFG, (0.5, True), (0.2, True), (0.05, True), (0.01, True))

    def __init__(self, capacity: int, freq: Callable[[int], int]) -> None:
        BonusTuner.__init__(self, capacity, 1)
        size = self.shadows[0].capacity
        self.shadows = [MiniARC(size) if g == ARC_CFG else MiniWTinyLFU(size, g, freq)
                        for g in self.GRID]


class ArcTunePolicy(WinTunePolicy):
    """Invariant: WinTunePolicy's; ``0 <= _p``; ``arc`` iff ``cfg == ARC_CFG``. O(1) per call,
    amortized (a sampled insert also feeds six miniatures)."""

    name = "arctune"

    def __init__(self, capacity: int = 0, sketch_min_bits: int = 20,
                 cfg: tuple[float | None, bool] | None = None) -> None:
        super().__init__(capacity, sketch_min_bits, (1.0, False))
        scale = capacity if capacity > 0 else 1024
        # NOTE(memory): 4 counters per block (wintune's 8) pay for the ghosts' second slot
        # within 40 bytes per block (docs/benchmarks.md "Eviction candidates")
        self._sketch = FrequencySketch(max(1, scale // 2), sketch_min_bits)
        self._tuner = ArcTuner(scale, self._sketch.estimate) if cfg is None else None
        self._sample = self._tuner.threshold if self._tuner is not None else 0
        self._ghosts = ghost_filter(scale)
        self._p = 0.0  # ARC's target for the window, in blocks
        self.arc = False
        self._switch((1.0, False) if cfg is None else cfg)

    def _switch(self, cfg: tuple) -> None:
        self.cfg = cfg
        self.arc = cfg == ARC_CFG
        if self.arc:
            self._p = float(self._n[WINDOW])
            self.share, self.duel = 1.0, False
        else:
            self.share, self.duel = cfg

    def _adapt(self, g: int) -> None:
        """A ghost came back from queue ``g``: ARC's move of the window's target."""
        b1 = self._ghosts.count[WINDOW] + (g == WINDOW)
        b2 = self._ghosts.count[PROBATION] + self._ghosts.count[PROTECTED] + (g != WINDOW)
        if g == WINDOW:
            self._p = min(float(self._len + 1), self._p + max(b2 / b1, 1.0))
        else:
            self._p = max(0.0, self._p - max(b1 / b2, 1.0))

    def insert(self, block_id: int, block_hash: bytes, depth: int, now: float) -> None:
        w, memo = self._insert_start(block_id, block_hash)
        if memo is not None:  # a defrag move keeps segment and place
            self._link_after(block_id + self.K, memo[2])
            self._put(block_id, block_hash, self._crc[memo[3]], memo[1], linked=True)
            return
        if w == PENDING and self._hash[block_id] == block_hash:  # a revival: on_hit counted
            c = self._crc[block_id]
            back = self._seg[block_id] == WINDOW and not self.arc and (
                self.duel or self.share >= 1.0)
            q = WINDOW if back else PROTECTED
        else:
            c = crc32(block_hash)
            self._sketch.add(c)
            g = self._ghosts.take(c)
            if g >= 0 and self.arc:
                self._adapt(g)
            q = PROTECTED if g >= 0 and self.arc else WINDOW
        self._put(block_id, block_hash, c, q)
        if q == PROTECTED and not self.arc and (
                self._n[PROTECTED] > PROTECTED_SHARE * (self._len - self._n[0])):
            self._move_head(PROTECTED, PROBATION)  # ARC's main is one LRU list (T2)
        if (c >> 12) < self._sample and feed(self._tuner, c):
            self._switch(self._tuner.bonus)

    def evict(self) -> int:
        if self.arc:
            self.share = self._p / self._len if self._len else 1.0
        return super().evict()

    def _pop(self, q: int) -> int:
        self._ghosts.add(self._crc[self._next[q] - self.K], q)
        return super()._pop(q)

    def check_invariants(self) -> None:
        super().check_invariants()
        if self._p < 0 or self.arc != (self.cfg == ARC_CFG):
            raise InvariantError(f"ARC target {self._p} or mode {self.cfg} out of range")
        self._ghosts.check_invariants()
