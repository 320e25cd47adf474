"""Per-device block pools: the uncached allocator (free list pop / append).

Concurrency (DESIGN.md, layers 0 and 1)::

    layer 0  free list: array('i') whose pop() / append() / extend() are single C calls, atomic
             under the GIL; readers (stats) never take a lock, they read under the seqlock
             version ``_seq`` (odd while a writer is inside, bumped on entry and exit).
    layer 1  ``lock``: one per pool, held for one batched mutation (allocate many, free many,
             evict), never across I/O, a copy or an await.

Every public mutator takes ``lock`` once and bumps ``_seq`` around its body. Methods whose names
start with ``_`` assume the caller already did both (the BlockSpaceManager batches many of them
under one acquisition).

Metadata is struct-of-arrays, not one object per block, so a million-block pool costs ~33 bytes
per block::

    _free      array('i')   4 B   ids with no content, LIFO (pop() yields low ids first)
    _ref       list[int]    8 B   ref counts (small ints are shared objects)
    _hash      list         8 B   content hash when cached (CachedBlockAllocator), else None
    _last      array('d')   8 B   last time released to the evictable set, -1.0 = never
    _depth     array('i')   4 B   index in its prefix chain when hashed
    _computed  bytearray    1 B   KV bytes written
"""

from __future__ import annotations

import threading
import time
from array import array
from collections import Counter
from collections.abc import Iterable, Sequence

from kvpool.core.block import Block, Device, PoolStats
from kvpool.errors import DoubleFreeError, InvalidBlockError, InvariantError


