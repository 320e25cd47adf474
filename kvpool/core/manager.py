"""BlockSpaceManager: block tables, admission, append with copy-on-write, fork and free.

By composition: the manager owns the block tables and a ``ManagerCounters`` (stats.py), and
lends both to a ``PromptAllocator`` (prompt_alloc.py: new tables with prefix hits), a
``SlotWriter`` (slots.py: append / register), a ``SwapPlanner`` (swap.py), a
``DefragPlanner`` (defrag.py) and a ``StatsReader`` (stats.py); a ``BlockLender``
(lending.py) owns the blocks lent to the remote tier outside any table. The per-device pools
(pool.py, with a prefix_index.py when caching) are driven only through their public API.

Admission (vLLM v0's table; ``W`` = watermark blocks, ``R`` = blocks the prompt needs)::

    total - R < W          -> NEVER   (cannot fit even in an empty pool)
    free  - R' >= W        -> OK      (R' = R minus prefix hits on blocks already in use)
    otherwise              -> LATER

Locking: every public mutator runs inside the device pool's writer section (and the host
pool's, for swaps, always device first) for its whole body, so ``stats()`` from another thread
sees either all of a call or none of it.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from kvpool.config import CacheConfig
from kvpool.core.block import Admission, AllocStatus, Device, PoolObserver
from kvpool.core.block_table import BlockTable, SeqAlloc, table_of
from kvpool.core.defrag import DefragPlan, DefragPlanner, DefragResult
from kvpool.core.eviction import EvictionPolicy
from kvpool.core.hashing import BlockHasher, ExtraKey
from kvpool.core.lending import BlockLender
from kvpool.core.pool import BlockPool
from kvpool.core.prompt_alloc import PromptAllocator
from kvpool.core.stats import FragmentationStats, ManagerCounters, ManagerStats, StatsReader
from kvpool.core.slots import SlotWriter
from kvpool.core.swap import SwapPlanner
from kvpool.errors import DuplicateSequenceError, InvariantError, UnknownSequenceError


class BlockSpaceManager:
    """Maps sequences to physical blocks of a device pool and a host (swap) pool.

    Invariant (``check_invariants``): every block's ref count equals the number of table
    entries (plus defrag reservations) pointing at it; ``counters.used_slots`` is the filled
    slots of the distinct used device blocks; every table satisfies BlockTable's invariant.
    """

    def __init__(self, config: CacheConfig, policy: EvictionPolicy | None = None, *,
                 observer: PoolObserver | None = None) -> None:
        """``observer`` hears every hash that becomes findable or stops being so, on the
        device pool and on the host pool (swapped sequences' blocks); kvpool.events."""
        self.config = config
        self.block_size = bs = config.block_size
        self.device_pool = BlockPool(
            Device.DEVICE, config.num_device_blocks, bs, caching=config.enable_prefix_caching,
            policy=policy if policy is not None else config.eviction_policy,
            verify_hits=config.verify_hits, observer=observer)
        self.host_pool = BlockPool(Device.HOST, config.num_host_blocks, bs)
        self.caching = config.enable_prefix_caching
        self.hasher = BlockHasher(bs, config.model_id, config.hash_algo)
        self.watermark_blocks = config.watermark_blocks
        self._tables: dict[int, BlockTable] = {}  # owned here, lent to the planners
        self.counters = ManagerCounters()  # owned here, updated by the planners too
        self._swap = SwapPlanner(self.device_pool, self.host_pool, self._tables, self.counters,
                                 observer if self.caching else None)
        self._prompts = PromptAllocator(self.device_pool, self._tables, self.counters,
                                        self.hasher)
        self._slots = SlotWriter(self.device_pool, self._tables, self.counters, self.hasher)
        # NOTE(speed): decode calls append_slots once per token; skip the delegating frame
        self.append_slots = self._slots.append  # type: ignore[method-assign]
        self._defrag = DefragPlanner(self.device_pool, self._tables, self.counters)
        self._reader = StatsReader(self.device_pool, self.host_pool, self.counters,
                                   self._tables)
        # blocks lent out of the tables (remote prefetch / write staging), by pool
        self._lender = BlockLender(self.device_pool, self.host_pool)

    # ------------------------------------------------------------------ helpers
    def _table(self, seq_id: int) -> BlockTable:
        return table_of(self._tables, seq_id)

    def num_required_blocks(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Hold the pool locks across many calls: one acquisition for a whole batch (the
        asyncio front uses this). Public methods called inside nest re-entrantly."""
        with self.device_pool.writing(), self.host_pool.writing():
            yield

    def hash_prompt(self, token_ids: Sequence[int], cache_salt: str | None = None,
                    extra_keys: Sequence[ExtraKey] | None = None) -> list[bytes]:
        """Chained hashes of the prompt's full blocks (compute once, pass to can_allocate and
        allocate as ``block_hashes``)."""
        return self.hasher.hash_blocks(token_ids, cache_salt, extra_keys)

    # ------------------------------------------------------------------ admission
    def admission(self, prompts: Sequence[tuple[int, Sequence[bytes]]] = (), *,
                  swapped: Sequence[int] = (), freeable: int = 0,
                  watermark: bool = True, shared_blocks: int = 0) -> Admission:
        """THE admission rule (the module docstring's table), for one of:

        - ``prompts``: ``(num_tokens, block_hashes)`` per prefill unit of one request (a
          recomputed ``n > 1`` request whose outputs diverged has one unit per sequence);
          every unit after the first reuses the first unit's leading ``shared_blocks``
          blocks (their common prefix, allocated once: ``SeqAlloc.share_with``), so ``n``
          sequences of ``T`` tokens with ``F`` shared blocks need
          ``F + n * (ceil(T / bs) - F)`` blocks, as many as they hold while decoding;
        - ``swapped``: the sequence ids of a swapped group, to come back and decode once.

        ``freeable`` counts blocks the caller would free first (priority preemption plans
        with it). NOTE(never): NEVER is judged on the blocks the request needs in an empty
        pool, the same way for both kinds, so a swapped group is NEVER exactly when
        recomputing it would be NEVER too: it has outgrown what admission accepts.
        ``watermark=False`` judges against the whole pool (the scheduler's NOTE(alone)).
        """
        if bool(prompts) == bool(swapped):
            raise ValueError("admission takes prompts or swapped, exactly one of them")
        pool = self.device_pool
        if swapped:
            capacity, need = self._swap.need(self._swap.group(swapped, Device.HOST))
            what = f"swapped request needs {capacity} blocks to resume and decode, but"
        else:
            capacity, need = self._prompts_need(prompts, shared_blocks)
            what = f"needs {capacity} blocks of {self.block_size} tokens, but"
        total, w = pool.num_blocks, self.watermark_blocks if watermark else 0
        if total - capacity < w:
            return Admission(AllocStatus.NEVER, need, capacity,
                             f"{what} the device pool has {total} blocks and keeps {w} free "
                             "(watermark): it can never fit")
        free = pool.num_free_blocks + freeable
        if free - need >= w:
            return Admission(AllocStatus.OK, need, capacity, "")
        return Admission(AllocStatus.LATER, need, capacity,
                         f"{what} {free} of {total} blocks are free and {w} stay free "
                         "(watermark): wait for running requests to finish")

    def _prompts_need(self, prompts: Sequence[tuple[int, Sequence[bytes]]],
                      shared_blocks: int) -> tuple[int, int]:
        """(blocks the units take in an empty pool, blocks they take from the free set now)."""
        pool = self.device_pool
        capacity = need = 0
        for i, (num_tokens, hashes) in enumerate(prompts):
            if num_tokens <= 0:
                raise ValueError("num_tokens must be >= 1")
            if shared_blocks * self.block_size >= num_tokens:
                raise ValueError(f"{shared_blocks} shared blocks leave no token of a "
                                 f"{num_tokens}-token unit to compute")
            reused = shared_blocks if i else 0  # in use by the first unit: free here
            own = self.num_required_blocks(num_tokens) - reused
            capacity += own
            need += own
            if self.caching and hashes:  # a hit on a block in use costs nothing; a hit
                # on an evictable block costs one, like a miss (it leaves the free set)
                need -= pool.count_used(self._prompts.hits(hashes, num_tokens)[reused:])
        return capacity, need

    def can_allocate(self, num_tokens: int, block_hashes: Sequence[bytes] = ()) -> AllocStatus:
        """OK / LATER / NEVER for a prompt of ``num_tokens`` (shared by all its sequences).

        Prefix hits on blocks that are in use cost nothing; hits on evictable blocks cost a
        block like a miss (they leave the allocatable set)."""
        return self.admission([(num_tokens, block_hashes)]).status

    # ------------------------------------------------------------------ allocate
    def allocate(self, seq_ids: Sequence[int], token_ids: Sequence[int], *,
                 block_hashes: Sequence[bytes] | None = None, cache_salt: str | None = None,
                 extra_keys: Sequence[ExtraKey] | None = None) -> int | None:
        """Create block tables for ``seq_ids``, all sharing the prompt's blocks.

        Returns the number of prompt tokens served from the prefix cache (their KV is already
        computed), or None when the pool cannot hold the prompt now (nothing changes).
        """
        return self.allocate_batch([SeqAlloc(seq_ids, token_ids, block_hashes, cache_salt,
                                             extra_keys)])[0]

    def allocate_batch(self, reqs: Sequence[SeqAlloc]) -> list[int | None]:
        """Many allocations under one lock acquisition; each answers like ``allocate``."""
        return self._prompts.allocate_batch(reqs)

    # ------------------------------------------------------------------ computed / hashes
    def mark_computed(self, seq_id: int, num_tokens: int | None = None) -> None:
        """The KV of the first ``num_tokens`` tokens (default: all) is written: index their full
        blocks in the prefix cache so later prompts can hit them.

        Also the confirmation of a swap-in: the step that ran the sequence's swap-in copies
        completed, so its blocks hold their bytes and may be hashed from now on (until then
        ``append_slots`` registers nothing for it)."""
        with self.device_pool.writing():
            t = self._table(seq_id)
            n = t.num_tokens if num_tokens is None else min(num_tokens, t.num_tokens)
            if n > t.num_computed:
                t.num_computed = n
            if t.device is Device.DEVICE:
                t.copy_pending = False
            self._slots.register_upto(t, n)

    # ------------------------------------------------------------------ append (slots.py)
    def can_append_slots(self, seq_ids: Sequence[int], num_new_tokens: int = 1) -> bool:
        """Whether every listed running sequence can take ``num_new_tokens`` more tokens (exact:
        new blocks plus copy-on-write copies; vLLM v0's one block per sequence is the worst)."""
        return self._slots.can_append(seq_ids, num_new_tokens)

    def append_slots(self, seq_id: int, token_ids: Sequence[int]) -> list[tuple[int, int]] | None:
        """Reserve slots for ``token_ids`` (the tokens whose KV the next step writes); all
        earlier tokens count as computed. Returns the copy-on-write ``(src, dst)`` pairs to copy
        before writing, or None if the pool is short (nothing changes). Decode's hot path."""
        return self._slots.append(seq_id, token_ids)

    def append_decode_slots(self, seq_ids: Sequence[int], token_ids: Sequence[int],
                            group_ends: Sequence[int] | None = None
                            ) -> tuple[list[Sequence[tuple[int, int]]], list[list[int]], int]:
        """A decode step's appends under one lock: ``token_ids[i]`` to ``seq_ids[i]`` for the
        leading groups (``group_ends``, each group's end index; None: one group, all or
        nothing) whose slots fit together. Returns the copy-on-write pairs per appended
        sequence (an empty sequence when none), a read-only copy of each one's table after
        the append, and how many groups were appended."""
        return self._slots.append_decodes(seq_ids, token_ids, group_ends)

    def append_slots_batch(
        self, items: Sequence[tuple[int, Sequence[int]]]
    ) -> list[list[tuple[int, int]]] | None:
        """``append_slots`` for many sequences under one lock; all or nothing."""
        return self._slots.append_batch(items)

    # ------------------------------------------------------------------ fork / free
    def fork(self, parent_seq_id: int, child_seq_id: int) -> None:
        """The child shares every block of the parent (ref counts +1); the shared partial last
        block is copied on the first write of either (copy-on-write)."""
        with self.device_pool.writing():
            p = self._table(parent_seq_id)
            if child_seq_id in self._tables:
                raise DuplicateSequenceError(f"sequence {child_seq_id} already exists")
            target = self.device_pool if p.device is Device.DEVICE else self.host_pool
            target.share(p.blocks)
            self._tables[child_seq_id] = BlockTable(
                child_seq_id, list(p.blocks), p.num_tokens, p.device, 0, list(p.hashes),
                list(p.tail), p.num_registered, p.root, p.extra,
                list(p.tokens) if p.tokens is not None else None, p.num_computed,
                p.copy_pending)
            if p.device is Device.HOST:
                self.counters.num_swapped_seqs += 1

    def free(self, seq_id: int) -> None:
        """Release a sequence's blocks, tail first (so a prompt's head stays cached longest)."""
        self.free_batch((seq_id,))

    def free_batch(self, seq_ids: Sequence[int]) -> None:
        """Free many sequences under one lock. Unknown ids raise before anything changes."""
        now = time.monotonic()
        with self.device_pool.writing():
            tables = [self._table(s) for s in seq_ids]
            if len(set(seq_ids)) != len(seq_ids):
                raise UnknownSequenceError("a sequence is listed twice in free_batch")
            for t in tables:
                del self._tables[t.seq_id]
                self._release_table(t, now)

    def _release_table(self, t: BlockTable, now: float) -> None:
        c = self.counters
        if t.device is Device.HOST:
            self.host_pool.release(t.blocks[::-1], now)
            self._swap.host_released([t])
            c.num_swapped_seqs -= 1
        else:
            c.used_slots -= self.device_pool.release_table(t.blocks,
                                                           t.last_block_fill(self.block_size),
                                                           now)

    # ------------------------------------------------------------------ queries
    def has_seq(self, seq_id: int) -> bool:
        return seq_id in self._tables

    def get_block_table(self, seq_id: int) -> list[int]:
        """A copy of the sequence's physical block ids."""
        return list(self._table(seq_id).blocks)

    def get_num_tokens(self, seq_id: int) -> int:
        return self._table(seq_id).num_tokens

    def get_device(self, seq_id: int) -> Device:
        return self._table(seq_id).device

    def get_prefix_hits(self, block_hashes: Sequence[bytes]) -> int:
        """Leading blocks of ``block_hashes`` cached on the device now (no reference taken)."""
        index = self.device_pool.index
        return 0 if index is None else index.prefix_hits(block_hashes)

    def seq_ids(self) -> list[int]:
        return list(self._tables)

    # ------------------------------------------------------------------ invariants
    def check_invariants(self) -> None:
        """Raise InvariantError if pools, tables and counters disagree."""
        pool = self.device_pool
        with pool.writing(), self.host_pool.writing():
            dev: Counter[int] = Counter()
            host: Counter[int] = Counter()
            slots: dict[int, int] = {}
            bs = self.block_size
            for s, t in self._tables.items():
                if t.seq_id != s:
                    raise InvariantError(f"table keyed {s} says it is {t.seq_id}")
                t.check_invariants(bs, self.caching)
                (dev if t.device is Device.DEVICE else host).update(t.blocks)
                if t.device is Device.DEVICE:
                    for i, b in enumerate(t.blocks):
                        f = t.block_fill(i, bs)
                        if slots.setdefault(b, f) != f:
                            raise InvariantError(f"block {b} has two fills")
            dev.update(self._defrag.reserved_blocks())
            dev.update(self._lender.lent(Device.DEVICE))
            host.update(self._lender.lent(Device.HOST))
            pool.check_invariants(dev)
            self.host_pool.check_invariants(host)
            used = sum(slots.values())
            if used != self.counters.used_slots:
                raise InvariantError(f"used slots counter {self.counters.used_slots} != {used}")

    # ------------------------------------------------------------------ lent blocks (lending.py)
    def lend(self, device: Device, n: int) -> list[int] | None:
        """``n`` blocks of ``device``'s pool, ref 1, in no table (the remote tier's staging:
        fetched bytes land in lent host blocks, stored bytes are copied out through them),
        or None when the pool is short. Counted by ``check_invariants`` until returned."""
        return self._lender.lend(device, n)

    def give_back(self, device: Device, block_ids: Sequence[int]) -> None:
        """Return lent blocks (unhashed: to the free list)."""
        self._lender.give_back(device, block_ids)

    def lend_host(self, n: int) -> list[int] | None:
        return self._lender.lend(Device.HOST, n)

    def return_host(self, block_ids: Sequence[int]) -> None:
        self._lender.give_back(Device.HOST, block_ids)

    def adopt_prefix(self, block_ids: Sequence[int], hashes: Sequence[bytes],
                     first_depth: int) -> int:
        """Lent device blocks whose bytes were written (the remote prefetch's copy completed)
        join the prefix cache under ``hashes`` (chain hashes, block ``i`` at depth
        ``first_depth + i``) as evictable blocks; returns how many became findable.
        NOTE(confirm): called only after the copy, like a swap-in's hashes (no prompt hits
        unwritten bytes)."""
        return self._lender.adopt_prefix(block_ids, hashes, first_depth)

    def set_evict_hook(self, hook) -> None:
        """``hook(block, hash)`` runs under the lock before an evicted cached block is reused
        (the remote write-back path); None removes it. No-op without prefix caching."""
        self._lender.set_evict_hook(hook)

    # ------------------------------------------------------------------ swap (swap.py)
    def can_swap_out(self, seq_ids: Sequence[int]) -> bool:
        """Whether the host pool has room for the group's distinct device blocks."""
        return self._swap.can_swap_out(seq_ids)

    def swap_out(self, seq_ids: Sequence[int]) -> list[tuple[int, int]] | None:
        """Move a group to the host pool. Returns ``(device_block, host_block)`` copies, one per
        distinct block, or None when the host pool is short (nothing changes)."""
        return self._swap.swap_out(seq_ids)

    def can_swap_in(self, seq_ids: Sequence[int]) -> AllocStatus:
        """OK / LATER / NEVER for bringing a swapped group back (``admission(swapped=...)``)."""
        return self.admission(swapped=seq_ids).status

    def swap_in(self, seq_ids: Sequence[int]) -> list[tuple[int, int]] | None:
        """Bring a group back to the device. Returns ``(host_block, device_block)`` copies; a
        full block still in the device prefix cache is reused, not copied. None when the
        device pool is short (nothing changes). NOTE(copy-pending): the copied blocks carry no
        hash until ``mark_computed`` confirms the copy, so no prompt can hit unwritten bytes."""
        return self._swap.swap_in(seq_ids)

    # ------------------------------------------------------------------ defrag (defrag.py)
    def plan_defrag(self, max_moves: int | None = None) -> DefragPlan | None:
        """Plan moves that pack live blocks into ids ``[0, live)``; None if nothing to move.
        The destinations are reserved (never handed out) until commit or abort."""
        return self._defrag.plan(max_moves)

    def commit_defrag(self, plan: DefragPlan) -> DefragResult:
        """Remap the moves whose source is unchanged (after the copies and any compute that read
        the old tables completed); the others are released for a re-plan."""
        return self._defrag.commit(plan)

    def abort_defrag(self, plan: DefragPlan) -> None:
        """The copies failed or were cancelled: release every reserved destination."""
        self._defrag.abort(plan)

    # ------------------------------------------------------------------ snapshots (stats.py)
    def stats(self) -> ManagerStats:
        """Counters of both pools and the manager, consistent, lock-free (seqlock read)."""
        return self._reader.stats()

    def fragmentation(self) -> FragmentationStats:
        """Internal and external fragmentation of the device pool, lock-free, memoised."""
        return self._reader.fragmentation()
