"""SwapPlanner: move a sequence group's blocks between the device and host pools.

The planner only plans: it remaps the tables and returns ``(src, dst)`` block pairs; the
runtime's copy engine moves the bytes. Swap-out releases the device blocks at once, so the copy
engine must finish a swap-out's copies before any later write (it runs copies in order, and
compute waits for the copies of its step).

Swap-in admission goes through ``BlockSpaceManager.admission`` (one rule for prompts and swapped
groups), which asks ``need`` here: a group needs its blocks plus what its next decode appends,
exactly; vLLM v0's ``len(blocks) + num_swapped_seqs`` is the worst case of that.

Locking: always the device pool's writer section first, then the host pool's.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence

from kvpool.core.block import Device, PoolObserver
from kvpool.core.block_table import BlockTable, BlockTables
from kvpool.core.pool import BlockPool
from kvpool.core.stats import ManagerCounters
from kvpool.errors import InvalidBlockError


def table_refs(tables: Sequence[BlockTable]) -> Counter[int]:
    """Table references per block, in first-seen order (shared blocks counted once each)."""
    c: Counter[int] = Counter()
    for t in tables:
        c.update(t.blocks)
    return c


class SwapPlanner:
    """Swap-out / swap-in planning over the manager's tables (lent to it, owned by the
    manager) and its two pools; counts into the manager's counters."""

    def __init__(self, device: BlockPool, host: BlockPool,
                 tables: BlockTables, counters: ManagerCounters,
                 observer: PoolObserver | None = None) -> None:
        self.device = device
        self.host = host
        self.tables = tables
        self.counters = counters
        self.block_size = device.block_size
        self.index = device.index  # None without prefix caching: nothing to reuse
        # NOTE(host-hashes): the host pool holds no hash index; swapped tables keep their
        # hashes. With an observer, the tables holding each hash on the host are counted
        # here, so it hears a hash arrive (first holder) and leave (last one) exactly once.
        self._observer = observer
        self._host_refs: Counter[bytes] = Counter()

    def group(self, seq_ids: Sequence[int], device: Device) -> list[BlockTable]:
        """The tables of ``seq_ids``, all on ``device``; raises on misuse."""
        if not seq_ids:
            raise ValueError("a swap needs at least one sequence")
        if len(set(seq_ids)) != len(seq_ids):
            raise ValueError("seq_ids must be distinct")
        tables = [self.tables[s] for s in seq_ids]
        for t in tables:
            if t.device is not device:
                where = "swapped out" if t.device is Device.HOST else "on the device"
                raise InvalidBlockError(f"sequence {t.seq_id} is already {where}")
        return tables

    # ------------------------------------------------------------------ out
    def can_swap_out(self, seq_ids: Sequence[int]) -> bool:
        """Whether the host pool has room for the group's distinct device blocks."""
        refs = table_refs(self.group(seq_ids, Device.DEVICE))
        return len(refs) <= self.host.num_free_blocks

    def swap_out(self, seq_ids: Sequence[int]) -> list[tuple[int, int]] | None:
        """Move a group to the host pool. Returns ``(device_block, host_block)`` copies, one per
        distinct block, or None when the host pool is short (nothing changes).
        NOTE(swap-out-confirm): the host blocks hold their bytes only once the copy ran, so
        the observer hears of them (CPU BlockStored) only when ``confirm_out`` says it did;
        a copy that failed is never confirmed, and its blocks are never told."""
        d, h, c = self.device, self.host, self.counters
        now = time.monotonic()
        with d.writing(), h.writing():
            tables = self.group(seq_ids, Device.DEVICE)
            refs = table_refs(tables)
            host_ids = h.take_each(list(refs.values()))
            if host_ids is None:
                return None
            mapping = dict(zip(refs, host_ids))
            for t in tables:
                c.used_slots -= d.release_table(t.blocks, t.num_tokens, now)
                t.blocks = [mapping[b] for b in t.blocks]
                t.device = Device.HOST
                t.num_registered = 0
                t.copy_pending = True  # told to the observer once confirm_out says copied
                t.blocks_changed()
            c.num_swapped_seqs += len(tables)
            c.swap_out_blocks += len(mapping)
            return list(mapping.items())

    def confirm_out(self, seq_ids: Sequence[int]) -> None:
        """NOTE(swap-out-confirm): the swap-out copies of ``seq_ids`` completed: their host
        blocks hold the bytes, so the observer hears the hashes new to the host tier now.
        Sequences gone, back on the device or already confirmed are skipped."""
        with self.device.writing(), self.host.writing():
            tables = [t for s in seq_ids if (t := self.tables.get(s)) is not None
                      and t.device is Device.HOST and t.copy_pending]
            for t in tables:
                t.copy_pending = False
            if tables and self._observer is not None:
                self._host_arrived(tables)

    # ------------------------------------------------------------------ in
    def need(self, tables: Sequence[BlockTable]) -> tuple[int, int]:
        """``(capacity, need)`` blocks of swapping ``tables`` in and appending one token to
        each: its distinct blocks plus, per sequence, a new block when its last block is full
        or a copy when a partial last block is shared (vLLM v0's ``+ num_seqs`` is the worst
        case of this; counting it exactly keeps NEVER equal to what admission says for the
        same tokens). Cached full blocks that swap_in would reuse cost nothing when in use."""
        refs = table_refs(tables)
        bs = self.block_size
        append = 0
        for t in tables:
            n0 = t.num_tokens
            append += -(-(n0 + 1) // bs) - len(t.blocks)
            if n0 % bs and refs[t.blocks[-1]] > 1:
                append += 1  # NOTE(cow): slots.append_batch counts every sharer, so do we
        capacity = len(refs) + append
        if self.index is None:
            return capacity, capacity
        d, lookup = self.device, self.index.lookup
        reused_in_use: set[int] = set()
        seen: set[int] = set()
        for t in tables:  # the same lookup swap_in makes
            for i, hb in enumerate(t.blocks[: len(t.hashes)]):
                if hb not in seen:
                    seen.add(hb)
                    db = lookup(t.hashes[i])
                    if db is not None and d.ref_count(db) > 0:
                        reused_in_use.add(hb)
        return capacity, capacity - len(reused_in_use)

    def swap_in(self, seq_ids: Sequence[int]) -> list[tuple[int, int]] | None:
        """Bring a group back to the device. Returns ``(host_block, device_block)`` copies; a
        full block still in the device prefix cache is reused, not copied. None when the
        device pool is short (nothing changes). NOTE(copy-pending): the copied blocks carry no
        hash until ``mark_computed`` confirms the copy, so no prompt can hit unwritten bytes.
        Whether it fits: ``manager.admission(swapped=seq_ids)``."""
        d, h, c = self.device, self.host, self.counters
        now = time.monotonic()
        with d.writing(), h.writing():
            tables = self.group(seq_ids, Device.HOST)
            refs = table_refs(tables)
            bs = self.block_size
            reuse = self._reusable(tables)
            fresh = [hb for hb in refs if hb not in reuse]
            revive = sum(1 for db in set(reuse.values()) if d.ref_count(db) == 0)
            if len(fresh) > d.takeable() - revive:
                return None
            mapping: dict[int, int] = {}
            for hb, db in reuse.items():  # NOTE(order): pin the hits before allocating, or
                if d.ref_count(db) == 0:  # the allocation could evict one of them
                    c.used_slots += bs
                d.acquire_blocks((db,), refs[hb])
                mapping[hb] = db
            new_ids = d.take_each([refs[hb] for hb in fresh])
            assert new_ids is not None
            mapping.update(zip(fresh, new_ids))
            c.used_slots += sum({hb: t.block_fill(i, bs) for t in tables
                                 for i, hb in enumerate(t.blocks) if hb not in reuse}.values())
            self.host_released(tables)
            for t in tables:
                h.release(t.blocks[::-1], now)
                t.blocks = [mapping[b] for b in t.blocks]
                t.device = Device.DEVICE
                t.num_registered = 0
                t.copy_pending = True  # hashed only after mark_computed confirms the copy
                t.blocks_changed()
            c.num_swapped_seqs -= len(tables)
            c.swap_in_blocks += len(fresh)
            c.swap_in_reused_blocks += len(reuse)
            return [(hb, mapping[hb]) for hb in fresh]

    def _reusable(self, tables: Sequence[BlockTable]) -> dict[int, int]:
        """Host block -> the device block still cached under its hash (full blocks only)."""
        reuse: dict[int, int] = {}
        if self.index is None:
            return reuse
        lookup = self.index.lookup
        for t in tables:
            for i, hb in enumerate(t.blocks[: len(t.hashes)]):
                if hb not in reuse:
                    db = lookup(t.hashes[i])
                    if db is not None:
                        reuse[hb] = db
        return reuse

    # ------------------------------------------------------------------ host hashes
    def _host_arrived(self, tables: Sequence[BlockTable]) -> None:
        refs = self._host_refs
        for t in tables:
            new = [i for i, h in enumerate(t.hashes) if not refs[h]]
            refs.update(t.hashes)
            if new:
                self._tell_host(t, new)

    def _tell_host(self, t: BlockTable, new: list[int]) -> None:
        """NOTE(host-tokens): the observer hears the blocks of ``t`` new to the host with their
        token ids (kept while an observer listens: NOTE(event-tokens)) and, from a chain's
        start, its salt (NOTE(event-salt)), as the device pool tells them: an indexer keying
        blocks on their tokens (llm-d's) then indexes the CPU tier under the keys the GPU
        events gave, whether or not it saw those. Hashes chain, so another swapped table
        holding block i holds every block before it: ``new`` is a tail of ``t.hashes``; were
        it not, the blocks go without tokens, as before."""
        lo, bs, toks = new[0], self.block_size, t.tokens
        tail = len(new) == len(t.hashes) - lo and toks is not None
        self._observer.stored(  # type: ignore[union-attr]
            Device.HOST, [t.hashes[i] for i in new], t.hashes[lo - 1] if lo else None,
            toks[lo * bs:len(t.hashes) * bs] if tail else None,  # type: ignore[index]
            salt=None if lo else t.salt)

    def host_forked(self, child: BlockTable) -> None:
        """NOTE(host-fork): ``child`` was forked from a swapped table and holds its host
        blocks and hashes too: counted as a holder when the parent was (confirmed), so the
        hashes leave the host tier once, with the last holder. Lock held."""
        if self._observer is not None and not child.copy_pending:
            self._host_refs.update(child.hashes)

    def host_released(self, tables: Sequence[BlockTable]) -> None:
        """``tables`` left the host pool (swapped in or freed): the observer hears the hashes
        no other swapped table holds (NOTE(host-hashes)); an unconfirmed table was never
        counted (NOTE(swap-out-confirm)). Lock held."""
        if self._observer is None:
            return
        refs = self._host_refs
        gone = []
        for t in tables:
            if t.copy_pending:
                continue
            for h in t.hashes:
                refs[h] -= 1
                if refs[h] <= 0:
                    del refs[h]
                    gone.append(h)
        if gone:
            self._observer.removed(Device.HOST, gone)
