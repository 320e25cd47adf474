"""The eviction-policy protocol, the intrusive queue storage the policies share, and LRU (the
order vLLM's prefix cache evicts in: the block released longest ago goes first).

A block is *evictable* when its ref count is 0 but its KV content is still valid and indexed by
its content hash. The pool's PrefixIndex drives a policy with these calls::

    insert(b, h, depth, now)   b became evictable (ref 1 -> 0, content h cached)
    remove(b)                  b was revived by a prefix-cache hit (ref 0 -> 1)
    discard(b)                 b left the set for another reason (defrag move, undo): no access
    evict() -> b               the free list is empty: pick a victim, drop it, return its id
    on_hit(h)                  a prefix hit on content h, whether or not its block was evictable

Block ids are reused after eviction; the hash names the content and is stable across reuse.

Storage is intrusive and flat (no Python object per block): queues are doubly linked lists
threaded through two ``array('i')`` of node ids, so LRU holds 17 bytes per block where an
OrderedDict holds ~130: the pool's 64-bytes-per-block budget decided it::

    node index:  0 .. K-1          K, K+1, ...
                 queue sentinels   block 0, block 1, ...  (node = block_id + K)
    sentinel k:  _next[k] = head (oldest) of queue k, _prev[k] = tail (newest)
"""

from __future__ import annotations

import abc
from array import array
from typing import ClassVar
from zlib import crc32

from kvpool.core.eviction.sketch import FrequencySketch
from kvpool.errors import ConfigError, InvalidBlockError, InvariantError

ABSENT = 0xFF  # _where value: not in the evictable set
PENDING = 0xFE  # _where value: revived by remove(); its hash is kept until it is re-inserted


class EvictionPolicy(abc.ABC):
    """Invariant: a policy holds exactly the evictable blocks it was told about (inserted, not
    yet removed, discarded or evicted), and ``evict`` returns one of them. The interface the
    PrefixIndex drives; see the module docstring for when each call happens."""

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

    def evict_many(self, n: int) -> list[int]:
        """``n`` victims in the order ``n`` calls of ``evict`` would choose them (a prefill
        takes ~100s at once). IndexError, with nothing evicted, when fewer are evictable."""
        if not 0 <= n <= len(self):
            raise IndexError(f"evict {n} from a {self.name} policy of {len(self)}")
        evict = self.evict
        return [evict() for _ in range(n)]

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

    Storage shared by LRUPolicy and ClassLRUPolicy: ``K`` intrusive FIFO queues over block ids.
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

    def _insert_start(self, block_id: int, block_hash: bytes
                      ) -> tuple[int, tuple[bytes, int, int, int] | None]:
        """How a queue policy's insert begins: ``block_id``'s mark (ABSENT, or PENDING; the
        arrays grown for a new id) and the memo when this insert completes a defrag move
        (NOTE(move)), else None. InvalidBlockError when the block is already evictable.
        (LRUPolicy.insert and ClassLRUPolicy.insert, on every request's path, inline its
        common case.)"""
        where = self._where
        if not 0 <= block_id < len(where):
            self._grow(block_id)
            where = self._where
        w = where[block_id]
        if w < self.K:
            raise InvalidBlockError(f"block {block_id} is already evictable")
        return w, (self._take_memo(block_hash) if self._memo is not None else None)

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


