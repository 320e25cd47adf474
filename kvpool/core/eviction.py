"""Eviction policies: which evictable cached block the prefix cache gives up first.

A block is *evictable* when its ref count is 0 but its KV content is still valid and indexed by
its content hash. The CachedBlockAllocator drives a policy with these calls::

    insert(b, h, depth, now)   b became evictable (ref 1 -> 0, content h cached)
    remove(b)                  b was revived by a prefix-cache hit (ref 0 -> 1)
    discard(b)                 b left the set for another reason (defrag move, undo): no access
    evict() -> b               the free list is empty: pick a victim, drop it, return its id
    on_hit(h)                  a prefix hit on content h, whether or not its block was evictable

Block ids are reused after eviction; the hash names the content and is stable across reuse.
Policies (``POLICIES``, ``make_policy``):

- ``lru``: evict the block that became evictable longest ago.
- ``classlru``: frequency classes with a self-tuned recency bonus (see ClassLRUPolicy).
- ``session``: retention planned per class of chain block and session (eviction_session.py).
- ``guarded``: ``session`` with finer classes, used only while it beats a shadow LRU
  (eviction_guarded.py).

Storage is intrusive and flat (no Python object per block): queues are doubly linked lists
threaded through two ``array('i')`` of node ids, so LRU holds 17 bytes per block (an OrderedDict
holds ~130, a list-of-ints linked list ~55) and ClassLRU ~36 at 1M blocks (stamps, an
8-counter-per-block sketch, ~3 MB of shadow caches). Array indexing costs ~60 ns more than list
indexing in CPython 3.11; the pool's 64-bytes-per-block budget decided it. Figures and
per-call costs: ``python -m bench.policies``.

    node index:  0 .. K-1          K, K+1, ...
                 queue sentinels   block 0, block 1, ...  (node = block_id + K)
    sentinel k:  _next[k] = head (oldest) of queue k, _prev[k] = tail (newest)
"""

from __future__ import annotations

import abc
from array import array
from collections.abc import Iterable, Sequence
from typing import ClassVar
from zlib import crc32

from kvpool.core.eviction_adaptive import BonusTuner, FrequencySketch
from kvpool.errors import ConfigError, InvalidBlockError, InvariantError

ABSENT = 0xFF  # _where value: not in the evictable set
PENDING = 0xFE  # _where value: revived by remove(); its hash is kept until it is re-inserted


class EvictionPolicy(abc.ABC):
    """Invariant: a policy holds exactly the evictable blocks it was told about (inserted, not
    yet removed, discarded or evicted), and ``evict`` returns one of them. The interface the
    CachedBlockAllocator drives; see the module docstring for when each call happens."""

    name: ClassVar[str]

    @abc.abstractmethod
    def insert(self, block_id: int, block_hash: bytes, depth: int, now: float) -> None:
        """``block_id`` became evictable; ``depth`` = index in its prefix chain (0 = first)."""

    @abc.abstractmethod
    def remove(self, block_id: int) -> None:
        """``block_id`` was revived by a prefix hit. KeyError if it is not evictable."""

    @abc.abstractmethod
    def discard(self, block_id: int) -> None:
        """``block_id`` left the set with no access to count. KeyError if it is not evictable."""

    @abc.abstractmethod
    def evict(self) -> int:
        """Choose a victim, remove it and return its id. IndexError when empty."""

    def on_hit(self, block_hash: bytes) -> None:  # noqa: B027 - a no-op by default
        """A prefix hit on ``block_hash`` (its block may or may not be evictable)."""

    @abc.abstractmethod
    def __len__(self) -> int: ...

    @abc.abstractmethod
    def __contains__(self, block_id: int) -> bool: ...

    @abc.abstractmethod
    def check_invariants(self) -> None:
        """Raise InvariantError (an AssertionError) on inconsistent state."""


