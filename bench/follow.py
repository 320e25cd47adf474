"""bench/follow.py: a research eviction policy (not in the product) that follows the best
classic policy it can observe. bench.policies and bench.heldout report it as ``follow``.

Follow-the-leader over miniature simulations (docs/benchmarks.md "Trace replay").

What it does: a Panel runs one shadow cache per classic policy (LRU, ARC, S3-FIFO with both
move-to-main thresholds, W-TinyLFU, SIEVE, SLRU: the hash-keyed implementations of
bench/baselines.py) on a spatially sampled slice of the released content (SHARDS: a hash is
in the sample when its CRC-32 falls below a threshold; each shadow holds ``capacity * rate``
ids), and scores each with a decayed hit count. The live cache is run *as* the leading
expert: an instance of it at the pool's capacity is fed every release (when the sample is
the whole stream, that instance is the leader's shadow itself), and every id the expert
evicts marks its block an orphan. ``evict`` takes the oldest orphan, so the evictable set
converges to the expert's resident set; with no orphan (the expert holds every evictable
block) it takes the least recently released block.

Switching: the leader changes only when its decayed hits exceed the current expert's by more
than ``Z`` standard errors of a sign test over the accesses where the two disagree (plus an
effect bar when the live instance has to be rebuilt). A switch re-files the evictable blocks
by membership in the new expert; with a separate live instance, that instance is rebuilt
from the evictable blocks in release order (its ghosts and counts start empty).

Why it generalizes by construction: it has no parameter fitted to a workload shape beyond the
sample size and the switching test; on any trace it tracks whichever published policy does
best on that trace, so its target is the best expert, less the cost of learning and
switching.
"""

from __future__ import annotations

from array import array
from math import sqrt
from zlib import crc32

from bench.baselines import BASELINES, LRU, Baseline
from kvpool.core.eviction.base import PENDING, LinkedQueuesPolicy
from kvpool.errors import InvalidBlockError, InvariantError

EXPERTS: dict[str, type[Baseline]] = {"lru": LRU, **BASELINES}
ORPHAN, HELD = 0, 1  # queue 0: the expert evicted the content; queue 1: the expert holds it


class Panel:
    """Invariant: ``0 <= cur < len(shadows)``; ``score[i]`` is shadow i's prefix hits (see
    ``end``), halved every ``period`` sampled accesses; ``var[i]`` the (decayed) sum of squared
    per-request differences between shadow i's prefix hits and the current expert's
    (``var[cur] == 0``).

    Shadow caches of every expert on one sample of the accesses, and the leader among them."""

    Z = 1.0  # standard errors of the paired test a switch needs
    DECIDE = 64  # sampled accesses between decisions
    TURNS = 4  # halving period, in shadow turnovers

    def __init__(self, size: int, names: tuple[str, ...], effect: float) -> None:
        self.names = names
        self.shadows = [EXPERTS[n](size) for n in names]
        n = len(names)
        self.score = [0.0] * n
        self.var = [0.0] * n
        self.run = [0] * n  # per shadow: sampled hits since its last sampled miss
        self.mass = 0.0  # sampled accesses, decayed as the scores are
        self.cur = 0  # start as the first expert (LRU)
        self.period = max(self.TURNS * size, 1024)  # halving period, sampled accesses
        self.effect = effect  # extra hits (share of the sampled accesses) a switch must win by
        self.switches = 0
        self._left = self.period
        self._tick = self.DECIDE

    def access(self, key: bytes) -> bool:
        """Feed one sampled access to every shadow; True when the leader changed."""
        shadows, run = self.shadows, self.run
        for i, s in enumerate(shadows):
            run[i] = run[i] + 1 if key in s else 0
            s.access(key)
        self.mass += 1.0
        self._left -= 1
        if not self._left:
            self._left = self.period
            self.mass *= 0.5
            self.score = [x * 0.5 for x in self.score]
            self.var = [x * 0.5 for x in self.var]
        self._tick -= 1
        if self._tick:
            return False
        self._tick = self.DECIDE
        return self._decide()

    def end(self) -> None:
        """A request's head (depth 0) was released: its blocks came tail first, so each
        shadow's run of hits is the leading run it would have hit (its prefix hits)."""
        run, score, var = self.run, self.score, self.var
        rc = run[self.cur]
        for i, r in enumerate(run):
            if r:
                score[i] += r
                run[i] = 0
            if r != rc:
                var[i] += (r - rc) * (r - rc)

    def _decide(self) -> bool:
        score, var, cur = self.score, self.var, self.cur
        best = max(range(len(score)), key=score.__getitem__)
        gain = score[best] - score[cur]
        if best == cur or gain <= self.Z * sqrt(var[best]) + self.effect * self.mass:
            return False
        # squared differences to the new expert, bounded through the old one
        self.var = [0.0 if i == best else var[best] if i == cur else 2 * (v + var[best])
                    for i, v in enumerate(var)]
        self.cur = best
        self.switches += 1
        return True


