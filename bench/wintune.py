"""bench/wintune.py: a research eviction policy (not in the product). bench.policies and
bench.heldout report it as ``wintune``; it keeps the product's EvictionPolicy protocol, so
``simulate`` replays it.

WinTune: W-TinyLFU (Einziger et al., ToS'17) on the product's flat queues, whose window share
is chosen online by simulation, among a bracket from 100 % (exactly LRU) to 1 % (the paper's).

Why this family: the classics split the cells between them (docs/benchmarks.md "Eviction
candidates and held-out shapes"): W-TinyLFU's frequency admission keeps part of a loop longer
than the pool and the popular prefixes under one-off scans; LRU keeps the new turns of
returning conversations, which a frequency duel turns away. One number, the window share,
spans both: a 100 % window has no main cache and is LRU; a 1 % window is the paper's. The
duel's tie goes to the incumbent, which is what freezes part of a loop in the cache.

Why shadows rather than ghost feedback (``ghostwin``) or following whole classic caches
(``follow``): a window share is one knob of one policy, so a switch changes only where the
next victims come from (no content has to converge to another cache's), and miniatures of
the same policy, fed a hash-sampled slice of the accesses, measure each share's hits
directly. The choice is the classlru tuner's statistical rule (kvpool/core/eviction/tuner.py):
start as LRU, move only on a paired gain significant in a fast and a slow window, and away
from LRU only on a gain of 1.5 points of the sampled accesses.

Segments, as the paper's: queue 0 the window (LRU), queue 1 probation and queue 2 protected
(SLRU, protected at most 80 % of the main cache). A new release enters the window; a revival
goes back to the window if it came from there, else to protected (a second use in main).
``evict`` runs the window's overflow duel lazily, at the moment a block is needed: while the
window is over its share, its oldest block (the candidate) duels main's next victim and the
one whose content the FrequencySketch counts more often stays (the tie: the victim stays).

Why chains stay intact: a request's blocks are released tail first, so in each segment a
child sits ahead of its parent, and a child is counted at most as often as its parent.
"""

from __future__ import annotations

from array import array
from collections import OrderedDict
from collections.abc import Callable
from zlib import crc32

from kvpool.core.eviction.base import PENDING, LinkedQueuesPolicy
from kvpool.core.eviction.sketch import FrequencySketch
from kvpool.core.eviction.tuner import BonusTuner
from kvpool.errors import InvariantError

WINDOW, PROBATION, PROTECTED = 0, 1, 2
PROTECTED_SHARE = 0.8  # of the main cache (the paper's SLRU split)


class MiniWTinyLFU:
    """Invariant: window, probation and protected are disjoint, ``len(window) <= wcap``, the
    three hold at most ``capacity`` ids, protected at most PROTECTED_SHARE of main.

    A hash-keyed W-TinyLFU of ``capacity`` ids with a window of ``share`` of them, sharing the
    policy's sketch for counts; ``hits`` counts accesses found held since last read."""

    __slots__ = ("capacity", "cfg", "duel", "wcap", "pcap", "freq", "win", "prob", "prot",
                 "hits")

    def __init__(self, capacity: int, cfg: tuple[float, bool],
                 freq: Callable[[int], int]) -> None:
        self.capacity = capacity
        self.cfg = cfg
        share, self.duel = cfg
        self.wcap = max(1, min(capacity, round(share * capacity)))  # window ids at most
        self.pcap = int(PROTECTED_SHARE * (capacity - self.wcap))  # protected ids at most
        self.freq = freq  # crc -> recent use count (the policy's sketch)
        self.win: OrderedDict[int, None] = OrderedDict()  # oldest first
        self.prob: OrderedDict[int, None] = OrderedDict()
        self.prot: OrderedDict[int, None] = OrderedDict()
        self.hits = 0

    def access(self, c: int, _k: int = 0) -> bool:
        """Content with CRC ``c`` used now; True on a hit."""
        if c in self.win:
            if self.duel or self.wcap >= self.capacity:
                self.win.move_to_end(c)
            else:  # a second use in the window: to main, as ARC's T1 -> T2
                del self.win[c]
                self._protect(c)
        elif c in self.prot:
            self.prot.move_to_end(c)
        elif c in self.prob:
            del self.prob[c]
            self._protect(c)
        else:
            self._admit(c)
            return False
        self.hits += 1
        return True

    def _protect(self, c: int) -> None:
        self.prot[c] = None
        if len(self.prot) > self.pcap:
            self.prob[self.prot.popitem(last=False)[0]] = None

    def _admit(self, c: int) -> None:
        """Bring ``c`` into the window, then evict as WinTunePolicy.evict does."""
        win, prob, prot = self.win, self.prob, self.prot
        win[c] = None
        if len(win) + len(prob) + len(prot) <= self.capacity:
            return
        for _ in range(2 if self.duel else 0):  # NOTE(fill), as the policy's
            if len(win) <= self.wcap + 1:
                break
            prob[win.popitem(last=False)[0]] = None
        main = prob or prot
        if not main:
            win.popitem(last=False)
        elif len(win) <= self.wcap:
            main.popitem(last=False)
        elif not self.duel:
            win.popitem(last=False)
        else:
            cand = win.popitem(last=False)[0]
            if self.freq(cand) > self.freq(next(iter(main))):
                main.popitem(last=False)
                prob[cand] = None

    def check_invariants(self) -> None:
        w, p, q = set(self.win), set(self.prob), set(self.prot)
        if w & p or w & q or p & q:
            raise InvariantError("a shadow id sits in two segments")
        if len(w) + len(p) + len(q) > self.capacity:
            raise InvariantError("shadow segments over their capacity")