class LinkedQueuesPolicy(EvictionPolicy):
    """Invariant: ``_where[b] == k < K`` iff node ``b + K`` is linked in queue ``k``; the queues
    are circular through their sentinels; ``_len`` counts linked blocks; ``_hash[b]`` is set for
    every linked (or PENDING) block and None otherwise.

    Shared storage of the policies below: ``K`` intrusive FIFO queues over block ids.
    """

    K: ClassVar[int] = 1

    def __init__(self, capacity: int = 0) -> None:
        if capacity < 0:
            raise ConfigError(f"capacity={capacity} must be >= 0 (the pool's block count)")
        links = array("i", range(self.K))  # an empty queue's sentinel links to itself
        links.frombytes(bytes(4 * capacity))  # block nodes: unlinked
        self._prev = links  # node -> previous node
        self._next = array("i", links)  # node -> next node
        self._where = bytearray(b"\xff") * capacity  # block -> queue index, ABSENT or PENDING
        self._hash: list[bytes | None] = [None] * capacity  # block -> its content hash
        self._len = 0  # linked blocks
        # NOTE(move): defrag calls discard(src) then insert(dst, same hash); the memo lets the
        # insert take src's place in its queue instead of counting as a fresh release.
        self._memo: tuple[bytes, int, int, int] | None = None  # (hash, queue, pred node, src)

    def _grow(self, block_id: int) -> None:
        if block_id < 0:
            raise InvalidBlockError(f"block id {block_id} is negative")
        old = len(self._where)
        new = max(block_id + 1, 2 * old, 64)
        self._prev.frombytes(bytes(4 * (new - old)))
        self._next.frombytes(bytes(4 * (new - old)))
        self._where.extend(b"\xff" * (new - old))
        self._hash.extend([None] * (new - old))

    def _link_after(self, node: int, pred: int) -> None:
        nxt = self._next
        succ = nxt[pred]
        self._prev[node] = pred
        nxt[node] = succ
        nxt[pred] = node
        self._prev[succ] = node

    def _unlink(self, block_id: int) -> int:
        """Unlink a member; returns its queue. KeyError if it is not evictable."""
        where = self._where
        if not 0 <= block_id < len(where) or where[block_id] >= self.K:
            raise KeyError(block_id)
        node = block_id + self.K
        p = self._prev[node]
        n = self._next[node]
        self._next[p] = n
        self._prev[n] = p
        q = where[block_id]
        where[block_id] = ABSENT
        self._len -= 1
        return q

    def _unlink_head(self, q: int) -> int:
        node = self._next[q]
        n = self._next[node]
        self._next[q] = n
        self._prev[n] = q
        b = node - self.K
        self._where[b] = ABSENT
        self._hash[b] = None
        self._len -= 1
        return b

    def discard(self, block_id: int) -> None:
        pred = self._prev[block_id + self.K] if 0 <= block_id < len(self._where) else 0
        q = self._unlink(block_id)
        self._memo = (self._hash[block_id], q, pred, block_id)
        self._hash[block_id] = None

    def _take_memo(self, block_hash: bytes) -> tuple[bytes, int, int, int] | None:
        """The memo if this insert completes a move (same hash as the last discard) and the
        predecessor is still where it was; else None (a plain insert)."""
        memo = self._memo
        self._memo = None
        if memo is None or memo[0] != block_hash:
            return None
        q, pred = memo[1], memo[2]
        if pred == q or (pred >= self.K and self._where[pred - self.K] == q):
            return memo
        return None

    def __len__(self) -> int:
        return self._len

    def __contains__(self, block_id: object) -> bool:
        where = self._where
        return isinstance(block_id, int) and 0 <= block_id < len(where) and where[block_id] < self.K

    def queue(self, q: int = 0) -> list[int]:
        """Block ids of queue ``q``, oldest first (a copy; for tests and debugging)."""
        out, node, nxt, k = [], self._next[q], self._next, self.K
        while node != q:
            out.append(node - k)
            node = nxt[node]
        return out

    def check_invariants(self) -> None:
        k, where, prev, nxt = self.K, self._where, self._prev, self._next
        seen = 0
        for q in range(k):
            node, steps = q, 0
            while True:
                n = nxt[node]
                if prev[n] != node:
                    raise InvariantError(f"queue {q}: link {node}->{n} is not mirrored")
                if n == q:
                    break
                if n < k or where[n - k] != q:
                    raise InvariantError(f"queue {q} links node {n} whose block says "
                                         f"{where[n - k] if n >= k else 'sentinel'}")
                if self._hash[n - k] is None:
                    raise InvariantError(f"evictable block {n - k} has no hash")
                node, steps = n, steps + 1
                if steps > len(where):
                    raise InvariantError(f"queue {q} has a cycle")
            seen += steps
        members = sum(1 for w in where if w < k)
        if seen != members or seen != self._len:
            raise InvariantError(f"{seen} linked, {members} marked, len says {self._len}")
        for b, w in enumerate(where):
            if w == ABSENT and self._hash[b] is not None:
                raise InvariantError(f"block {b} is not evictable but keeps a hash")


