"""``session``: retention planned per class of chain block, from observed reuse statistics.

A request's blocks reach the policy as one *run*: ``insert`` for depth n-1, n-2, ..., 0 in a
row (the allocator frees a sequence tail first). The policy groups each run, names its
*session* by the hash at depth 1 (block 0 is typically a prefix shared by everyone; the block
after it identifies the conversation or document), and keeps a bounded table of sessions (about
capacity / 2 slots, at least 4096; a collision forgets the older one): how often each came back
and its mean time between turns. When the run is complete each block is filed in one of 20
classes, session class * 5 + block level::

    session class  0 new (first turn seen)           level  0 the run's first block (its tail)
                   1 back, mean gap <= 1 turnover           1..4 content used 1, 2, 3-4, 5+
                   2 back, mean gap <= 4 turnovers               times (FrequencySketch)
                   3 back, mean gap > 4 turnovers

Class ``q`` is a FIFO queue in release order; ``evict`` pops the head with the smallest
``stamp + R[q]``: a block of class q is kept about ``R[q]`` operations after its release (a
*retention*), longer when the pool has room. ``R`` comes from a RetentionPlanner, which follows
a sample of block hashes through their reuses, estimates per class the hazard of reuse at each
age (exposure-weighted, so reuses that have not happened yet bias nothing), and gives the
pool's capacity to the classes and retentions with the most reuses per block-operation of
occupancy (concave hulls, filled greedily: a knapsack over retention curves). Reuse is mostly
all-or-nothing per conversation turn, so a class whose reuse comes late can be worth keeping
long while another is better dropped at once; LRU keeps everything for one equal time.

Chains stay intact: a block's ancestors have at least its use count and are never the run's
tail, so the planner pools adjacent levels (pool-adjacent-violators) until retention is
non-decreasing in the level within each session class; in a run the ancestors are released
after their descendants, so a chain is still evicted tail first. Every call is O(1) amortized:
the planner accounts once per max(256, capacity / 16) operations and plans (numpy, ~2 ms) at
most once per 2048. Until its first plan every class has R = 0, which is exactly LRU.

Pending blocks (a run not finished yet) sit in queue ``PEND`` and are evicted only when no
class holds a block. A run cut short (the next insert is not one level up) is filed as a new
session's.

For subclasses: the class layout (``NS``, ``NL``, ``LEVEL``) and ``session_class`` may be
redefined, and a PlanGuard (``_guard``, fed the releases of hashes below ``_gthr``) decides
whether the plan is in force (``in_force``); ``session`` itself has no guard.
eviction_guarded.py does both.
"""

from __future__ import annotations

import heapq
from array import array
from typing import ClassVar
from zlib import crc32

from kvpool.core.eviction import _CLASS, ABSENT, PENDING, LinkedQueuesPolicy
from kvpool.core.eviction_adaptive import GOLDEN32, FrequencySketch, RetentionPlanner
from kvpool.core.eviction_guard import PlanGuard
from kvpool.errors import InvalidBlockError, InvariantError

NS = 4  # session classes
NL = 5  # block levels
NC = NS * NL  # planned classes (queues 0 .. NC-1)
PEND = NC  # the queue of the unfinished run
_K = NC + 1  # queues, i.e. SessionPolicy.K
SAMPLED = 0x80  # _feat flag: the planner follows this block's hash
HALF = 0x40  # _feat flag: ... in its second half (see RetentionPlanner)
GUARD = 0x20  # _feat flag: ... and a PlanGuard's shadows are fed it (a subclass's option)


