"""PromptAllocator: new block tables for admitted prompts, sharing their prefix-cache hits.

A prompt of ``n`` tokens takes ``ceil(n / bs)`` blocks: the leading run of its full blocks
already cached (``hits``, capped so at least one token is left to compute) plus fresh blocks
for the rest. Every sequence of the request gets its own table over the same blocks::

    n = 40, bs = 16, 2 of 2 full blocks cached     hits [ 7 ][ 3 ]   new [ 12: 8 of 16 ]
    but the cap (n - 1) // bs = 2 keeps both       tables s0, s1 -> [7, 3, 12], ref 2 each

A hit on an evictable block (ref 0) revives it: it leaves the free set like a fresh block,
so it costs one free block and its filled slots count as used again.

``SeqAlloc.share_with`` (a recomputed request whose sequences diverged): the new tables take
another table's leading full blocks, their common prefix, in place of hits they lack, so the
prefix is held once; an allocation of a batch that shares with a failed one fails too.

Locking: ``allocate_batch`` hashes outside the device pool's writer section (the expensive
part) and allocates inside it; ``hits`` assumes the caller holds it.
"""

from __future__ import annotations

from collections.abc import Sequence
from operator import attrgetter

from kvpool.core.block import Device
from kvpool.core.block_table import BlockTable, BlockTables, SeqAlloc
from kvpool.core.hashing import BlockHasher, check_token_ids, encode_extra_keys
from kvpool.core.pool import BlockPool
from kvpool.core.stats import ManagerCounters
from kvpool.errors import DuplicateSequenceError


_NUM_SHARED = attrgetter("num_shared")

# a request made ready outside the lock (PromptAllocator._prepare): its block hashes, chain
# root, encoded extra keys and the token ids of its partial last block
Prepared = tuple[Sequence[bytes], bytes, bytes, list[int]]


def check_hashes(hashes: Sequence[bytes], num_full: int) -> None:
    """NOTE(hash-input): caller-given block hashes are one per full block (an O(1) length
    test: a table with fewer or more is out of step with its tokens from the start) and
    distinct: a repeated hash (two blocks under one hash, a chain that loops) would hit one
    cached block twice, reviving and counting it twice. Only given hashes are checked (the
    hasher's chain never repeats), outside the lock; a ValueError before anything changes."""
    if len(hashes) != num_full:
        raise ValueError(f"block_hashes has {len(hashes)} hashes for {num_full} full blocks")
    if len(set(hashes)) != num_full:
        raise ValueError("block_hashes repeats a hash: one hash per distinct block")


def count_used(pool: BlockPool, block_ids: Sequence[int]) -> int:
    """How many of ``block_ids`` are in use (ref >= 1). NOTE(speed): C-level map/count over
    the pool's ``ref_count``, no Python call per id (admission asks this per prefix hit)."""
    refs = list(map(pool.ref_count, block_ids))
    return len(refs) - refs.count(0)