class LRUPolicy(LinkedQueuesPolicy):
    """Invariant: one queue holds the evictable blocks in the order they became evictable (a
    defrag move keeps its place); ``evict`` pops its head, the least recently released block.
    Every operation is O(1)."""

    name = "lru"

    def insert(self, block_id: int, block_hash: bytes, depth: int, now: float) -> None:
        where = self._where
        if not 0 <= block_id < len(where):
            self._grow(block_id)
            where = self._where
        if where[block_id] == 0:
            raise InvalidBlockError(f"block {block_id} is already evictable")
        node = block_id + 1
        memo = self._take_memo(block_hash) if self._memo is not None else None
        if memo is None:  # link at the tail of queue 0 (inlined: the hot path)
            prev = self._prev
            last = prev[0]
            prev[node] = last
            self._next[node] = 0
            self._next[last] = node
            prev[0] = node
        else:
            self._link_after(node, memo[2])
        where[block_id] = 0
        self._hash[block_id] = block_hash
        self._len += 1

    def remove(self, block_id: int) -> None:
        self._unlink(block_id)
        self._hash[block_id] = None

    def evict(self) -> int:
        if not self._len:
            raise IndexError("evict from an empty LRUPolicy")
        return self._unlink_head(0)


# Frequency class of a sketch estimate: 0-1 uses -> 0, 2 -> 1, 3-4 -> 2, 5+ -> 3.
_CLASS = bytes(0 if c <= 1 else min((c - 1).bit_length(), 3) for c in range(256))


