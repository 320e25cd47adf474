"""BlockSpaceManager: block tables, admission, append with copy-on-write, fork and free.

By composition: the manager owns the block tables and a ``ManagerCounters`` (stats.py), and
lends both to its components, which callers reach by name::

    mgr.prompts   PromptAllocator (prompt_alloc.py): batched allocation, prefix hits
    mgr.slots     SlotWriter (slots.py): a decode step's appends, hash registration
    mgr.swap      SwapPlanner (swap.py): swap_out / swap_in of a group
    mgr.defrag    DefragPlanner (defrag.py): plan / commit / abort
    mgr.stats     StatsReader (stats.py): ``mgr.stats()`` snapshots, ``.fragmentation()``
    mgr.lender    BlockLender (lending.py): blocks lent to the remote tier outside any table

The manager itself keeps what spans them: admission, allocation of one request, the
per-sequence append, fork, free, the table queries and the invariant check. The per-device
pools (pool.py, with a prefix_index.py when caching) are driven only through their public API.

Admission (vLLM v0's table; ``W`` = watermark blocks, ``R`` = blocks the prompt needs)::

    total - R < W          -> NEVER   (cannot fit even in an empty pool)
    free  - R' >= W        -> OK      (R' = R minus prefix hits on blocks already in use)
    otherwise              -> LATER

Locking: every public mutator runs inside the device pool's writer section (and the host
pool's, for swaps and while a sequence is swapped out, always device first) for its whole
body, so ``stats()`` from another thread sees either all of a call or none of it.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext

from kvpool.config import CacheConfig
from kvpool.core.block import Admission, AllocStatus, Device, PoolObserver
from kvpool.core.block_table import BlockTable, BlockTables, SeqAlloc
from kvpool.core.defrag import DefragPlanner
from kvpool.core.eviction import EvictionPolicy
from kvpool.core.hashing import BlockHasher, ExtraKey, check_token_ids
from kvpool.core.lending import BlockLender
from kvpool.core.pool import BlockPool
from kvpool.core.prompt_alloc import PromptAllocator
from kvpool.core.slots import SlotWriter
from kvpool.core.stats import ManagerCounters, StatsReader
from kvpool.core.swap import SwapPlanner
from kvpool.errors import (DuplicateSequenceError, InvalidBlockError, InvariantError,
                           UnknownSequenceError)

_DEVICE = Device.DEVICE  # NOTE(speed): a module global, not an enum attribute per token


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
        self.device_pool = d = BlockPool(
            Device.DEVICE, config.num_device_blocks, bs, caching=config.enable_prefix_caching,
            policy=policy if policy is not None else config.eviction_policy,
            verify_hits=config.verify_hits, observer=observer)
        self.host_pool = BlockPool(Device.HOST, config.num_host_blocks, bs)
        self.caching = config.enable_prefix_caching
        self.hasher = BlockHasher(bs, config.model_id, config.hash_algo)
        self.watermark_blocks = config.watermark_blocks
        self._tables = BlockTables()  # owned here, lent to the components
        self.counters = ManagerCounters()  # owned here, updated by the components too
        self.swap = SwapPlanner(d, self.host_pool, self._tables, self.counters,
                                observer if self.caching else None)
        self.prompts = PromptAllocator(d, self._tables, self.counters, self.hasher)
        self.slots = SlotWriter(d, self._tables, self.counters, self.hasher)
        self.defrag = DefragPlanner(d, self._tables, self.counters)
        self.stats = StatsReader(d, self.host_pool, self.counters, self._tables)
        # blocks lent out of the tables (remote prefetch / write staging), by pool
        self.lender = BlockLender(d, self.host_pool)
        # NOTE(speed): append_slots runs once per decoded token; fetch these once
        self._writing = d.writing()
        self._lock = self._writing.lock
        self._ref_count = d.ref_count

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Hold the pool locks across many calls: one acquisition for a whole batch (the
        asyncio front uses this). Public methods called inside nest re-entrantly."""
        with self.device_pool.writing(), self.host_pool.writing():
            yield

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
          ``F + n * (ceil(T / bs) - F)`` blocks, as many as they hold while decoding
          (prefix hits: ``prompts.need``);
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
            capacity, need = self.swap.need(self.swap.group(swapped, Device.HOST))
            what = f"swapped request needs {capacity} blocks to resume and decode, but"
        else:
            capacity, need = self.prompts.need(prompts, shared_blocks)
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

    # ------------------------------------------------------------------ allocate
    def allocate(self, seq_ids: Sequence[int], token_ids: Sequence[int], *,
                 block_hashes: Sequence[bytes] | None = None, cache_salt: str | None = None,
                 extra_keys: Sequence[ExtraKey] | None = None,
                 skip_read: bool = False) -> int | None:
        """Create block tables for ``seq_ids``, all sharing the prompt's blocks.

        Returns the number of prompt tokens served from the prefix cache (their KV is already
        computed; 0 with ``skip_read``, NOTE(skip-read) in block_table.py), or None when the
        pool cannot hold the prompt now (nothing changes). Many requests under one lock:
        ``prompts.allocate_batch``."""
        return self.prompts.allocate_batch([SeqAlloc(seq_ids, token_ids, block_hashes,
                                                     cache_salt, extra_keys,
                                                     skip_read=skip_read)])[0]

    # ------------------------------------------------------------------ computed / append
    def mark_computed(self, seq_id: int, num_tokens: int | None = None) -> None:
        """The KV of the first ``num_tokens`` tokens (default: all) is written: index their full
        blocks in the prefix cache so later prompts can hit them.

        Also the confirmation of a swap-in: the step that ran the sequence's swap-in copies
        completed, so its blocks hold their bytes and may be hashed from now on (until then
        ``append_slots`` registers nothing for it)."""
        with self.device_pool.writing():
            t = self._tables[seq_id]
            n = t.num_tokens if num_tokens is None else min(num_tokens, t.num_tokens)
            if n > t.num_computed:
                t.num_computed = n
            if t.device is Device.DEVICE:
                t.copy_pending = False
            self.slots.register_upto(t, n)

    def append_slots(self, seq_id: int, token_ids: Sequence[int]) -> list[tuple[int, int]] | None:
        """Reserve slots for ``token_ids`` (the tokens whose KV the next step writes); all
        earlier tokens count as computed. Returns the copy-on-write ``(src, dst)`` pairs to copy
        before writing, or None if the pool is short (nothing changes). A whole decode step
        under one lock: ``slots.append_decodes``; all or nothing: ``slots.append_batch``."""
        with self._lock:
            t = self._tables[seq_id]  # UnknownSequenceError when unknown (BlockTables)
            if t.device is not _DEVICE:
                raise InvalidBlockError(f"sequence {seq_id} is swapped out")
            r0 = (n0 := t.num_tokens) % (bs := self.block_size)
            caching, c = self.caching, self.counters
            # NOTE(fast-path): decode's common case (15 of 16 tokens at bs 16): one token into the
            # sequence's own partial block: no copy, new block, hash or registration. Readers see
            # one store, used_slots (seqlock.py single-store, its version bump inlined); the ref
            # count is read only while a live table may share its tail (NOTE(tail-sharers)).
            if (0 < r0 < bs - 1 and len(token_ids) == 1
                    and (not c.tail_sharers or self._ref_count(t.blocks[-1]) == 1)
                    and (not caching or t.num_registered == n0 // bs)):
                if caching:  # kept ids (NOTE(event-tokens)) only with caching too
                    tok = token_ids[0]
                    if tok < 0 or tok > 1073741823:  # NOTE(token-range): two int compares; an
                        check_token_ids(token_ids)  # id outside [0, 2**30): the exact check
                    t.tail.append(tok)
                    if t.tokens is not None:
                        t.tokens.append(tok)
                t.num_computed = n0
                t.num_tokens = n0 + 1
                c.used_slots += 1
                w = self._writing
                v = w.version
                if not v & 1:
                    w.version = v + 2
                return []
            with self._writing:  # one id: the O(1) test above (NOTE(token-range))
                if caching and (len(token_ids) != 1 or not 0 <= token_ids[0] <= 1073741823):
                    check_token_ids(token_ids)
                if self.slots.need(t, len(token_ids)) > self.device_pool.takeable():
                    return None
                return self.slots.append_locked(t, token_ids)

    # ------------------------------------------------------------------ fork / free
    def fork(self, parent_seq_id: int, child_seq_id: int) -> None:
        """The child shares every block of the parent (ref counts +1); the shared partial last
        block is copied on the first write of either (copy-on-write)."""
        with self.device_pool.writing(), self._host_too():
            p = self._tables[parent_seq_id]
            if child_seq_id in self._tables:
                raise DuplicateSequenceError(f"sequence {child_seq_id} already exists")
            target = self.device_pool if p.device is Device.DEVICE else self.host_pool
            target.share(p.blocks)
            self._tables[child_seq_id] = child = BlockTable(
                child_seq_id, list(p.blocks), p.num_tokens, p.device, list(p.hashes),
                list(p.tail), p.num_registered, p.root, p.extra,
                list(p.tokens) if p.tokens is not None else None, p.num_computed,
                p.copy_pending, shares_tail=True, salt=p.salt)
            self.counters.tail_sharers += 1 + (not p.shares_tail)
            p.shares_tail = True
            if p.device is Device.HOST:
                self.counters.num_swapped_seqs += 1
                self.swap.host_forked(child)  # NOTE(host-fork)

    def free(self, *seq_ids: int) -> None:
        """Release the sequences' blocks under one lock, each table tail first (so a prompt's
        head stays cached longest). Unknown or repeated ids raise before anything changes."""
        now = time.monotonic()
        with self.device_pool.writing(), self._host_too():
            tables = [self._tables[s] for s in seq_ids]
            if len(set(seq_ids)) != len(seq_ids):
                raise UnknownSequenceError("a sequence is listed twice in free")
            for t in tables:
                del self._tables[t.seq_id]
                self._release_table(t, now)

    def _host_too(self) -> AbstractContextManager:
        """The host pool's writer section while a sequence is swapped out, else nothing (inside
        the device's). NOTE(host-lock): fork and free change the host pool for a swapped
        sequence, and the lender's host calls change it holding that lock alone: under the
        device lock only, a free ran inside a lend and left a lent block on the free list."""
        return self.host_pool.writing() if self.counters.num_swapped_seqs else nullcontext()

    def _release_table(self, t: BlockTable, now: float) -> None:
        c = self.counters
        c.tail_sharers -= t.shares_tail
        if t.device is Device.HOST:
            self.host_pool.release(t.blocks[::-1], now)
            self.swap.host_released([t])
            c.num_swapped_seqs -= 1
        else:
            c.used_slots -= self.device_pool.release_table(t.blocks, t.num_tokens, now)

    def reset_prefix_cache(self) -> bool:
        """Drop every cached block (vLLM's reset, docs/architecture.md "Development routes"),
        only while no sequence holds a block of either pool and no device block is lent or
        reserved; else False and nothing changes. The observer hears the cache cleared."""
        pool = self.device_pool
        with pool.writing(), self.host_pool.writing():
            if len(self._tables) or pool.num_free_blocks != pool.num_blocks:
                return False
            pool.reset_prefix_cache()
            return True

    # ------------------------------------------------------------------ queries
    def has_seq(self, seq_id: int) -> bool:
        return seq_id in self._tables

    def get_block_table(self, seq_id: int) -> list[int]:
        """A copy of the sequence's physical block ids."""
        return list(self._tables[seq_id].blocks)

    def get_num_tokens(self, seq_id: int) -> int:
        return self._tables[seq_id].num_tokens

    def get_device(self, seq_id: int) -> Device:
        return self._tables[seq_id].device

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
            dev.update(self.defrag.reserved_blocks())
            dev.update(self.lender.lent(Device.DEVICE))
            host.update(self.lender.lent(Device.HOST))
            pool.check_invariants(dev)
            self.host_pool.check_invariants(host)
            swapped = sum(1 for t in self._tables.values() if t.device is Device.HOST)
            if swapped != self.counters.num_swapped_seqs:
                raise InvariantError(f"swapped sequences counter {self.counters.num_swapped_seqs}"
                                     f" != {swapped}")
            self._check_tail_sharers(bs)
            used = sum(slots.values())
            if used != self.counters.used_slots:
                raise InvariantError(f"used slots counter {self.counters.used_slots} != {used}")

    def _check_tail_sharers(self, bs: int) -> None:
        """NOTE(tail-sharers): the counter counts the flagged tables, and only a flagged
        table's partial last block is shared (the decode fit check relies on it)."""
        flagged = sum(t.shares_tail for t in self._tables.values())
        if flagged != self.counters.tail_sharers:
            raise InvariantError(f"tail sharers counter {self.counters.tail_sharers} != "
                                 f"{flagged}")
        ref = self.device_pool.ref_count
        for t in self._tables.values():
            if (t.device is Device.DEVICE and t.num_tokens % bs and not t.shares_tail
                    and ref(t.blocks[-1]) > 1):
                raise InvariantError(f"seq {t.seq_id} shares its partial last block unflagged")
