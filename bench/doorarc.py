"""bench/doorarc.py: a research eviction policy (not in the product; it lost more held-out
cells than classlru). bench.policies and bench.heldout report it beside ``ghostwin`` as
``doorarc``; it keeps the product's EvictionPolicy protocol, so ``simulate`` replays it.

DoorARC: ARC's ghost-adapted split between a recency and a frequency side, kept in time
(so that its neutral point is exactly LRU), with a TinyLFU doorkeeper and frequency classes.

What it does: each evictable block sits in one of six FIFO queues in release order (a release
is the block's last use, so each queue is an LRU list; ``_stamp`` is the release clock):

    R      (queue 0)      content not used recently: new, and neither a ghost nor seen before
    F k    (queue 1 + k)  content used again: a revival (a prefix hit on an evictable block),
                          a ghost (evicted within the last pool turnover), or content the
                          doorkeeper has seen before; k = the frequency class of its content's
                          recent use count (CLASS_OF_COUNT of a FrequencySketch, as classlru)

``evict`` takes the queue head with the smallest key: ``stamp`` for R, ``stamp + bias +
k * cbias`` for F k. Both biases start at 0, where the order is exactly LRU, and move as ARC
moves its target: a ghost of R that comes back lowers ``bias`` (R deserved more room), a ghost
of F raises it, by the ratio of the two ghost counts (at least 1) times STEP releases; within
F, ghosts of the low classes (0-1) against those of the high ones (2+) move ``cbias`` the same
way. Neither bias goes above the age of the oldest evictable block (anti-windup: beyond it the
order no longer changes, and a wound-up bias would be slow to come back when the workload
turns). Ghosts are a GhostFilter (doorarc_ghosts.py): one 32-bit slot per block.

The doorkeeper: the sketch remembers uses over many pool turnovers where the ghosts remember
one, so new content whose count says it was used before joins F (at its class) rather than R:
ARC with a longer memory, TinyLFU's admission of what recurs.

Why chains stay intact: a request's blocks are released tail first, so in each queue a child
sits ahead of its parent; a child is used at most as often as its parent (every use of the
child uses the parent), so its class is no higher, and a revival or ghost of a child implies
one of its parent: a parent's key is not below its child's (barring sketch and ghost-slot
collisions, which can rank a child above its parent).
"""

from __future__ import annotations

from array import array
from zlib import crc32

from bench.doorarc_ghosts import GhostFilter
from kvpool.core.eviction.base import PENDING, LinkedQueuesPolicy
from kvpool.core.eviction.classlru import CLASS_OF_COUNT
from kvpool.core.eviction.sketch import FrequencySketch
from kvpool.errors import InvariantError

R = 0  # queue 0; queue 1 + k is F's frequency class k
GHOST_OF_QUEUE = bytes([0, 1, 1, 2, 2, 2])  # ghost kind per queue: R, F low (0-1), F high (2+)