class ClassLRUPolicy(LinkedQueuesPolicy):
    """Invariant: queue ``k`` holds the evictable blocks whose content was used about ``2**k``
    times recently (k=0: once, 1: twice, 2: 3-4, 3: 5+; a FrequencySketch keyed by hash counts
    uses across eviction and block reuse), each queue in release order (``_stamp``
    non-decreasing head to tail). ``evict`` takes the queue head with the smallest
    ``stamp + k * bonus * capacity`` (stamps count releases, so ``bonus`` is in pool
    turnovers): a class-k block outlives once-used blocks released up to ``k * bonus``
    turnovers after it. ``bonus == 0`` is exactly LRU. (Frequency-classed LRU with a
    self-tuned recency bonus; every operation O(1) amortized.)

    Why it is safe for prefix chains: a block's prefix is used at least as often as the block,
    so ancestors sit in the same or a higher class and a chain is still evicted tail first.
    Why it adapts: the best bonus depends on the workload (protecting frequent content wins on
    scans and popular shared prefixes, loses on memoryless reuse), so a BonusTuner simulates
    candidate bonuses on sampled shadow caches and switches on significant evidence only.
    ``depth`` and ``now`` are unused: an internal operation clock orders releases.

        evict: heads   q0: [b7 b2 ...]  key = stamp
                       q1: [b4 ...]     key = stamp + 1*bonus*capacity
                       q2: [b9 ...]     key = stamp + 2*bonus*capacity   -> pop the smallest
                       q3: []
    """

    name = "classlru"
    K = 4

    def __init__(self, capacity: int = 0, sketch_min_bits: int = 20) -> None:
        super().__init__(capacity)
        scale = capacity if capacity > 0 else 1024  # pool blocks: one "turnover" of stamps
        self._scale = scale
        self._stamp = array("q", bytes(8 * capacity))  # block -> clock at its release
        self._clock = 0  # inserts so far: the stamp source
        sk = self._sketch = FrequencySketch(scale, sketch_min_bits)  # uses per hash, recent
        self._table = sk.table  # sk's counters (halved in place, so this alias stays valid)
        self._mask = (1 << sk.bits) - 1  # probe row 1 = crc & mask
        self._jshift = 32 - sk.bits  # probe row 2 = (crc * GOLDEN32 mod 2**32) >> jshift
        self._tuner = BonusTuner(scale, self.K)  # picks the bonus
        self._w1 = self._w2 = self._w3 = 0.0  # eviction-key bonus of queues 1..3
        self._hit = (None, 0, 0, 0)  # (hash, i, j, crc) of the last on_hit: its revival follows
        self._set_bonus()

    def _set_bonus(self) -> None:
        w = self._tuner.bonus * self._scale
        self._w1, self._w2, self._w3 = w, 2 * w, 3 * w

    @property
    def bonus(self) -> float:
        """The bonus per class in use, in pool turnovers (0 = LRU)."""
        return self._tuner.bonus

    def _grow(self, block_id: int) -> None:
        super()._grow(block_id)
        self._stamp.frombytes(bytes(8 * (len(self._where) - len(self._stamp))))

    def on_hit(self, block_hash: bytes) -> None:
        c = crc32(block_hash)  # NOTE(inline): probe() and FrequencySketch.add, hot path
        i = c & self._mask
        j = ((c * 0x9E3779B1) & 0xFFFFFFFF) >> self._jshift
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

    def insert(self, block_id: int, block_hash: bytes, depth: int, now: float) -> None:
        where = self._where
        if not 0 <= block_id < len(where):
            self._grow(block_id)
            where = self._where
        w = where[block_id]
        if w < 4:
            raise InvalidBlockError(f"block {block_id} is already evictable")
        if self._memo is not None:
            memo = self._take_memo(block_hash)
            if memo is not None:  # NOTE(move): a defrag move keeps class, stamp and place
                _, q, pred, src = memo
                self._link_after(block_id + 4, pred)
                self._stamp[block_id] = self._stamp[src]
                where[block_id] = q
                self._hash[block_id] = block_hash
                self._len += 1
                return
        t = self._table
        if w == PENDING and self._hash[block_id] == block_hash:  # revived: on_hit counted it
            hit = self._hit
            if hit[0] is block_hash:
                _, i, j, c = hit
            else:
                c = crc32(block_hash)
                i = c & self._mask
                j = ((c * 0x9E3779B1) & 0xFFFFFFFF) >> self._jshift
            a = t[i]
            b = t[j]
            k = _CLASS[a if a < b else b]
        else:  # a new use: count it (NOTE(inline): FrequencySketch.add)
            c = crc32(block_hash)
            i = c & self._mask
            j = ((c * 0x9E3779B1) & 0xFFFFFFFF) >> self._jshift
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
            k = _CLASS[m]
        clock = self._clock + 1
        self._clock = clock
        node = block_id + 4
        prev = self._prev
        last = prev[k]
        prev[node] = last
        nxt = self._next
        nxt[node] = k
        nxt[last] = node
        prev[k] = node
        self._stamp[block_id] = clock
        where[block_id] = k
        self._hash[block_id] = block_hash
        self._len += 1
        if (c >> 12) < self._tuner.threshold and self._tuner.access(block_hash, k):
            self._set_bonus()

    def remove(self, block_id: int) -> None:
        self._unlink(block_id)
        self._where[block_id] = PENDING  # keep the hash: a re-insert is a revival, not a use

    def evict(self) -> int:
        nxt = self._next
        stamp = self._stamp
        # the queue head with the smallest stamp + k * bonus; ties go to the lower class
        best = -1
        n = nxt[0]
        if n:
            best, key = 0, stamp[n - 4]
        n = nxt[1]
        if n != 1:
            s = stamp[n - 4] + self._w1
            if best < 0 or s < key:
                best, key = 1, s
        n = nxt[2]
        if n != 2:
            s = stamp[n - 4] + self._w2
            if best < 0 or s < key:
                best, key = 2, s
        n = nxt[3]
        if n != 3:
            s = stamp[n - 4] + self._w3
            if best < 0 or s < key:
                best = 3
        if best < 0:
            raise IndexError("evict from an empty ClassLRUPolicy")
        return self._unlink_head(best)

    def check_invariants(self) -> None:
        super().check_invariants()
        for k in range(self.K):
            stamps = [self._stamp[b] for b in self.queue(k)]
            if stamps != sorted(stamps):
                raise InvariantError(f"queue {k} is not in release order")
            if any(s > self._clock for s in stamps):
                raise InvariantError(f"queue {k} has a stamp from the future")
        for b, w in enumerate(self._where):
            if w == PENDING and self._hash[b] is None:
                raise InvariantError(f"revived block {b} lost its hash")
        w = self._tuner.bonus * self._scale
        if (self._w1, self._w2, self._w3) != (w, 2 * w, 3 * w):
            raise InvariantError("eviction-key bonuses do not match the tuner's choice")
        if self._table is not self._sketch.table:
            raise InvariantError("the sketch table alias went stale")
        self._sketch.check_invariants()
        self._tuner.check_invariants()


