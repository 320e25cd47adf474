"""BlockSpaceManager: block tables, admission, append with copy-on-write, fork and free.

Swap lives in ``swap.py`` and defragmentation in ``defrag.py`` (mixins of this class); the
per-device pools in ``allocator.py`` / ``cached_allocator.py``.

Admission (the seeds' table; ``W`` = watermark blocks, ``R`` = blocks the prompt needs)::

    total - R < W          -> NEVER   (cannot fit even in an empty pool)
    free  - R' >= W        -> OK      (R' = R minus prefix hits on blocks already in use)
    otherwise              -> LATER

Locking: every public mutator holds the device pool's lock (and the host pool's, for swaps,
always device first) for its whole body, bumping the pools' seqlock versions, so ``stats()``
from another thread sees either all of a call or none of it.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from kvpool.config import CacheConfig
from kvpool.core.allocator import UncachedBlockAllocator
from kvpool.core.block import Admission, AllocStatus, Device
from kvpool.core.block_table import BlockTable
from kvpool.core.cached_allocator import CachedBlockAllocator
from kvpool.core.defrag import DefragMixin
from kvpool.core.eviction import EvictionPolicy
from kvpool.core.hashing import BlockHasher, ExtraKey, encode_extra_keys
from kvpool.core.stats import StatsMixin
from kvpool.core.swap import SwapMixin
from kvpool.errors import (DuplicateSequenceError, InvalidBlockError, InvariantError,
                           UnknownSequenceError)


@dataclass(frozen=True, slots=True)
class SeqAlloc:
    """One allocation in a batch: sequences ``seq_ids`` share the prompt ``token_ids``."""

    seq_ids: Sequence[int]
    token_ids: Sequence[int]
    block_hashes: Sequence[bytes] | None = None
    cache_salt: str | None = None
    extra_keys: Sequence[ExtraKey] | None = None


class BlockSpaceManager(SwapMixin, DefragMixin, StatsMixin):
    """Maps sequences to physical blocks of a device pool and a host (swap) pool.

    Invariant (``check_invariants``): every block's ref count equals the number of table
    entries (plus defrag reservations) pointing at it; ``_used_slots`` equals the filled slots
    of the distinct used device blocks; every table satisfies BlockTable's invariant.
    """

    def __init__(self, config: CacheConfig, policy: EvictionPolicy | None = None) -> None:
        self.config = config
        self.block_size = bs = config.block_size
        if config.enable_prefix_caching:
            self.device_pool: UncachedBlockAllocator = CachedBlockAllocator(
                Device.DEVICE, config.num_device_blocks, bs,
                policy if policy is not None else config.eviction_policy, config.verify_hits)
        else:
            self.device_pool = UncachedBlockAllocator(Device.DEVICE, config.num_device_blocks, bs)
        self.host_pool = UncachedBlockAllocator(Device.HOST, config.num_host_blocks, bs)
        self.caching = config.enable_prefix_caching
        self.hasher = BlockHasher(bs, config.model_id, config.hash_algo)
        self.watermark_blocks = config.watermark_blocks
        self._tables: dict[int, BlockTable] = {}
        self._init_stats()
        self._init_defrag()

    # ------------------------------------------------------------------ helpers
    def _table(self, seq_id: int) -> BlockTable:
        t = self._tables.get(seq_id)
        if t is None:
            raise UnknownSequenceError(f"sequence {seq_id} has no block table (never "
                                       "allocated, or already freed)")
        return t

    def num_required_blocks(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    @contextmanager
    def batch(self) -> Iterator[None]:
        """Hold the pool locks across many calls: one acquisition for a whole batch (the
        asyncio front uses this). Public methods called inside nest re-entrantly."""
        d, h = self.device_pool, self.host_pool
        _v_d = d._enter()
        _v_h = h._enter()
        try:
            yield
        finally:
            h._exit(_v_h)
            d._exit(_v_d)

    def hash_prompt(self, token_ids: Sequence[int], cache_salt: str | None = None,
                    extra_keys: Sequence[ExtraKey] | None = None) -> list[bytes]:
        """Chained hashes of the prompt's full blocks (compute once, pass to can_allocate and
        allocate as ``block_hashes``)."""
        return self.hasher.hash_blocks(token_ids, cache_salt, extra_keys)

    def _hits(self, hashes: Sequence[bytes], num_tokens: int,
              token_ids: Sequence[int] | None = None) -> list[int]:
        """Blocks of the leading cached run, capped so at least one prompt token is left to
        compute (its logits are needed) in a block of the sequence's own. Lock held."""
        if not self.caching or not hashes:
            return []
        pool: CachedBlockAllocator = self.device_pool  # type: ignore[assignment]
        limit = min(len(hashes), (num_tokens - 1) // self.block_size)
        out: list[int] = []
        bs = self.block_size
        verify = pool._tokens is not None and token_ids is not None
        if not verify:  # NOTE(speed): the common case, a plain dict walk
            get = pool._cached.get
            for i in range(limit):
                b = get(hashes[i])
                if b is None:
                    break
                out.append(b)
            return out
        for i in range(limit):
            b = pool._lookup(hashes[i], token_ids[i * bs:(i + 1) * bs] if verify else None)
            if b is None:
                break
            out.append(b)
        return out

    # ------------------------------------------------------------------ admission
    def admission(self, prompts: Sequence[tuple[int, Sequence[bytes]]] = (), *,
                  swapped: Sequence[int] = (), freeable: int = 0) -> Admission:
        """THE admission rule (the module docstring's table), for one of:

        - ``prompts``: ``(num_tokens, block_hashes)`` per prefill unit of one request (a
          recomputed ``n > 1`` request whose outputs diverged has one unit per sequence);
        - ``swapped``: the sequence ids of a swapped group, to come back and decode once.

        ``freeable`` counts blocks the caller would free first (priority preemption plans
        with it). NOTE(never): NEVER is judged on the blocks the request needs in an empty
        pool, the same way for both kinds, so a swapped group is NEVER exactly when
        recomputing it would be NEVER too: it has outgrown what admission accepts.
        """
        if bool(prompts) == bool(swapped):
            raise ValueError("admission takes prompts or swapped, exactly one of them")
        pool = self.device_pool
        if swapped:
            capacity, need = self._swap_in_need(self._group(swapped, Device.HOST))
            what = f"swapped request needs {capacity} blocks to resume and decode, but"
        else:
            capacity = need = 0
            for num_tokens, hashes in prompts:
                if num_tokens <= 0:
                    raise ValueError("num_tokens must be >= 1")
                required = self.num_required_blocks(num_tokens)
                capacity += required
                need += required
                if self.caching and hashes:  # hits on blocks in use cost nothing; hits on
                    for b in self._hits(hashes, num_tokens):  # evictable ones cost a block
                        if pool.ref_count(b) > 0:
                            need -= 1
            what = f"needs {capacity} blocks of {self.block_size} tokens, but"
        total, w = pool.num_blocks, self.watermark_blocks
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
        out: list[int | None] = []
        hashed = []
        for r in reqs:  # hash outside the lock: it is the expensive part
            if not r.seq_ids:
                raise ValueError("allocate needs at least one seq id")
            if len(r.token_ids) == 0:
                raise ValueError("cannot allocate an empty prompt")
            hs = r.block_hashes
            if self.caching and hs is None:
                hs = self.hasher.hash_blocks(r.token_ids, r.cache_salt, r.extra_keys)
            hashed.append(hs or ())
        pool = self.device_pool
        _v_pool = pool._enter()
        try:
            for r, hs in zip(reqs, hashed):
                out.append(self._allocate_locked(r, hs))
        finally:
            pool._exit(_v_pool)
        return out

    def _allocate_locked(self, r: SeqAlloc, hashes: Sequence[bytes]) -> int | None:
        tables = self._tables
        for s in r.seq_ids:
            if s in tables:
                raise DuplicateSequenceError(f"sequence {s} already has a block table")
        if len(set(r.seq_ids)) != len(r.seq_ids):
            raise DuplicateSequenceError("seq_ids must be distinct")
        bs = self.block_size
        n = len(r.token_ids)
        nseq = len(r.seq_ids)
        pool = self.device_pool
        verify = self.caching and pool._tokens is not None  # type: ignore[attr-defined]
        hits = self._hits(hashes, n, r.token_ids if verify else None)
        need = self.num_required_blocks(n) - len(hits)
        ref = pool._ref
        revive = sum(1 for b in hits if ref[b] == 0)
        self.prefix_query_tokens += n if self.caching else 0
        if need > pool.num_free_blocks - revive:
            return None
        for b in hits:
            pool._acquire(b, nseq)  # type: ignore[attr-defined]
        new = pool._alloc(need, nseq)
        assert new is not None  # checked above
        blocks = hits + new
        n_full = n // bs
        root = self.hasher.root(r.cache_salt) if self.caching else b""
        extra = encode_extra_keys(r.extra_keys) if self.caching else b""
        tail = list(r.token_ids[n_full * bs:]) if self.caching else []
        hs = list(hashes[:n_full]) if self.caching else []
        for s in r.seq_ids:
            tables[s] = BlockTable(s, list(blocks), n, Device.DEVICE, 0, list(hs), list(tail),
                                   len(hits), root, extra,
                                   list(r.token_ids) if verify else None, len(hits) * bs)
        cached = len(hits) * bs
        self.prefix_hit_tokens += cached
        self._used_slots += n - cached + (bs * revive)
        return cached

    # ------------------------------------------------------------------ computed / hashes
    def mark_computed(self, seq_id: int, num_tokens: int | None = None) -> None:
        """The KV of the first ``num_tokens`` tokens (default: all) is written: index their full
        blocks in the prefix cache so later prompts can hit them.

        Also the confirmation of a swap-in: the step that ran the sequence's swap-in copies
        completed, so its blocks hold their bytes and may be hashed from now on (until then
        ``append_slots`` registers nothing for it)."""
        pool = self.device_pool
        _v_pool = pool._enter()
        try:
            t = self._table(seq_id)
            n = t.num_tokens if num_tokens is None else min(num_tokens, t.num_tokens)
            if n > t.num_computed:
                t.num_computed = n
            if t.device is Device.DEVICE:
                t.copy_pending = False
            self._register_upto(t, n)
        finally:
            pool._exit(_v_pool)

    def _register_upto(self, t: BlockTable, num_tokens: int) -> None:
        if not self.caching or t.device is not Device.DEVICE or t.copy_pending:
            return  # NOTE(copy-pending): a hash only once the bytes are known written
        upto = min(num_tokens // self.block_size, len(t.hashes))
        i = t.num_registered
        if i >= upto:
            return
        pool: CachedBlockAllocator = self.device_pool  # type: ignore[assignment]
        bs, blocks, hashes, toks = self.block_size, t.blocks, t.hashes, t.tokens
        while i < upto:
            pool._register(blocks[i], hashes[i], i,
                           toks[i * bs:(i + 1) * bs] if toks is not None else None)
            i += 1
        t.num_registered = upto

    # ------------------------------------------------------------------ append (decode)
    def _append_need(self, t: BlockTable, k: int) -> int:
        bs = self.block_size
        n0 = t.num_tokens
        need = -(-(n0 + k) // bs) - len(t.blocks)
        if n0 % bs and self.device_pool._ref[t.blocks[-1]] > 1:
            need += 1  # NOTE(cow): the shared partial last block is copied before the write
        return need

    def can_append_slots(self, seq_ids: Sequence[int], num_new_tokens: int = 1) -> bool:
        """Whether every listed running sequence can take ``num_new_tokens`` more tokens.

        Exact need (new blocks plus copy-on-write copies); the seeds' bound of one block per
        sequence is its worst case for one token."""
        need = 0
        for s in seq_ids:
            t = self._table(s)
            if t.device is not Device.DEVICE:
                raise InvalidBlockError(f"sequence {s} is swapped out; swap it in first")
            need += self._append_need(t, num_new_tokens)
        return need <= self.device_pool.num_free_blocks

    def append_slots(self, seq_id: int, token_ids: Sequence[int]) -> list[tuple[int, int]] | None:
        """Reserve slots for ``token_ids`` (the tokens whose KV the next step writes).

        Everything already in the table counts as computed from now on. Returns the
        copy-on-write ``(src, dst)`` block pairs the runtime must copy before writing, or None
        if the pool is short (nothing changes). (Hot path of decoding: one lock acquisition.)"""
        pool = self.device_pool
        with pool.lock:
            v = pool._seq
            pool._seq = v | 1
            try:
                t = self._tables.get(seq_id)
                if t is None or t.device is not Device.DEVICE:
                    self._table(seq_id)  # raises UnknownSequenceError
                    raise InvalidBlockError(f"sequence {seq_id} is swapped out")
                bs = self.block_size
                n0 = t.num_tokens
                r0 = n0 % bs
                if (r0 and len(token_ids) == 1 and r0 < bs - 1 and t.tokens is None
                        and pool._ref[t.blocks[-1]] == 1
                        and (not self.caching or t.num_registered == n0 // bs)):
                    # NOTE(fast-path): decode's common case (15 of 16 tokens at bs 16): one
                    # token into the sequence's own partial block, no copy, no new block, no
                    # block completed (so no hash), nothing left to register
                    t.num_computed = n0
                    t.num_tokens = n0 + 1
                    t.version += 1
                    self._used_slots += 1
                    if self.caching:
                        t.tail.append(token_ids[0])
                    return []
                need = (n0 + len(token_ids) + bs - 1) // bs - len(t.blocks)
                if r0 and pool._ref[t.blocks[-1]] > 1:
                    need += 1
                if need > 0 and need > pool.num_free_blocks:
                    return None
                return self._append_locked(t, token_ids)
            finally:
                if not v & 1:
                    pool._seq = v + 2

    def append_slots_batch(
        self, items: Sequence[tuple[int, Sequence[int]]]
    ) -> list[list[tuple[int, int]]] | None:
        """``append_slots`` for many sequences under one lock; all or nothing."""
        pool = self.device_pool
        _v_pool = pool._enter()
        try:
            tables = [self._table(s) for s, _ in items]
            need = 0
            for t, (_, toks) in zip(tables, items):
                if t.device is not Device.DEVICE:
                    raise InvalidBlockError(f"sequence {t.seq_id} is swapped out")
                need += self._append_need(t, len(toks))
            if need > pool.num_free_blocks:
                return None
            return [self._append_locked(t, toks) for t, (_, toks) in zip(tables, items)]
        finally:
            pool._exit(_v_pool)

    def _append_locked(self, t: BlockTable, toks: Sequence[int]) -> list[tuple[int, int]]:
        bs = self.block_size
        pool = self.device_pool
        n0 = t.num_tokens
        k = len(toks)
        blocks = t.blocks
        t.num_computed = n0  # appending means every earlier token was computed
        cow: list[tuple[int, int]] = []
        r0 = n0 % bs
        if r0:
            if pool._ref[blocks[-1]] > 1:  # NOTE(cow): the shared partial block is copied first
                src = blocks[-1]
                dst = pool._alloc(1)[0]  # type: ignore[index]
                pool._ref[src] -= 1
                blocks[-1] = dst
                cow.append((src, dst))
                self._used_slots += r0
                self.cow_copies += 1
        if self.caching and t.num_registered < n0 // bs:
            self._register_upto(t, n0)  # full blocks written by earlier steps become hits
        extra = (n0 + k + bs - 1) // bs - len(blocks)
        if extra > 0:
            blocks += pool._alloc(extra)  # type: ignore[arg-type]
        t.num_tokens = n0 + k
        self._used_slots += k
        t.version += 1
        if self.caching:
            tail = t.tail
            tail += toks
            if t.tokens is not None:
                t.tokens += toks
            if len(tail) >= bs:
                hs = t.hashes
                parent = hs[-1] if hs else t.root
                while len(tail) >= bs:
                    parent = self.hasher.hash_block(parent, tail[:bs], t.extra)
                    hs.append(parent)
                    del tail[:bs]
        return cow

    # ------------------------------------------------------------------ fork / free
    def fork(self, parent_seq_id: int, child_seq_id: int) -> None:
        """The child shares every block of the parent (ref counts +1); the shared partial last
        block is copied on the first write of either (copy-on-write)."""
        pool = self.device_pool
        _v_pool = pool._enter()
        try:
            p = self._table(parent_seq_id)
            if child_seq_id in self._tables:
                raise DuplicateSequenceError(f"sequence {child_seq_id} already exists")
            target = pool if p.device is Device.DEVICE else self.host_pool
            target._incref(p.blocks)
            self._tables[child_seq_id] = BlockTable(
                child_seq_id, list(p.blocks), p.num_tokens, p.device, 0, list(p.hashes),
                list(p.tail), p.num_registered, p.root, p.extra,
                list(p.tokens) if p.tokens is not None else None, p.num_computed,
                p.copy_pending)
            if p.device is Device.HOST:
                self.num_swapped_seqs += 1
        finally:
            pool._exit(_v_pool)

    def free(self, seq_id: int) -> None:
        """Release a sequence's blocks, tail first (so a prompt's head stays cached longest)."""
        self.free_batch((seq_id,))

    def free_batch(self, seq_ids: Sequence[int]) -> None:
        """Free many sequences under one lock. Unknown ids raise before anything changes."""
        pool = self.device_pool
        now = time.monotonic()
        _v_pool = pool._enter()
        try:
            tables = [self._table(s) for s in seq_ids]
            if len(set(seq_ids)) != len(seq_ids):
                raise UnknownSequenceError("a sequence is listed twice in free_batch")
            for t in tables:
                del self._tables[t.seq_id]
                self._release_table(t, now)
        finally:
            pool._exit(_v_pool)

    def _release_table(self, t: BlockTable, now: float) -> None:
        if t.device is Device.HOST:
            self.host_pool._decref(t.blocks[::-1], now)
            self.num_swapped_seqs -= 1
        else:
            self._release_device_blocks(t, now)

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
        if not self.caching:
            return 0
        return self.device_pool.prefix_hits(block_hashes)  # type: ignore[attr-defined]

    def seq_ids(self) -> list[int]:
        return list(self._tables)

    # ------------------------------------------------------------------ invariants
    def check_invariants(self) -> None:
        """Raise InvariantError if pools, tables and counters disagree."""
        pool = self.device_pool
        _v_pool = pool._enter()
        _v_host_pool = self.host_pool._enter()
        try:
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
            dev.update(self._reserved_blocks())
            pool.check_invariants(dev)
            self.host_pool.check_invariants(host)
            used = sum(slots.values())
            if used != self._used_slots:
                raise InvariantError(f"used slots counter {self._used_slots} != {used}")
        finally:
            self.host_pool._exit(_v_host_pool)
            pool._exit(_v_pool)