class DoorARCPolicy(LinkedQueuesPolicy):
    """Invariant: each queue is in release order (``_stamp``
    non-decreasing head to tail, none above ``_clock``); ``bias`` and ``cbias`` are >= 0.
    Every operation is O(1) (``evict`` compares six queue heads).

        evict: heads  R:   [b7 b2 ...]  key = stamp
                      F0:  [b4 ...]     key = stamp + bias
                      F1:  [b9 ...]     key = stamp + bias + 1 * cbias   -> pop the smallest
                      ...
                      F4:  [b1 ...]     key = stamp + bias + 4 * cbias

    ``depth`` and ``now`` are unused (release order already puts a child ahead of its parent).
    """

    name = "doorarc"
    K = 6  # R, then F's frequency classes 0..4
    STEP = 16.0  # releases a bias moves per ghost hit (times ARC's ghost-count ratio)
    SEEN = 2  # sketch estimate from which new content counts as used before (the doorkeeper)

    def __init__(self, capacity: int = 0, sketch_min_bits: int = 20) -> None:
        super().__init__(capacity)
        self._cap = max(capacity, 1)
        self.cbias = 0.0  # extra life per frequency class within F, in releases
        self.bias = 0.0  # F's extra life in releases (ARC's split, in time): 0 is LRU
        self._stamp = array("q", bytes(8 * capacity))  # block -> clock at its release
        self._clock = 0  # releases so far
        self._sketch = FrequencySketch(self._cap, sketch_min_bits)
        self._ghosts = GhostFilter(self._cap)

    def _grow(self, block_id: int) -> None:
        super()._grow(block_id)
        self._stamp.frombytes(bytes(8 * (len(self._where) - len(self._stamp))))

    def on_hit(self, block_hash: bytes) -> None:
        self._sketch.add(crc32(block_hash))

    def insert(self, block_id: int, block_hash: bytes, depth: int, now: float) -> None:
        w, memo = self._insert_start(block_id, block_hash)
        if memo is not None:  # NOTE(move): a defrag move keeps queue, stamp and place
            self._link_after(block_id + self.K, memo[2])
            self._stamp[block_id] = self._stamp[memo[3]]
            self._file(block_id, block_hash, memo[1])
            return
        if w == PENDING and self._hash[block_id] == block_hash:
            # a revival: on_hit counted the use
            q = 1 + CLASS_OF_COUNT[self._sketch.estimate(crc32(block_hash))]
        else:
            c = crc32(block_hash)
            est = self._sketch.add(c)
            g = self._ghosts.take(c)
            if g >= 0:
                self._adapt(g)
            q = 1 + CLASS_OF_COUNT[est] if g >= 0 or est >= self.SEEN else R
        self._clock += 1
        self._stamp[block_id] = self._clock
        node = block_id + self.K
        prev = self._prev
        last = prev[q]  # link at the tail of queue q
        prev[node] = last
        nxt = self._next
        nxt[node] = q
        nxt[last] = node
        prev[q] = node
        self._file(block_id, block_hash, q)

    def _file(self, block_id: int, block_hash: bytes, q: int) -> None:
        self._where[block_id] = q
        self._hash[block_id] = block_hash
        self._len += 1

    def _adapt(self, g: int) -> None:
        """ARC's move on a ghost hit from ghost queue ``g`` (R, F low, F high): R against F
        moves ``bias``, F's low classes against its high ones move ``cbias``. Neither goes
        beyond the age of the oldest evictable block: past that, R (or a lower class) goes
        first anyway, and a bias wound up further would only be slow to come back."""
        n = self._ghosts.count
        top = self._span()
        if g == 0:
            self.bias = max(0.0, min(top, self.bias) - self._step(n[1] + n[2], n[0]))
            return
        self.bias = min(top, self.bias + self._step(n[0], n[1] + n[2]))
        if g == 1:
            self.cbias = max(0.0, min(top, self.cbias) - self._step(n[2], n[1]))
        else:
            self.cbias = min(top, self.cbias + self._step(n[1], n[2]))

    def _step(self, other: int, mine: int) -> float:
        """ARC's step for a hit on a ghost list of ``mine`` entries against ``other``."""
        return self.STEP * (other / mine if other > mine > 0 else 1.0)

    def _span(self) -> float:
        """Releases since the oldest evictable block's release (0 when none is evictable)."""
        nxt, stamp, k = self._next, self._stamp, self.K
        oldest = self._clock
        for q in range(k):
            n = nxt[q]
            if n != q and stamp[n - k] < oldest:
                oldest = stamp[n - k]
        return float(self._clock - oldest)

    def remove(self, block_id: int) -> None:
        self._unlink(block_id)
        self._where[block_id] = PENDING  # keep the hash: a re-insert is a revival, not a use

    def evict(self) -> int:
        nxt, stamp, k = self._next, self._stamp, self.K
        bias, cb = self.bias, self.cbias
        best = -1
        key = 0.0
        for q in range(k):  # the queue head with the smallest key; ties go to R, then low F
            n = nxt[q]
            if n != q:
                s = stamp[n - k] + (bias + cb * (q - 1) if q else 0.0)
                if best < 0 or s < key:
                    best, key = q, s
        if best < 0:
            raise IndexError("evict from an empty DoorARCPolicy")
        return self._drop(best)

    def _drop(self, q: int) -> int:
        h = self._hash[self._next[q] - self.K]
        b = self._unlink_head(q)
        self._ghosts.add(crc32(h), GHOST_OF_QUEUE[q])
        return b

    def check_invariants(self) -> None:
        super().check_invariants()
        for q in range(self.K):
            stamps = [self._stamp[b] for b in self.queue(q)]
            if stamps != sorted(stamps) or any(s > self._clock for s in stamps):
                raise InvariantError("a queue is out of release order")
        if self.bias < 0.0 or self.cbias < 0.0:
            raise InvariantError(f"biases {self.bias}, {self.cbias} must be >= 0")
        self._ghosts.check_invariants()
        self._sketch.check_invariants()