def simulate(requests: Iterable[Sequence[int]], policy: EvictionPolicy,
             capacity: int) -> tuple[int, int]:
    """Replay prefix-cache requests through ``policy`` alone; returns (hits, blocks).

    The semantics of ``kvpool replay --instant`` (and ``../shared/anchors/trace_hits.py``): a
    request hits the leading run of its hash ids that are cached; then, tail first, each id is
    touched (cached: on_hit, remove, insert) or brought in (a free block id while any of the
    ``capacity`` ids remain, else ``policy.evict()``). ``now`` counts block operations.
    """
    where: dict[int, int] = {}  # hash id -> block
    if capacity < 1:
        raise ValueError(f"capacity={capacity}: the replay needs at least one block")
    owner: list[int] = [0] * capacity  # block -> hash id
    free = list(range(capacity - 1, -1, -1))
    on_hit, remove, insert, evict = policy.on_hit, policy.remove, policy.insert, policy.evict
    hits = blocks = t = 0
    for ids in requests:
        n = len(ids)
        k = 0
        while k < n and ids[k] in where:
            k += 1
        hits += k
        blocks += n
        for d in range(n - 1, -1, -1):
            h = ids[d]
            key = h.to_bytes(8, "little")
            b = where.get(h)
            if b is not None:
                on_hit(key)
                remove(b)
            else:
                if free:
                    b = free.pop()
                else:
                    b = evict()
                    del where[owner[b]]
                where[h] = b
                owner[b] = h
            insert(b, key, d, float(t))
            t += 1
    return hits, blocks


from kvpool.core.eviction_session import SessionPolicy  # noqa: E402 (builds on the above)
from kvpool.core.eviction_guarded import GuardedPolicy  # noqa: E402 (builds on the above)
POLICIES: dict[str, type[EvictionPolicy]] = {
    p.name: p for p in (LRUPolicy, ClassLRUPolicy, SessionPolicy, GuardedPolicy)}


def make_policy(name: str, capacity: int) -> EvictionPolicy:
    """A new policy by name for a pool of ``capacity`` blocks. ConfigError (a ValueError) names
    the valid choices when ``name`` is unknown."""
    cls = POLICIES.get(name) if isinstance(name, str) else None
    if cls is None:
        raise ConfigError(f"eviction policy {name!r} is unknown: use one of "
                          f"{', '.join(sorted(POLICIES))}")
    return cls(capacity)