class StampedQueuesPolicy(LinkedQueuesPolicy):
    """Invariant: LinkedQueuesPolicy's; ``_stamp`` covers every block id; each queue is in
    release order (stamps non-decreasing head to tail) and no stamp exceeds ``_clock``.

    The storage ClassLRUPolicy and AdaptivePolicy add to the queues: a release stamp per block
    (an internal clock of inserts, so ``_scale`` blocks of stamps are one pool turnover) and a
    FrequencySketch of uses keyed by the CRC-32 of the content hash, fed by every hit."""

    # NOTE(stamps): stamps are 4 bytes (the 40-byte budget per block, docs/eviction.md). When
    # the clock reaches STAMP_LIMIT, every stamp moves down by the oldest evictable block's, or
    # by ``clock - STAMP_KEEP`` when a block has been evictable longer than that: such blocks
    # all become stamp 0, the oldest. Once per ~2**31 inserts, O(pool).
    STAMP_LIMIT: ClassVar[int] = 1 << 31
    STAMP_KEEP: ClassVar[int] = 1 << 30

    def __init__(self, capacity: int = 0, sketch_min_bits: int = 20) -> None:
        super().__init__(capacity)
        self._scale = capacity if capacity > 0 else 1024  # pool blocks: one "turnover"
        self._stamp = array("I", bytes(4 * capacity))  # block -> clock at its release
        self._clock = 0  # inserts since the last rebase: the stamp source
        self._sketch = FrequencySketch(self._scale, sketch_min_bits)  # uses per hash, recent

    def _grow(self, block_id: int) -> None:
        super()._grow(block_id)
        self._stamp.frombytes(bytes(4 * (len(self._where) - len(self._stamp))))

    def check_invariants(self) -> None:
        super().check_invariants()
        for k in range(self.K):
            stamps = [self._stamp[b] for b in self.queue(k)]
            if stamps != sorted(stamps):
                raise InvariantError(f"queue {k} is not in release order")
            if any(s > self._clock for s in stamps):
                raise InvariantError(f"queue {k} has a stamp from the future")

    def _rebase(self) -> None:
        """NOTE(stamps): move every stamp and the clock down, keeping the order."""
        kk, nxt = self.K, self._next
        heads = [self._stamp[nxt[q] - kk] for q in range(kk) if nxt[q] != q]
        shift = max(min(heads, default=self._clock), self._clock - self.STAMP_KEEP)
        st = self._stamp
        for b, v in enumerate(st):
            st[b] = v - shift if v > shift else 0
        self._clock -= shift

    def on_hit(self, block_hash: bytes) -> None:
        self._sketch.add(crc32(block_hash))

    def _stamp_at_tail(self, block_id: int, block_hash: bytes, q: int) -> None:
        """How an insert of ClassLRUPolicy and AdaptivePolicy ends: ``block_id`` (content
        ``block_hash``) linked at the tail of queue ``q``, stamped with the next clock tick."""
        clock = self._clock = self._clock + 1
        if clock >= self.STAMP_LIMIT:  # NOTE(stamps)
            self._rebase()
            clock = self._clock
        node, prev, nxt = block_id + self.K, self._prev, self._next
        last = prev[q]  # link at the tail (inlined: the hot path)
        prev[node] = last
        nxt[node] = q
        nxt[last] = node
        prev[q] = node
        self._stamp[block_id] = clock
        self._where[block_id] = q
        self._hash[block_id] = block_hash
        self._len += 1

    def _insert_moved(self, block_id: int, block_hash: bytes, memo: tuple) -> int:
        """NOTE(move): a defrag move keeps queue, stamp and place; returns the queue."""
        _, q, pred, src = memo
        self._link_after(block_id + self.K, pred)
        self._stamp[block_id] = self._stamp[src]
        self._where[block_id] = q
        self._hash[block_id] = block_hash
        self._len += 1
        return q


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

    def evict_many(self, n: int) -> list[int]:
        """NOTE(speed): the ``n`` oldest in one walk from the head, relinked once (a prefill
        evicts ~100s of blocks; one ``evict`` call each cost 3x as much)."""
        if not 0 <= n <= self._len:
            raise IndexError(f"evict {n} from a {self.name} policy of {self._len}")
        nxt, where, hashes = self._next, self._where, self._hash
        out = []
        add = out.append
        node = nxt[0]
        for _ in range(n):
            b = node - 1
            where[b] = ABSENT
            hashes[b] = None
            add(b)
            node = nxt[node]
        nxt[0] = node
        self._prev[node] = 0
        self._len -= n
        return out