class FollowPolicy(LinkedQueuesPolicy):
    """Invariant: an evictable block is in queue ORPHAN iff the live expert no longer holds
    its content (up to one block of lag), each queue in release order (``_stamp``
    non-decreasing head to tail); ``_blk`` maps the hash of every evictable or revived block
    to it (the latest such block, should content be duplicated).

        evict:  ORPHAN: [b7 b2 ...]   pop the oldest orphan,
                HELD:   [b4 b9 ...]   else the least recently released block
    """

    name = "follow"
    K = 2
    NAMES = ("lru", "arc", "s3fifo", "s3fifo1", "wtinylfu", "sieve", "slru")
    SHADOW = 16384  # ids per shadow at most; a pool this small is simulated whole
    EFFECT = 0.008  # switch bar (share of sampled accesses) when the live copy is rebuilt

    def __init__(self, capacity: int = 0) -> None:
        super().__init__(capacity)
        cap = max(capacity, 1)
        self._cap = cap
        size = min(cap, self.SHADOW)
        self._whole = size == cap  # the sample is the whole stream: live = leader's shadow
        self._threshold = (size << 32) // cap  # crc below this: sampled
        self.panel = Panel(size, self.NAMES, 0.0 if self._whole else self.EFFECT)
        self._stamp = array("q", bytes(8 * capacity))  # block -> release clock
        self._clock = 0
        self._blk: dict[bytes, int] = {}  # hash -> its evictable or revived block
        self.history: list[tuple[int, str]] = []  # (release clock, new leader) per switch
        self._expert: Baseline = (self.panel.shadows[0] if self._whole
                                  else EXPERTS[self.NAMES[0]](cap))
        self._expert.on_evict = self._evicted

    @property
    def leader(self) -> str:
        return self.panel.names[self.panel.cur]

    def _grow(self, block_id: int) -> None:
        super()._grow(block_id)
        self._stamp.frombytes(bytes(8 * (len(self._where) - len(self._stamp))))

    def _evicted(self, key: bytes) -> None:
        """The live expert evicted ``key``: its block (if evictable) becomes an orphan."""
        b = self._blk.get(key)
        if b is not None and self._where[b] == HELD:
            self._unlink(b)
            self._link(b, ORPHAN)

    def _link(self, b: int, q: int) -> None:
        self._link_after(b + self.K, self._prev[q])
        self._where[b] = q
        self._len += 1

    def insert(self, block_id: int, block_hash: bytes, depth: int, now: float) -> None:
        where = self._where
        if not 0 <= block_id < len(where):
            self._grow(block_id)
            where = self._where
        if where[block_id] < self.K:
            raise InvalidBlockError(f"block {block_id} is already evictable")
        old = self._hash[block_id]
        if old is not None and old != block_hash and self._blk.get(old) == block_id:
            del self._blk[old]  # a revived block that now holds other content
        memo = self._take_memo(block_hash) if self._memo is not None else None
        self._blk[block_hash] = block_id
        self._hash[block_id] = block_hash
        if memo is not None:  # NOTE(move): a defrag move keeps its place and is no access
            self._link_after(block_id + self.K, memo[2])
            self._where[block_id] = memo[1]
            self._len += 1
            self._stamp[block_id] = self._stamp[memo[3]]
            return
        self._clock += 1
        self._stamp[block_id] = self._clock
        self._access(block_hash)
        if depth == 0:
            self.panel.end()
        self._link(block_id, HELD if block_hash in self._expert else ORPHAN)

    def _access(self, key: bytes) -> None:
        panel = self.panel
        if self._whole:
            if panel.access(key):
                self._rebuild(panel.shadows[panel.cur])
            return
        if crc32(key) < self._threshold and panel.access(key):
            self._rebuild(EXPERTS[self.leader](self._cap))
        self._expert.access(key)

    def _rebuild(self, expert: Baseline) -> None:
        """Follow ``expert`` from now on: re-file every evictable block by its membership, in
        release order (a fresh live copy is first fed the blocks in that order)."""
        old = self._expert
        if "on_evict" in old.__dict__:
            del old.on_evict  # back to Baseline's no-op
        blocks = sorted(self.queue(ORPHAN) + self.queue(HELD), key=self._stamp.__getitem__)
        if not self._whole:
            for b in blocks:
                expert.access(self._hash[b])
        for b in blocks:
            self._unlink(b)
        self._expert = expert
        for b in blocks:
            self._link(b, HELD if self._hash[b] in expert else ORPHAN)
        expert.on_evict = self._evicted
        self.history.append((self._clock, self.leader))

    def remove(self, block_id: int) -> None:
        self._unlink(block_id)
        self._where[block_id] = PENDING  # keep the hash: its re-insert is an access

    def discard(self, block_id: int) -> None:
        h = self._hash[block_id] if 0 <= block_id < len(self._where) else None
        super().discard(block_id)
        if h is not None and self._blk.get(h) == block_id:
            del self._blk[h]

    def evict(self) -> int:
        if not self._len:
            raise IndexError("evict from an empty FollowPolicy")
        q = ORPHAN if self._next[ORPHAN] != ORPHAN else HELD
        h = self._hash[self._next[q] - self.K]
        b = self._unlink_head(q)
        if self._blk.get(h) == b:
            del self._blk[h]
        return b

    def check_invariants(self) -> None:
        super().check_invariants()
        for q in (ORPHAN, HELD):
            stamps = [self._stamp[b] for b in self.queue(q)]
            if stamps != sorted(stamps):
                raise InvariantError(f"queue {q} is not in release order")
        for h, b in self._blk.items():  # a duplicate of content maps its latest block only
            if self._hash[b] != h:
                raise InvariantError(f"hash {h!r} maps block {b}, which holds other content")
        if not 0 <= self.panel.cur < len(self.panel.shadows):
            raise InvariantError("leader index out of range")