class UncachedBlockAllocator:
    """A pool of ``num_blocks`` blocks on one device, without content sharing.

    Invariant: every id in ``[0, num_blocks)`` is on the free list with ref 0, or has ref >= 1
    (used); ``_num_used`` counts the used ones; no id is on the free list twice.
    """

    caching = False

    def __init__(self, device: Device, num_blocks: int, block_size: int = 16) -> None:
        if num_blocks < 0:
            raise InvalidBlockError("num_blocks must be >= 0")
        self.device = device
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.lock = threading.RLock()  # re-entrant so a batch() can nest public calls
        self._nest = 0  # lock nesting depth of the holder
        self._seq = 0  # seqlock version: odd while a writer is mutating
        self._free = array("i", range(num_blocks - 1, -1, -1))
        self._ref = [0] * num_blocks
        self._hash: list[bytes | None] = [None] * num_blocks
        self._last = array("d", [-1.0]) * num_blocks
        self._depth = array("i", bytes(4 * num_blocks))
        self._computed = bytearray(num_blocks)
        self._num_used = 0
        self._num_reserved = 0
        self._evictions = 0

    # ---------------------------------------------------------------- locking helpers
    def _enter(self) -> None:
        self.lock.acquire()
        self._nest += 1
        if self._nest == 1:
            self._seq += 1

    def _exit(self) -> None:
        if self._nest == 1:
            self._seq += 1
        self._nest -= 1
        self.lock.release()

    # ---------------------------------------------------------------- capacity
    @property
    def num_free_blocks(self) -> int:
        """Blocks an allocation can take now (free list; plus evictable when caching)."""
        return len(self._free)

    def _take(self, n: int) -> list[int] | None:
        """Pop ``n`` content-free blocks (ref stays 0: caller sets it). Lock held."""
        free = self._free
        if n > len(free):
            return None
        if n == 1:
            return [free.pop()]
        ids = free[len(free) - n :]
        del free[len(free) - n :]
        ids.reverse()  # LIFO order: lowest id first, as repeated pop() would give
        return ids.tolist()

    def _release(self, block_id: int) -> None:
        """A block whose ref reached 0 goes back to the free list. Lock held."""
        self._computed[block_id] = 0
        self._free.append(block_id)

    # ---------------------------------------------------------------- locked primitives
    def _alloc(self, n: int, ref: int = 1) -> list[int] | None:
        ids = self._take(n)
        if ids is None:
            return None
        r = self._ref
        for b in ids:
            r[b] = ref
        self._num_used += n
        return ids

    def _incref(self, block_ids: Iterable[int], k: int = 1) -> None:
        r = self._ref
        for b in block_ids:
            if r[b] <= 0:
                raise InvalidBlockError(f"block {b} on {self.device.value} is not in use")
            r[b] += k

    def _decref(self, block_ids: Sequence[int], now: float = 0.0) -> int:
        """Drop one reference per listed id (tail first is the caller's order); release blocks
        that reach 0. Returns how many were released. Raises DoubleFreeError, state unchanged."""
        r = self._ref
        released = 0
        for i, b in enumerate(block_ids):
            c = r[b] - 1
            if c < 0:
                self._undo_decref(block_ids[:i])
                raise DoubleFreeError(f"block {b} on {self.device.value} freed twice")
            r[b] = c
            if c == 0:
                released += 1
                self._on_zero(b, now)
        self._num_used -= released
        return released

    def _undo_decref(self, block_ids: Sequence[int]) -> None:
        # NOTE(rollback): only reached on misuse; restores refs and pulls released ids back.
        for b in block_ids:
            if self._ref[b] == 0:
                self._unrelease(b)
            self._ref[b] += 1

    def _on_zero(self, block_id: int, now: float) -> None:
        self._release(block_id)

    def _unrelease(self, block_id: int) -> None:
        self._free.remove(block_id)

    def _move(self, src: int, dst: int) -> None:
        """Defrag commit: reserved ``dst`` (ref 1) takes over used ``src``. Lock held."""
        r = self._ref
        r[dst], r[src] = r[src], 0
        self._num_used -= 1  # the reservation on dst is consumed
        self._computed[dst] = self._computed[src]
        self._last[dst] = self._last[src]
        self._release(src)

    # ---------------------------------------------------------------- public, locked API
    def allocate(self) -> int | None:
        """One block with ref 1, or None when the pool is exhausted."""
        self._enter()
        try:
            ids = self._alloc(1)
        finally:
            self._exit()
        return None if ids is None else ids[0]

    def allocate_many(self, n: int) -> list[int] | None:
        """``n`` blocks with ref 1 each, all or nothing (None when fewer are available)."""
        if n < 0:
            raise ValueError("n must be >= 0")
        self._enter()
        try:
            return self._alloc(n)
        finally:
            self._exit()

    def free(self, block_id: int) -> None:
        self.free_many((block_id,))

    def free_many(self, block_ids: Sequence[int]) -> None:
        """Drop one reference per id, in the given order (pass tail-first for LRU order)."""
        now = time.monotonic()
        self._enter()
        try:
            self._decref(block_ids, now)
        finally:
            self._exit()

    def incref(self, block_id: int) -> None:
        self._enter()
        try:
            self._incref((block_id,))
        finally:
            self._exit()

    # ---------------------------------------------------------------- readers (no lock)
    def _read(self, fn):
        """Seqlock read: run ``fn`` until it saw no concurrent writer."""
        while True:
            v = self._seq
            if v & 1:
                time.sleep(0)  # a writer is inside; yield the GIL to it
                continue
            out = fn()
            if self._seq == v:
                return out, v

    def stats(self) -> PoolStats:
        def read():
            return (len(self._free), self.num_evictable, self._num_used,
                    self.num_cached, self._num_reserved, self._evictions)

        (free, evictable, used, cached, reserved, evictions), v = self._read(read)
        return PoolStats(self.device, self.num_blocks, free, evictable, used, cached,
                         reserved, v, evictions)

    @property
    def num_evictable(self) -> int:
        return 0

    @property
    def num_cached(self) -> int:
        return 0

    def ref_count(self, block_id: int) -> int:
        return self._ref[block_id]

    def block(self, block_id: int) -> Block:
        """A snapshot of one block's metadata."""
        if not 0 <= block_id < self.num_blocks:
            raise InvalidBlockError(f"block id {block_id} outside pool of {self.num_blocks}")
        h = self._hash[block_id]
        return Block(block_id, self.device, h,
                     (self._depth[block_id] + 1) * self.block_size if h is not None else 0,
                     self._ref[block_id], self._last[block_id], bool(self._computed[block_id]))

    def free_ids(self) -> list[int]:
        """A copy of the free list (one atomic C copy)."""
        return self._free.tolist()

    def check_invariants(self, table_refs: Counter | None = None) -> None:
        """Raise InvariantError on inconsistent state. ``table_refs`` (block id -> number of
        block-table entries) lets the caller check ref counts against its tables."""
        free = self._free.tolist()
        fs = set(free)
        if len(fs) != len(free):
            raise InvariantError(f"{self.device.value}: a block is on the free list twice")
        for b in free:
            if self._ref[b] != 0 or self._hash[b] is not None:
                raise InvariantError(f"{self.device.value}: free block {b} has ref or hash")
        used = sum(1 for c in self._ref if c > 0)
        if any(c < 0 for c in self._ref):
            raise InvariantError(f"{self.device.value}: negative ref count")
        if used != self._num_used:
            raise InvariantError(f"{self.device.value}: used counter {self._num_used} != {used}")
        if len(free) + self.num_evictable + used != self.num_blocks:
            raise InvariantError(
                f"{self.device.value}: free {len(free)} + evictable {self.num_evictable} + "
                f"used {used} != {self.num_blocks}")
        if table_refs is not None:
            for b in range(self.num_blocks):
                expect = table_refs.get(b, 0)
                if self._ref[b] != expect:
                    raise InvariantError(
                        f"{self.device.value}: block {b} ref {self._ref[b]} but {expect} "
                        "table references")
        self._check_cache_invariants(fs)

    def _check_cache_invariants(self, free: set[int]) -> None:
        if any(h is not None for h in self._hash):
            raise InvariantError("uncached pool holds a content hash")