def feed(tuner: BonusTuner, c: int, k: int = 0) -> bool:
    """One sampled access (content CRC ``c``, class ``k``) to every miniature of a bench
    tuner, whose miniatures score block by block; True when the tuner's choice changed."""
    for s in tuner.shadows:
        s.access(c, k)
    return tuner.tick(1)


class WindowTuner(BonusTuner):
    """Invariant: shadow ``i`` has window share ``GRID[i]``; the rest is BonusTuner's.

    BonusTuner's sampling and statistical rule over W-TinyLFU miniatures: ``bonus`` is the
    window share chosen. Index 0 is LRU, so moving up the index moves away from LRU (the
    direction that must also clear EFFECT)."""

    # (window share, duel): LRU first; then ARC-like splits with a fixed target (no duel: main
    # holds what was used twice), then W-TinyLFU windows. Log-ish spaced brackets, not fits.
    GRID = ((1.0, False), (0.75, False), (0.5, False), (0.25, False),
            (0.5, True), (0.2, True), (0.05, True), (0.01, True))

    def __init__(self, capacity: int, freq: Callable[[int], int]) -> None:
        super().__init__(capacity, 1)
        size = self.shadows[0].capacity
        self.shadows = [MiniWTinyLFU(size, g, freq) for g in self.GRID]

    def check_invariants(self) -> None:
        if not 0 <= self.current < len(self.GRID):
            raise InvariantError(f"tuner index {self.current} outside the grid")
        for g, s in zip(self.GRID, self.shadows, strict=True):
            if s.cfg != g:
                raise InvariantError("shadow share does not match its grid value")
            s.check_invariants()


