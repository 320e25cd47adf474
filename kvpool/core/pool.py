"""BlockPool: the blocks of one device (docs/architecture.md#the-pool-kvpoolcore).

Without prefix caching a free list (pop / append). With it (``caching=True``) the pool owns a
PrefixIndex (prefix_index.py: hash -> block, the evictable set, its eviction policy) and
consults it where a block's life changes: a released hashed block is parked there instead of
the free list, an allocation short of free blocks evicts from it, a prefix hit revives from it.
Callers reach the index's own operations through ``pool.index`` (None without caching).

Concurrency (docs/architecture.md#locking, layers 0 and 1)::

    layer 0  free list: array('i') whose pop() / append() / extend() are single C calls, atomic
             under the GIL; readers (stats) take no lock, they read under the seqlock
             ``version`` (odd while a writer is inside; kvpool.core.seqlock).
    layer 1  ``lock``: one per pool, held for one batched mutation, never across I/O or await.

The pool's API has two tiers:

    self-locking   allocate, allocate_many, extend_tables, free_many, reset_prefix_cache,
                   stats ...: each takes the lock once and keeps the version around its body.
    writer section ``with pool.writing():`` then any of the primitives below, which assume the
                   caller is inside one (the BlockSpaceManager batches many under one entry),
                   and the index's mutators (``pool.index.register_block`` ...):

        take(n, ref)      n content-free blocks (evicting when caching) with ref ``ref``
        take_each(refs)   len(refs) blocks, block i with ref refs[i]
        share(ids, k)     k more references on used blocks
        acquire_blocks(ids, k)
                          k more references on cached blocks (prefix hits; revives evictable)
        release(ids, now) one reference less per id; ref-0 blocks leave (free or evictable)
        release_table(blocks, num_tokens, now)
                          release a table's blocks tail first; returns token slots freed
        reserve(ids)      pull free ids out for a defrag plan (ref 1, counted as reserved)
        unreserve(b)      give a reserved id back to the free list
        move(src, dst)    reserved dst takes over src's refs (and hash); src is freed

Metadata is struct-of-arrays, not one object per block, so a million-block pool costs ~33 bytes
per block (with the index's arrays)::

    free_list  FreeList     4 B   ids with no content (free_list.py: a bulk array('i') and the
                                  lock-free magazine); ``pool.free_list.ids()`` lists them
    _ref       list[int]    8 B   ref counts (small ints are shared objects; a list beats
                                  array('i') ~4x on scalar stores, measured)
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from operator import length_hint

from kvpool.core.block import Block, Device, PoolObserver, PoolStats
from kvpool.core.eviction import EvictionPolicy
from kvpool.core.free_list import FreeList
from kvpool.core.prefix_index import PrefixIndex
from kvpool.core.seqlock import SeqLock
from kvpool.errors import DoubleFreeError, InvalidBlockError, InvariantError


class BlockPool:
    """``num_blocks`` blocks of one device; with ``caching``, full computed blocks are shared
    by content hash through ``index`` (lazy eviction: evictable blocks count as allocatable).

    Invariant: every id in ``[0, num_blocks)`` is exactly once free (in ``free_list``, ref 0,
    no hash), evictable (ref 0, hashed, in the index's policy) or used (ref >= 1)."""

    def __init__(self, device: Device, num_blocks: int, block_size: int = 16, *,
                 caching: bool = False, policy: EvictionPolicy | str = "lru",
                 verify_hits: bool = False, observer: PoolObserver | None = None) -> None:
        if num_blocks < 0:
            raise InvalidBlockError("num_blocks must be >= 0")
        self.device = device
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.caching = caching
        self.index: PrefixIndex | None = (
            PrefixIndex(num_blocks, block_size, policy, verify_hits, observer=observer,
                        device=device) if caching else None)
        self._writer = SeqLock()  # the layer-1 lock and the layer-0 version, together
        self.lock = self._writer.lock  # raw lock, for try-lock callers (the asyncio front)
        self.free_list = FreeList(num_blocks)
        # its two containers, never rebound: the hot paths below use them directly
        self._free, self._fast = self.free_list.bulk, self.free_list.magazine
        self._ref = [0] * num_blocks
        # ref_count(block_id) -> int: the list's own C-level getter, no Python frame (decode
        # asks it once per token); _ref is never rebound, so the bound method stays valid.
        self.ref_count: Callable[[int], int] = self._ref.__getitem__
        # blocks held by an in-flight defrag plan (reserve .. move / unreserve); one int,
        # written under the lock, read lock-free by stats
        self.num_reserved = 0
        self._evictions = 0

    # ---------------------------------------------------------------- locking
    def writing(self) -> SeqLock:
        """``with pool.writing():`` holds the pool lock and keeps the seqlock version odd for
        the block (nestable); the writer-section primitives must be called inside one."""
        return self._writer

    # ---------------------------------------------------------------- capacity
    @property
    def num_free_blocks(self) -> int:
        """Blocks an allocation can take now (free list, plus evictable when caching)."""
        idx = self.index
        n = len(self._free) + len(self._fast)
        return n if idx is None else n + len(idx.policy)

    def takeable(self) -> int:
        """What ``take`` can give now; inside a writer section (free_list.py NOTE(drained))."""
        if self._fast:
            self.free_list.drain()
        idx = self.index  # NOTE(speed): num_free_blocks' body, one call less on decode's path
        n = len(self._free)
        return n if idx is None else n + len(idx.policy)

    def _take(self, n: int) -> list[int] | None:
        """Pop ``n`` blocks without content (ref stays 0: caller sets it), evicting cached
        ones when the free list is short. Lock held."""
        free = self._free
        if n > len(free):
            if self._fast:  # NOTE(speed): no call when the magazine is empty (decode's case)
                self.free_list.drain()
            if n > len(free):
                return self._take_evicting(n)
        if n == 1:
            return [free.pop()]
        ids = free[len(free) - n :]
        del free[len(free) - n :]
        ids.reverse()  # LIFO order: lowest id first, as repeated pop() would give
        return ids.tolist()

    def _take_evicting(self, n: int) -> list[int] | None:
        """The whole free list plus victims of the index for the rest; None when even that is
        short. Lock held, magazine drained."""
        idx = self.index
        nf = len(self._free)
        if idx is None or n > nf + idx.num_evictable:
            return None
        ids = self._take(nf) if nf else []
        ids += idx.evict(n - nf)
        self._evictions += n - nf
        return ids

    def _to_free(self, block_ids: list[int], now: float) -> None:
        """Ref-0 blocks leave: hashed ones to the index (evictable), the rest free. Lock held."""
        idx = self.index
        self._free.fromlist(block_ids if idx is None else idx.park(block_ids, now))

    # ---------------------------------------------------------------- writer-section primitives
    # Each assumes the caller is inside ``with pool.writing():`` (module docstring).
    def take(self, n: int, ref: int = 1) -> list[int] | None:
        """``n`` blocks with ref ``ref`` each, all or nothing (None when short)."""
        ids = self._take(n)
        if ids is None:
            return None
        r = self._ref
        for b in ids:  # NOTE(speed): a plain loop beat map()/numpy here for <= 1k ids
            r[b] = ref
        return ids

    def take_each(self, refs: Sequence[int]) -> list[int] | None:
        """``len(refs)`` blocks, block ``i`` with ref ``refs[i]`` (a swap's shared blocks)."""
        ids = self._take(len(refs))
        if ids is None:
            return None
        r = self._ref
        for b, k in zip(ids, refs):
            r[b] = k
        return ids

    def share(self, block_ids: Iterable[int], k: int = 1) -> None:
        """``k`` more references on each used block (fork)."""
        r = self._ref
        for b in block_ids:
            if r[b] <= 0:
                raise InvalidBlockError(f"block {b} on {self.device.value} is not in use")
            r[b] += k

    def release(self, block_ids: Sequence[int], now: float = 0.0) -> int:
        """One reference less per id, in order (tail first is the caller's); ref-0 blocks leave
        (free, or evictable if hashed). Returns how many left; DoubleFreeError: unchanged."""
        if type(block_ids) is not list and type(block_ids) is not tuple:
            block_ids = list(block_ids)  # the iterator below must know how far it got
        r = self._ref
        n = len(block_ids)
        # NOTE(speed): every id with ref 1 (a finished request's table) is one pass of
        # compare-and-store and one C-level push; the loop below pays an append per block.
        # An id whose ref is not 1 (shared, or listed twice) ends the pass: the refs already
        # dropped are restored and the loop below does it all (or raises, unchanged).
        it = iter(block_ids)
        for b in it:
            if r[b] != 1:
                for b2 in block_ids[:n - length_hint(it) - 1]:
                    r[b2] = 1
                break
            r[b] = 0
        else:
            self._to_free(block_ids if type(block_ids) is list else list(block_ids), now)
            return n
        left: list[int] = []
        push = left.append
        # NOTE(speed): a double free's position from length_hint, not a counter per block
        it = iter(block_ids)
        for b in it:
            c = r[b] - 1
            if c:
                if c < 0:  # misuse: restore the refs already dropped (nothing has left yet)
                    for b2 in block_ids[:n - length_hint(it) - 1]:
                        r[b2] += 1
                    raise DoubleFreeError(f"block {b} on {self.device.value} freed twice")
            else:
                push(b)
            r[b] = c
        if left:
            self._to_free(left, now)
        return len(left)

    def release_table(self, blocks: Sequence[int], num_tokens: int, now: float = 0.0) -> int:
        """Release the ``blocks`` of a table holding ``num_tokens`` tokens, tail first; returns
        the token slots that left use (a block's worth per released block, only the used
        slots of a partly filled last block)."""
        released = self.release(blocks[::-1], now)
        if not released:
            return 0
        slots = released * self.block_size
        if self._ref[blocks[-1]] == 0:
            slots -= -num_tokens % self.block_size  # the last block's unused slots
        return slots

    def reserve(self, block_ids: Sequence[int]) -> None:
        """Pull free ``block_ids`` out of the free list for a defrag plan: ref 1 each, counted
        in ``num_reserved`` until ``move`` or ``unreserve``."""
        taken = self.free_list.pull(block_ids)
        for b in block_ids:
            self._ref[b] = 1
        self.num_reserved += taken

    def unreserve(self, block_id: int) -> None:
        """A reserved block goes back to the free list unused."""
        self._ref[block_id] = 0
        self._free.append(block_id)
        self.num_reserved -= 1

    def move(self, src: int, dst: int) -> None:
        """Defrag commit: reserved ``dst`` takes over ``src`` (used or evictable: its refs,
        and its hash and place in the evictable set when cached); ``src`` is freed."""
        r = self._ref
        if self.index is not None:
            self.index.move(src, dst, r[src] == 0)
        r[dst], r[src] = r[src], 0
        self._free.append(src)
        self.num_reserved -= 1

    def acquire_blocks(self, block_ids: Sequence[int], k: int = 1) -> None:
        """``k`` more references on each listed cached block (a prompt's prefix hits, a
        swap-in's reused blocks), in order; evictable ones are revived."""
        idx = self.index
        if idx is None:
            raise InvalidBlockError(f"{self.device.value} pool has no prefix cache to hit")
        r = self._ref
        idx.hit(block_ids, [b for b in block_ids if not r[b]])  # raises before any ref moves
        for b in block_ids:
            r[b] += k

    # ---------------------------------------------------------------- self-locking API
    def allocate(self) -> int | None:
        """One block with ref 1, or None when the pool is exhausted. Lock-free unless the
        magazine is empty (then one locked refill serves the next free_list.MAGAZINE calls).
        A pop moves no version (stats.py NOTE(pop-version))."""
        try:
            b = self._fast.pop()
        except IndexError:
            return self._allocate_slow()
        self._ref[b] = 1
        return b

    def _allocate_slow(self) -> int | None:
        # NOTE(slow-magazine): another caller that found the magazine empty may have refilled
        # it (with all of bulk, when bulk was short) while this one waited for the lock: pop
        # first. Only the lock fills bulk or the magazine, so a failed pop, then an empty bulk,
        # means no free block is left: only then does a cached block give way, or None.
        fast = self._fast
        with self._writer:
            while True:
                try:
                    b = fast.pop()
                    break
                except IndexError:  # empty, or lock-free callers drained it: refill
                    pass
                if not self.free_list.refill():
                    ids = self._take_evicting(1)
                    if ids is None:
                        return None
                    b = ids[0]
                    break
            self._ref[b] = 1
            return b

    def allocate_many(self, n: int) -> list[int] | None:
        """``n`` blocks with ref 1 each, all or nothing (None when fewer are available)."""
        if n < 0:
            raise ValueError("n must be >= 0")
        with self._writer:
            return self.take(n)

    def extend_tables(self, tables: Sequence[list[int]]) -> bool:
        """Decode's batched call: append one new block to every table in ``tables`` under one
        lock acquisition; all or nothing (False when the pool is short)."""
        with self._writer:
            ids = self._take(len(tables))
            if ids is None:
                return False
            r = self._ref
            for t, b in zip(tables, ids):  # NOTE(speed): one loop sets the ref and appends
                r[b] = 1
                t.append(b)
            return True

    def free_many(self, block_ids: Sequence[int]) -> None:
        """Drop one reference per id, in the given order (pass tail-first for LRU order)."""
        w = self._writer
        if self.index is None:
            # NOTE(speed): without a prefix cache nothing is timed, and a release changes
            # what readers see in one C-level store (the free list's extend; nothing when
            # it raises): the lock and a single-store version bump, as seqlock.py allows
            with w.lock:
                self.release(block_ids)
                w.single_store()
            return
        now = time.monotonic()
        with w:
            self.release(block_ids, now)

    def reset_prefix_cache(self) -> int:
        """Drop every evictable cached block back to the free list; returns how many."""
        if self.index is None:
            return 0
        with self._writer:
            ids = self.index.evict_all()
            self._free.fromlist(ids)
            return len(ids)

    # ---------------------------------------------------------------- readers (no lock)
    def stats(self) -> PoolStats:
        idx = self.index

        def read():
            cached = (0, 0) if idx is None else (idx.num_evictable, idx.num_cached)
            return len(self._free) + len(self._fast), cached, self.num_reserved, self._evictions

        (free, (evictable, cached), reserved, evictions), v = self._writer.read(read)
        return PoolStats(self.device, self.num_blocks, free, evictable,
                         self.num_blocks - free - evictable, cached, reserved, v, evictions)

    def block(self, block_id: int) -> Block:
        """A snapshot of one block's metadata."""
        if not 0 <= block_id < self.num_blocks:
            raise InvalidBlockError(f"block id {block_id} outside pool of {self.num_blocks}")
        idx = self.index
        h, depth, last = (None, 0, -1.0) if idx is None else idx.entry(block_id)
        return Block(block_id, self.device, h,
                     (depth + 1) * self.block_size if h is not None else 0,
                     self._ref[block_id], last, h is not None)

    def check_invariants(self, table_refs: Counter | None = None) -> None:
        """Raise InvariantError on inconsistent state. ``table_refs`` (block id -> number of
        block-table entries) lets the caller check ref counts against its tables. Exact only
        while no allocate() runs (free_list.py NOTE(quiescent-check)): its error says so when
        it saw one move the pool during the check."""
        name, ref, fl = self.device.value, self._ref, self.free_list
        since = fl.watch(ref)
        try:
            free = fl.ids()
            fs = set(free)
            if len(fs) != len(free):
                raise InvariantError(f"{name}: a block is on the free list twice")
            if any(ref[b] != 0 for b in free) or any(c < 0 for c in ref):
                raise InvariantError(f"{name}: a free block has a ref count, or a count is < 0")
            parked = [b for b in range(self.num_blocks) if ref[b] == 0 and b not in fs]
            if self.index is not None:
                self.index.check_invariants(parked, free)
            elif parked:
                raise InvariantError(f"{name}: ref-0 block {parked[0]} is off the free list")
            if table_refs is not None:
                for b in range(self.num_blocks):
                    expect = table_refs.get(b, 0)
                    if ref[b] != expect:
                        raise InvariantError(
                            f"{name}: block {b} ref {ref[b]} but {expect} table references")
        except InvariantError as e:
            if fl.moved(since, ref):
                raise InvariantError(f"{e}; {fl.MOVED}") from e
            raise