class PromptAllocator:
    """Allocation over the manager's tables (lent to it, owned by the manager) and its
    device pool; counts prefix queries, hits (first admissions and re-admissions apart:
    NOTE(preempted-queries)) and used slots into the manager's counters."""

    def __init__(self, device: BlockPool, tables: BlockTables,
                 counters: ManagerCounters, hasher: BlockHasher) -> None:
        self.device_pool = device
        self.tables = tables
        self.counters = counters
        self.hasher = hasher
        self.block_size = device.block_size
        self.caching = device.caching
        self.index = device.index  # None without prefix caching

    def hits(self, hashes: Sequence[bytes], num_tokens: int,
             token_ids: Sequence[int] | None = None) -> list[int]:
        """Blocks of the leading cached run, capped so at least one prompt token is left to
        compute (its logits are needed) in a block of the sequence's own. Lock held."""
        if self.index is None or not hashes:
            return []
        limit = min(len(hashes), (num_tokens - 1) // self.block_size)
        return self.index.leading_hits(hashes, limit, token_ids)

    def need(self, prompts: Sequence[tuple[int, Sequence[bytes]]],
             shared_blocks: int) -> tuple[int, int]:
        """(blocks the prefill units take in an empty pool, blocks they take from the free set
        now) for ``manager.admission``: units after the first reuse the first one's leading
        ``shared_blocks``; a hit on a block in use costs nothing, a hit on an evictable block
        costs one, like a miss (it leaves the free set)."""
        pool, bs = self.device_pool, self.block_size
        capacity = need = 0
        for i, (num_tokens, hashes) in enumerate(prompts):
            if num_tokens <= 0:
                raise ValueError("num_tokens must be >= 1")
            if shared_blocks * bs >= num_tokens:
                raise ValueError(f"{shared_blocks} shared blocks leave no token of a "
                                 f"{num_tokens}-token unit to compute")
            reused = shared_blocks if i else 0  # in use by the first unit: free here
            own = -(-num_tokens // bs) - reused
            capacity += own
            need += own
            if self.caching and hashes:
                need -= count_used(pool, self.hits(hashes, num_tokens)[reused:])
        return capacity, need

    def prefix_hits(self, block_hashes: Sequence[bytes]) -> int:
        """Leading blocks of ``block_hashes`` cached on the device now (no reference taken)."""
        return 0 if self.index is None else self.index.prefix_hits(block_hashes)

    def allocate_batch(self, reqs: Sequence[SeqAlloc]) -> list[int | None]:
        """Many allocations under one lock acquisition, each like ``manager.allocate``. Per
        request: the prompt tokens served from the prefix cache, or None when the pool cannot
        hold it now (nothing changes for it). Misuse of any request raises before any
        request changes anything (NOTE(batch-first))."""
        prepared = [self._prepare(r) for r in reqs]  # outside the lock: hashing is the cost
        with self.device_pool.writing():
            self._check_batch(reqs, prepared)
            out: list[int | None] = []
            failed: set[int] = set()  # seq ids whose allocation failed in this batch
            for r, prep in zip(reqs, prepared):
                res = None if r.share_with in failed else self._allocate_locked(r, prep)
                if res is None:
                    failed.update(r.seq_ids)
                out.append(res)
            return out

    def _prepare(self, r: SeqAlloc) -> Prepared:
        """A request's block hashes, chain root, encoded extra keys and tail ids (caching on;
        nothing otherwise), each checked: what can raise raises here, before the batch takes
        the lock. Caller-given hashes: ``check_hashes``; NOTE(token-range): the tail's ids,
        hashed only when later appends fill its block, are checked now."""
        if not r.seq_ids:
            raise ValueError("allocate needs at least one seq id")
        n = len(r.token_ids)
        if n == 0:
            raise ValueError("cannot allocate an empty prompt")
        if not self.caching:
            return (), b"", b"", []
        n_full = n // self.block_size
        hs = r.block_hashes
        if hs is None:
            hs = self.hasher.hash_blocks(r.token_ids, r.cache_salt, r.extra_keys)
        else:
            check_hashes(hs, n_full)
        tail = list(r.token_ids[n_full * self.block_size:])
        if tail:
            check_token_ids(tail)
        return hs, self.hasher.root(r.cache_salt), encode_extra_keys(r.extra_keys), tail

    def _check_batch(self, reqs: Sequence[SeqAlloc], prepared: Sequence[Prepared]) -> None:
        """NOTE(batch-first): under the lock, before any table is made: every seq id of the
        batch is new and listed once, and every ``share_with`` is valid (``_check_share``)."""
        ids = [s for r in reqs for s in r.seq_ids]
        tables = self.tables
        if not tables.keys().isdisjoint(ids):  # NOTE(speed): C-level; the loop names one
            s = next(s for s in ids if s in tables)
            raise DuplicateSequenceError(f"sequence {s} already has a block table")
        if len(set(ids)) != len(ids):
            raise DuplicateSequenceError("seq_ids must be distinct")
        if any(map(_NUM_SHARED, reqs)):
            earlier: dict[int, tuple[int, Sequence[bytes]]] = {}
            for r, (hs, *_) in zip(reqs, prepared):
                self._check_share(r, hs, earlier)
                earlier.update(dict.fromkeys(r.seq_ids, (len(r.token_ids), hs)))

    def _check_share(self, r: SeqAlloc, hashes: Sequence[bytes],
                     earlier: dict[int, tuple[int, Sequence[bytes]]]) -> None:
        """``r.share_with`` names a device table, or a sequence of a request before ``r`` in
        the batch (``earlier``: its token count and hashes), of at least ``r.num_shared`` full
        blocks holding the same tokens, and ``r``'s prompt is longer."""
        k, bs = r.num_shared, self.block_size
        if r.share_with is None or not k:
            return
        t = self.tables.get(r.share_with)
        target = earlier.get(r.share_with) if t is None else (
            (t.num_tokens, t.hashes) if t.device is Device.DEVICE else None)
        if target is None or k * bs > target[0] or k * bs >= len(r.token_ids):
            raise ValueError(f"cannot share {k} blocks of sequence {r.share_with}: it needs a "
                             "device table of as many full blocks, and a longer prompt here")
        if self.caching and list(hashes[:k]) != list(target[1][:k]):
            raise ValueError(f"the first {k} blocks of sequence {r.share_with} hold other "
                             "tokens")

    def _allocate_locked(self, r: SeqAlloc, prep: Prepared) -> int | None:
        hashes, root, extra, tail = prep
        tables = self.tables
        bs = self.block_size
        n = len(r.token_ids)
        nseq = len(r.seq_ids)
        pool = self.device_pool
        keep = self.index is not None and self.index.wants_tokens  # NOTE(event-tokens)
        skip = r.skip_read  # NOTE(skip-read) in block_table.py: no hits, no lookup counted
        hits = [] if skip else self.hits(hashes, n, r.token_ids)  # verify_hits checks them
        reused, num_hits = self._reused(r, hits)
        need = -(-n // bs) - len(reused)
        revive = len(reused) - count_used(pool, reused)
        if need > pool.takeable() - revive:
            return None
        if reused is hits:
            if hits:
                pool.acquire_blocks(hits, nseq)
        else:
            pool.share(reused, nseq)  # in use by ``share_with``: nothing to revive
        new = pool.take(need, nseq)
        assert new is not None  # checked above
        blocks = reused + new
        hs = list(hashes[:n // bs])
        cached = num_hits * bs
        sharing = nseq > 1  # NOTE(tail-sharers)
        for s in r.seq_ids:
            tables[s] = BlockTable(s, list(blocks), n, Device.DEVICE, list(hs), list(tail),
                                   num_hits, root, extra, list(r.token_ids) if keep else None,
                                   cached, shares_tail=sharing, salt=r.cache_salt)
        c = self.counters
        c.tail_sharers += nseq if sharing else 0
        c.used_slots += n - len(reused) * bs + (bs * revive)
        self._count_lookup(r.resumed, n if self.caching and not skip else 0, cached, nseq)
        return cached

    def _count_lookup(self, resumed: bool, queried: int, cached: int, nseq: int) -> None:
        """An allocation's prefix-cache query and hit tokens: a first admission's, or a
        preempted request's re-admission's (NOTE(preempted-queries), block_table.py).

        NOTE(child-lookups): vLLM runs an n > 1 request as n child requests, each looking its
        prompt up (vllm:prompt_tokens_total counts n prompts too); a later child finds the
        first's full blocks, cached when they were allocated in the same step, as many as
        its hit cap allows (one token left to compute: ``(n - 1) // bs`` blocks). The
        ``nseq`` sequences here share one allocation, so they count as vLLM's children
        would: n queries, and each further one the capped full-block tokens."""
        if nseq > 1 and queried:
            cached += (nseq - 1) * ((queried - 1) // self.block_size * self.block_size)
            queried *= nseq
        c = self.counters
        if resumed:
            c.preempted_query_tokens += queried
            c.preempted_hit_tokens += cached
        else:
            c.prefix_query_tokens += queried
            c.prefix_hit_tokens += cached

    def _reused(self, r: SeqAlloc, hits: list[int]) -> tuple[list[int], int]:
        """The leading blocks the new tables reuse, and how many of them are prefix-cache
        hits: the hits themselves, or (``share_with``, checked by ``_check_share``) the other
        table's first ``num_shared`` blocks when the hits do not cover them (those may still
        be being computed)."""
        k = r.num_shared
        if r.share_with is None or not k:
            return hits, len(hits)
        shared = self.tables[r.share_with].blocks[:k]
        if hits[:k] == shared:
            return hits, len(hits)
        j = 0
        while j < len(hits) and hits[j] == shared[j]:
            j += 1
        return shared, j