class WinTunePolicy(LinkedQueuesPolicy):
    """Invariant: ``_n[q]`` counts queue ``q``'s blocks; ``_seg[b]`` is the queue a PENDING
    block was revived from; ``_crc[b]`` is the CRC-32 of every linked block's hash;
    protected never exceeds PROTECTED_SHARE of main after an insert. O(1) per call,
    amortized (a sampled insert also feeds five miniatures)."""

    name = "wintune"
    K = 3

    def __init__(self, capacity: int = 0, sketch_min_bits: int = 20,
                 cfg: tuple[float, bool] | None = None) -> None:
        super().__init__(capacity)
        scale = capacity if capacity > 0 else 1024
        self._sketch = FrequencySketch(scale, sketch_min_bits)
        self._crc = array("I", bytes(4 * capacity))  # block -> crc32 of its hash
        self._seg = bytearray(capacity)  # block -> queue it was revived from
        self._n = [0, 0, 0]  # blocks per queue
        self._tuner = WindowTuner(scale, self._sketch.estimate) if cfg is None else None
        self._sample = self._tuner.threshold if self._tuner is not None else 0
        self.cfg = (1.0, False) if cfg is None else cfg  # (window share, duel); LRU first
        self.share, self.duel = self.cfg

    def _grow(self, block_id: int) -> None:
        super()._grow(block_id)
        grow = len(self._where) - len(self._crc)
        self._crc.frombytes(bytes(4 * grow))
        self._seg.extend(bytes(grow))

    def on_hit(self, block_hash: bytes) -> None:
        self._sketch.add(crc32(block_hash))

    def insert(self, block_id: int, block_hash: bytes, depth: int, now: float) -> None:
        w, memo = self._insert_start(block_id, block_hash)
        if memo is not None:  # a defrag move keeps segment and place
            q, pred, src = memo[1], memo[2], memo[3]
            self._link_after(block_id + self.K, pred)
            self._put(block_id, block_hash, self._crc[src], q, linked=True)
            return
        if w == PENDING and self._hash[block_id] == block_hash:  # a revival: on_hit counted
            c = self._crc[block_id]
            q = self._seg[block_id]
            q = WINDOW if q == WINDOW and (self.duel or self.share >= 1.0) else PROTECTED
        else:
            c = crc32(block_hash)
            self._sketch.add(c)
            q = WINDOW
        self._put(block_id, block_hash, c, q)
        if q == PROTECTED and self._n[PROTECTED] > PROTECTED_SHARE * (self._len - self._n[0]):
            self._move_head(PROTECTED, PROBATION)
        if (c >> 12) < self._sample and feed(self._tuner, c):
            self.cfg = self._tuner.bonus
            self.share, self.duel = self.cfg

    def _put(self, b: int, block_hash: bytes, c: int, q: int, linked: bool = False) -> None:
        if not linked:
            self._link_after(b + self.K, self._prev[q])  # the tail of queue q
        self._where[b] = q
        self._hash[b] = block_hash
        self._crc[b] = c
        self._n[q] += 1
        self._len += 1

    def _move_head(self, src: int, dst: int) -> None:
        node = self._next[src]
        self._next[src] = self._next[node]
        self._prev[self._next[node]] = src
        self._link_after(node, self._prev[dst])
        self._where[node - self.K] = dst
        self._n[src] -= 1
        self._n[dst] += 1

    def remove(self, block_id: int) -> None:
        q = self._unlink(block_id)
        self._n[q] -= 1
        self._seg[block_id] = q
        self._where[block_id] = PENDING  # keep the hash: a re-insert is a revival, not a use

    def discard(self, block_id: int) -> None:
        q = self._where[block_id] if 0 <= block_id < len(self._where) else PENDING
        super().discard(block_id)
        self._n[q] -= 1

    def evict(self) -> int:
        if not self._len:
            raise IndexError("evict from an empty WinTunePolicy")
        n, k, nxt = self._n, self.K, self._next
        target = self.share * self._len
        # NOTE(fill): with the duel, a window over its share (a fresh pool, or the share just
        # went down) hands its oldest blocks to probation, two per call, so main fills
        # without a spike; without it, main holds only what was used twice (ARC's T2)
        for _ in range(2 if self.duel else 0):
            if n[WINDOW] <= target + 1:
                break
            self._move_head(WINDOW, PROBATION)
        main = PROBATION if n[PROBATION] else PROTECTED
        if not n[main]:
            return self._pop(WINDOW)
        if not n[WINDOW] or n[WINDOW] < target:
            return self._pop(main)
        if self.duel:  # the window's overflow duel; the tie keeps the incumbent
            est = self._sketch.estimate
            if est(self._crc[nxt[WINDOW] - k]) > est(self._crc[nxt[main] - k]):
                self._move_head(WINDOW, PROBATION)
                return self._pop(main)
        return self._pop(WINDOW)

    def _pop(self, q: int) -> int:
        self._n[q] -= 1
        return self._unlink_head(q)

    def check_invariants(self) -> None:
        super().check_invariants()
        for q in range(self.K):
            if len(self.queue(q)) != self._n[q]:
                raise InvariantError(f"queue {q} holds {len(self.queue(q))}, count {self._n[q]}")
        for b, w in enumerate(self._where):
            if w < self.K and self._crc[b] != crc32(self._hash[b]):
                raise InvariantError(f"block {b}'s crc does not match its hash")
            if w == PENDING and self._hash[b] is None:
                raise InvariantError(f"revived block {b} lost its hash")
        if self._tuner is not None:
            if self.cfg != self._tuner.bonus:
                raise InvariantError("the share in use is not the tuner's choice")
            self._tuner.check_invariants()
        self._sketch.check_invariants()
