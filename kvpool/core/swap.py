"""Swap planning: move a sequence group's blocks between the device and host pools.

The manager only plans: it remaps the tables and returns ``(src, dst)`` block pairs; the
runtime's copy engine moves the bytes. Swap-out releases the device blocks at once, so the copy
engine must finish a swap-out's copies before any later write (it runs copies in order, and
compute waits for the copies of its step).

Swap-in admission goes through ``BlockSpaceManager.admission`` (one rule for prompts and swapped
groups): a group needs its blocks plus what its next decode appends, exactly; the seeds'
``len(blocks) + num_swapped_seqs`` is the worst case of that.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence

from kvpool.core.block import AllocStatus, Device
from kvpool.core.block_table import BlockTable
from kvpool.errors import InvalidBlockError


class SwapMixin:
    """can_swap_out / swap_out / can_swap_in / swap_in of BlockSpaceManager."""

    def _group(self, seq_ids: Sequence[int], device: Device) -> list[BlockTable]:
        if not seq_ids:
            raise ValueError("a swap needs at least one sequence")
        if len(set(seq_ids)) != len(seq_ids):
            raise ValueError("seq_ids must be distinct")
        tables = [self._table(s) for s in seq_ids]
        for t in tables:
            if t.device is not device:
                where = "swapped out" if t.device is Device.HOST else "on the device"
                raise InvalidBlockError(f"sequence {t.seq_id} is already {where}")
        return tables

    @staticmethod
    def _refs(tables: Sequence[BlockTable]) -> Counter[int]:
        """Table references per block, in first-seen order (shared blocks counted once each)."""
        c: Counter[int] = Counter()
        for t in tables:
            c.update(t.blocks)
        return c

    # ------------------------------------------------------------------ out
    def can_swap_out(self, seq_ids: Sequence[int]) -> bool:
        """Whether the host pool has room for the group's distinct device blocks."""
        refs = self._refs(self._group(seq_ids, Device.DEVICE))
        return len(refs) <= self.host_pool.num_free_blocks

    def swap_out(self, seq_ids: Sequence[int]) -> list[tuple[int, int]] | None:
        """Move a group to the host pool. Returns ``(device_block, host_block)`` copies, one per
        distinct block, or None when the host pool is short (nothing changes)."""
        d, h = self.device_pool, self.host_pool
        now = time.monotonic()
        _v_d = d._enter()
        _v_h = h._enter()
        try:
            tables = self._group(seq_ids, Device.DEVICE)
            refs = self._refs(tables)
            host_ids = h._alloc(len(refs))
            if host_ids is None:
                return None
            mapping = dict(zip(refs, host_ids))
            href = h._ref
            for db, hb in mapping.items():
                href[hb] = refs[db]
            for t in tables:
                self._release_device_blocks(t, now)
                t.blocks = [mapping[b] for b in t.blocks]
                t.device = Device.HOST
                t.num_registered = 0
                t.version += 1
            self.num_swapped_seqs += len(tables)
            self.swap_out_blocks += len(mapping)
            return list(mapping.items())
        finally:
            h._exit(_v_h)
            d._exit(_v_d)

    def _release_device_blocks(self, t: BlockTable, now: float) -> None:
        """Drop ``t``'s device references (tail first) and account the freed slots."""
        pool = self.device_pool
        released = pool._decref(t.blocks[::-1], now)
        if released:
            bs = self.block_size
            slots = released * bs
            if pool._ref[t.blocks[-1]] == 0:
                slots -= bs - t.last_block_fill(bs)
            self._used_slots -= slots

    # ------------------------------------------------------------------ in
    def can_swap_in(self, seq_ids: Sequence[int]) -> AllocStatus:
        """OK / LATER / NEVER for bringing a swapped group back (``admission(swapped=...)``)."""
        return self.admission(swapped=seq_ids).status

    def _swap_in_need(self, tables: Sequence[BlockTable]) -> tuple[int, int]:
        """``(capacity, need)`` blocks of swapping ``tables`` in and appending one token to
        each: its distinct blocks plus, per sequence, a new block when its last block is full
        or a copy when a partial last block is shared (the seeds' ``+ num_seqs`` is the worst
        case of this; counting it exactly keeps NEVER equal to what admission says for the
        same tokens). Cached full blocks that swap_in would reuse cost nothing when in use."""
        refs = self._refs(tables)
        bs = self.block_size
        append = 0
        for t in tables:
            n0 = t.num_tokens
            append += -(-(n0 + 1) // bs) - len(t.blocks)
            if n0 % bs and refs[t.blocks[-1]] > 1:
                append += 1  # NOTE(cow): append_slots_batch counts every sharer, so do we
        capacity = len(refs) + append
        if not self.caching:
            return capacity, capacity
        d = self.device_pool
        reused_in_use: set[int] = set()
        seen: set[int] = set()
        for t in tables:  # the same lookup swap_in makes
            for i, hb in enumerate(t.blocks[: len(t.hashes)]):
                if hb not in seen:
                    seen.add(hb)
                    db = d.lookup(t.hashes[i])
                    if db is not None and d.ref_count(db) > 0:
                        reused_in_use.add(hb)
        return capacity, capacity - len(reused_in_use)

    def swap_in(self, seq_ids: Sequence[int]) -> list[tuple[int, int]] | None:
        """Bring a group back to the device. Returns ``(host_block, device_block)`` copies; a
        full block whose hash is still in the device prefix cache is reused, not copied. None
        when the device pool is short (nothing changes).

        The copied blocks carry no hash until ``mark_computed`` confirms the copy (the step
        that ran it is done): if it fails, the request is aborted and its blocks go back to
        the free list unhashed, so no later prompt can hit bytes that were never written."""
        d, h = self.device_pool, self.host_pool
        now = time.monotonic()
        _v_d = d._enter()
        _v_h = h._enter()
        try:
            tables = self._group(seq_ids, Device.HOST)
            refs = self._refs(tables)
            bs = self.block_size
            reuse: dict[int, int] = {}
            if self.caching:
                for t in tables:
                    for i, hb in enumerate(t.blocks[: len(t.hashes)]):
                        if hb not in reuse:
                            db = d._lookup(t.hashes[i])
                            if db is not None:
                                reuse[hb] = db
            fresh = [hb for hb in refs if hb not in reuse]
            revive = sum(1 for db in set(reuse.values()) if d._ref[db] == 0)
            if len(fresh) > d.num_free_blocks - revive:
                return None
            dref = d._ref
            mapping: dict[int, int] = {}
            for hb, db in reuse.items():  # NOTE(order): pin the hits before allocating, or
                if dref[db] == 0:         # the allocation could evict one of them
                    self._used_slots += bs
                d._acquire(db, refs[hb])
                mapping[hb] = db
            new_ids = d._alloc(len(fresh))
            assert new_ids is not None
            for hb, db in zip(fresh, new_ids):
                dref[db] = refs[hb]
                mapping[hb] = db
            fills: dict[int, int] = {}
            for t in tables:
                for i, hb in enumerate(t.blocks):
                    if hb not in reuse:
                        fills[hb] = t.block_fill(i, bs)
            self._used_slots += sum(fills.values())
            for t in tables:
                h._decref(t.blocks[::-1], now)
                t.blocks = [mapping[b] for b in t.blocks]
                t.device = Device.DEVICE
                t.num_registered = 0
                t.copy_pending = True  # hashed only after mark_computed confirms the copy
                t.version += 1
            self.num_swapped_seqs -= len(tables)
            self.swap_in_blocks += len(fresh)
            self.swap_in_reused_blocks += len(reuse)
            return [(hb, mapping[hb]) for hb in fresh]
        finally:
            h._exit(_v_h)
            d._exit(_v_d)