class SessionPolicy(LinkedQueuesPolicy):
    """Invariant: queue ``q < NC`` holds the evictable blocks filed in class q in release
    order (``_stamp`` non-decreasing head to tail); queue PEND holds the blocks of the run in
    progress; for every non-empty class the heap has an entry ``(key, q)`` with key <= the
    true key ``stamp[head] + R[q]`` of its head (stale entries are repaired as they surface).

    See the module docstring. ``now`` is unused: an operation clock (every insert) stamps
    releases and measures retention.
    """

    name = "session"
    K = _K
    NS: ClassVar[int] = NS  # session classes (a subclass may file runs differently)
    NL: ClassVar[int] = NL  # block levels (at most 8: ``_feat & 7``)
    LEVEL: ClassVar[bytes] = bytes(1 + c for c in _CLASS)  # level of a non-tail block by its
    # use count estimate (level 0 is the run's tail)

    def __init__(self, capacity: int = 0, sketch_min_bits: int = 20, sample: int = 4096,
                 period: int | None = None) -> None:
        super().__init__(capacity)
        scale = capacity if capacity > 0 else 1024
        self._scale = scale
        self._stamp = array("q", bytes(8 * capacity))  # block -> clock at its release
        self._feat = bytearray(capacity)  # block -> level, | SAMPLED if followed
        self._clock = 0
        sk = self._sketch = FrequencySketch(scale, sketch_min_bits)
        self._table = sk.table
        self._mask = (1 << sk.bits) - 1
        self._jshift = 32 - sk.bits
        self._hit: tuple = (None, 0, 0, 0)  # (hash, i, j, crc) of the last on_hit
        pl = self._planner = RetentionPlanner(scale, self.NS, self.NL, sample, period)
        self._thr = pl.thr
        self._due = pl.P  # clock of the next planning period
        self._R = list(pl.R)
        self._guard: PlanGuard | None = None  # none here; see eviction_guarded.py
        self._gthr = 0  # hashes with crc >> 12 below this feed the guard
        self._heap: list[tuple[float, int]] = []
        self._rdepth = -2  # depth of the last insert (a run continues at depth - 1)
        self._rlen = 0  # blocks of the run in progress (its first depth + 1)
        self._rsc = 0  # session class of the run in progress, once known
        bits = max(12, (scale - 1).bit_length() - 1)  # ~capacity / 2 sessions, >= 4096
        self._smask = (1 << bits) - 1
        self._s_tag = array("I", bytes(4 << bits))  # slot -> crc of the session key
        self._s_cnt = array("I", bytes(4 << bits))  # slot -> turns seen (0: empty)
        self._s_first = array("q", bytes(8 << bits))  # slot -> clock of its first turn

    @property
    def retention(self) -> list[float]:
        """The planned retention per class, in pool turnovers."""
        return [r / self._scale for r in self._R]

    def _grow(self, block_id: int) -> None:
        super()._grow(block_id)
        n = len(self._where)
        self._stamp.frombytes(bytes(8 * (n - len(self._stamp))))
        self._feat.extend(bytes(n - len(self._feat)))

    def on_hit(self, block_hash: bytes) -> None:
        c = crc32(block_hash)  # NOTE(inline): FrequencySketch.add
        i = c & self._mask
        j = ((c * GOLDEN32) & 0xFFFFFFFF) >> self._jshift
        t = self._table
        a = t[i]
        b = t[j]
        m = a if a < b else b
        if m < 15:
            m += 1
            if a < m:
                t[i] = m
            if b < m:
                t[j] = m
        sk = self._sketch
        sk.left -= 1
        if not sk.left:
            sk.halve()
        self._hit = (block_hash, i, j, c)

    def session_turn(self, key: bytes) -> float | None:
        """Count a turn of the session named ``key``: its mean gap between turns so far (in
        operations), or None when the session is new (or its slot went to a colliding one)."""
        c = crc32(key)
        i = c & self._smask
        cnt = self._s_cnt[i]
        clock = self._clock
        if cnt and self._s_tag[i] == c:
            self._s_cnt[i] = cnt + 1
            return (clock - self._s_first[i]) / cnt
        self._s_tag[i] = c  # new, or a colliding older session is forgotten
        self._s_cnt[i] = 1
        self._s_first[i] = clock
        return None

    def session_class(self, key: bytes) -> int:
        """Count a turn of the session named ``key``; its class (see the module docstring)."""
        mg = self.session_turn(key)
        if mg is None:
            return 0
        cap = self._scale
        return 1 if mg <= cap else (2 if mg <= 4 * cap else 3)

    def _file(self, sc: int) -> None:
        """The run is complete (session class ``sc``): move its blocks to their classes."""
        nxt, prev, feat, stamp = self._next, self._prev, self._feat, self._stamp
        where, R, heap, K = self._where, self._R, self._heap, self.K
        pend = K - 1
        nc = pend
        base = sc * self.NL
        n = nxt[pend]
        nxt[pend] = pend
        prev[pend] = pend
        touch = self._planner.touch
        flip = False
        while n != pend:
            succ = nxt[n]
            b = n - K
            f = feat[b]
            q = base + (f & 7)
            last = prev[q]
            if last == q:
                heapq.heappush(heap, (stamp[b] + R[q], q))
            prev[n] = last
            nxt[n] = q
            nxt[last] = n
            prev[q] = n
            where[b] = q
            if f & SAMPLED:
                touch(self._hash[b], q + nc if f & HALF else q, stamp[b])
                if f & GUARD and self._guard.access(self._hash[b], q, stamp[b]):
                    flip = True
            n = succ
        if flip:  # the guard changed its mind: the retentions in force change
            self._apply(self._planner.R)

    def insert(self, block_id: int, block_hash: bytes, depth: int, now: float) -> None:
        where = self._where
        if not 0 <= block_id < len(where):
            self._grow(block_id)
            where = self._where
        w = where[block_id]
        pend = self.K - 1
        if w <= pend:
            raise InvalidBlockError(f"block {block_id} is already evictable")
        if self._memo is not None:
            memo = self._take_memo(block_hash)
            if memo is not None:  # NOTE(move): a defrag move keeps class, stamp and place
                _, q, pred, src = memo
                self._link_after(block_id + self.K, pred)
                self._stamp[block_id] = self._stamp[src]
                self._feat[block_id] = self._feat[src]
                where[block_id] = q
                self._hash[block_id] = block_hash
                self._len += 1
                if pred == q and q < pend:  # the new head may key lower
                    heapq.heappush(self._heap, (self._stamp[block_id] + self._R[q], q))
                return
        t = self._table
        if w == PENDING and self._hash[block_id] == block_hash:  # revived: on_hit counted it
            hit = self._hit
            if hit[0] is block_hash:
                _, i, j, c = hit
            else:
                c = crc32(block_hash)
                i = c & self._mask
                j = ((c * GOLDEN32) & 0xFFFFFFFF) >> self._jshift
            a = t[i]
            b = t[j]
            m = a if a < b else b
        else:  # a new use (NOTE(inline): FrequencySketch.add)
            c = crc32(block_hash)
            i = c & self._mask
            j = ((c * GOLDEN32) & 0xFFFFFFFF) >> self._jshift
            a = t[i]
            b = t[j]
            m = a if a < b else b
            if m < 15:
                m += 1
                if a < m:
                    t[i] = m
                if b < m:
                    t[j] = m
            sk = self._sketch
            sk.left -= 1
            if not sk.left:
                sk.halve()
        clock = self._clock = self._clock + 1
        if clock >= self._due:
            self._replan()
        cont = depth == self._rdepth - 1
        if not cont:
            if self._prev[pend] != pend:
                self._file(0)  # an unfinished run: its session stays unknown
            self._rlen = depth + 1
        self._rdepth = depth
        lvl = self.LEVEL[m] if cont or depth == 0 else 0
        if (c >> 12) < self._thr:
            lvl |= SAMPLED | (c >> 5) & HALF
            if (c >> 12) < self._gthr:
                lvl |= GUARD
        self._feat[block_id] = lvl
        self._stamp[block_id] = clock
        self._hash[block_id] = block_hash
        self._len += 1
        node = block_id + pend + 1  # link at the tail of PEND
        prev = self._prev
        last = prev[pend]
        prev[node] = last
        nxt = self._next
        nxt[node] = pend
        nxt[last] = node
        prev[pend] = node
        where[block_id] = pend
        if depth <= 1:
            if depth == 1 or not cont:
                self._rsc = self.session_class(block_hash)
            self._file(self._rsc)

    def _replan(self) -> None:
        pl = self._planner
        self._due += pl.P
        r = pl.tick()
        if r is not None:
            self._apply(r)

    def in_force(self, plan: list[float]) -> list[float]:
        """The retentions used for the planner's ``plan``: the plan itself, or with a guard
        that prefers LRU, every class 0."""
        if self._guard is None or self._guard.use_plan:
            return plan
        return [0.0] * len(plan)

    def _apply(self, plan: list[float]) -> None:
        r = self.in_force(plan)
        if r != self._R:
            self._R = list(r)
            nxt, st, K = self._next, self._stamp, self.K
            self._heap = [(st[nxt[q] - K] + r[q], q) for q in range(K - 1) if nxt[q] != q]
            heapq.heapify(self._heap)

    def remove(self, block_id: int) -> None:
        self._unlink(block_id)
        self._where[block_id] = PENDING  # keep the hash: a re-insert is a revival, not a use

    def evict(self) -> int:
        heap = self._heap
        nxt, stamp, R, K = self._next, self._stamp, self._R, self.K
        while heap:
            key, q = heap[0]
            n = nxt[q]
            if n == q:
                heapq.heappop(heap)
                continue
            true = stamp[n - K] + R[q]
            if true != key:  # stale: the head moved on since this entry was made
                heapq.heapreplace(heap, (true, q))
                continue
            succ = nxt[n]  # NOTE(inline): _unlink_head(q)
            nxt[q] = succ
            self._prev[succ] = q
            b = n - K
            self._where[b] = ABSENT
            self._hash[b] = None
            self._len -= 1
            if succ != q:
                heapq.heapreplace(heap, (stamp[succ - K] + R[q], q))
            else:
                heapq.heappop(heap)
            return b
        if nxt[K - 1] != K - 1:
            return self._unlink_head(K - 1)
        raise IndexError("evict from an empty SessionPolicy")

    def check_invariants(self) -> None:
        super().check_invariants()
        best: dict[int, float] = {}
        for key, q in self._heap:
            best[q] = min(key, best.get(q, key))
        nl = self.NL
        if self.K != self.NS * nl + 1 or not 1 <= nl <= 8:
            raise InvariantError(f"K={self.K} does not fit NS={self.NS} x NL={nl} + 1")
        for q in range(self.K - 1):
            blocks = self.queue(q)
            stamps = [self._stamp[b] for b in blocks]
            if stamps != sorted(stamps) or any(s > self._clock for s in stamps):
                raise InvariantError(f"class {q} is not in release order")
            if any((self._feat[b] & 7) != q % nl for b in blocks):
                raise InvariantError(f"class {q} holds a block of another level")
            if blocks and not best.get(q, float("inf")) <= stamps[0] + self._R[q]:
                raise InvariantError(f"class {q} has no heap entry at or below its head key")
        for b, w in enumerate(self._where):
            if w == PENDING and self._hash[b] is None:
                raise InvariantError(f"revived block {b} lost its hash")
        if self._R != self.in_force(self._planner.R) and self._planner.plans:
            raise InvariantError("retention differs from the planner's")
        if self._guard is not None:
            if self._gthr > self._thr:
                raise InvariantError("the guard's sample is not within the planner's")
            self._guard.check_invariants()
        if self._table is not self._sketch.table:
            raise InvariantError("the sketch table alias went stale")
        self._sketch.check_invariants()
        self._planner.check_invariants()
