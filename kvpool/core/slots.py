"""SlotWriter: the decode path of BlockSpaceManager: reserve slots for the tokens the next
step writes (with copy-on-write of a shared partial block), and register full blocks in the
prefix cache once their bytes are known written.

Token ``t`` goes to slot ``t % bs`` of logical block ``t // bs``; appending ``k`` tokens to a
table of ``n0`` needs ``ceil((n0 + k) / bs) - len(blocks)`` new blocks, plus one copy when the
partial last block is shared (``ref > 1``)::

    n0 = 38, k = 1, bs = 16     blocks [ 7 ][ 3 ][ 12: 6 of 16 ]  -> slot 6 of block 12
    shared 12 (a fork)          copy 12 -> new block d first, then write into d
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence

from kvpool.core.block import Device
from kvpool.core.block_table import BlockTable, BlockTables
from kvpool.core.hashing import BlockHasher, check_token_ids
from kvpool.core.pool import BlockPool
from kvpool.core.stats import ManagerCounters
from kvpool.errors import DuplicateSequenceError, InvalidBlockError

_DEVICE = Device.DEVICE  # NOTE(speed): a module global, not an enum attribute per token


class SlotWriter:
    """Appends and hash registration over the manager's tables (lent to it, owned by the
    manager) and its device pool. Every mutator runs inside the pool's writer section (the
    public ones enter it; ``register_upto``, ``need`` and ``append_locked`` assume the caller
    did). The per-sequence append is the manager's ``append_slots``."""

    def __init__(self, device: BlockPool, tables: BlockTables,
                 counters: ManagerCounters, hasher: BlockHasher) -> None:
        self.device_pool = device
        # NOTE(speed): append_decodes runs once per step over every running sequence; fetch
        # the pool's SeqLock and ref_count once instead of per call
        self.writing = device.writing()
        self.ref_count = device.ref_count
        self.tables = tables
        self.counters = counters
        self.hasher = hasher
        self.block_size = device.block_size
        self.caching = device.caching
        self.index = device.index  # None without prefix caching
        self._distinct: list[int] = []  # the last decode ids found distinct (_check_decodes)

    def register_upto(self, t: BlockTable, num_tokens: int) -> None:
        """Index ``t``'s full blocks among its first ``num_tokens`` tokens in the prefix cache
        (their bytes are written). Writer section held."""
        index = self.index
        if index is None or t.device is not Device.DEVICE or t.copy_pending:
            return  # NOTE(copy-pending): a hash only once the bytes are known written
        upto = min(num_tokens // self.block_size, len(t.hashes))
        i = t.num_registered
        if i >= upto:
            return
        bs, blocks, hashes, toks = self.block_size, t.blocks, t.hashes, t.tokens
        if toks is None or not index.verify_hits:  # NOTE(speed): one call for the run (a
            index.register_run(blocks, hashes, i, upto, toks, t.salt)  # prefill: ~100s)
            t.num_registered = upto
            return
        while i < upto:
            index.register_block(blocks[i], hashes[i], i, toks[i * bs:(i + 1) * bs],
                                 hashes[i - 1] if i else None, salt=t.salt)
            i += 1
        t.num_registered = upto

    def need(self, t: BlockTable, k: int) -> int:
        """Blocks appending ``k`` tokens to ``t`` takes: new blocks plus a copy-on-write."""
        bs = self.block_size
        n0 = t.num_tokens
        need = -(-(n0 + k) // bs) - len(t.blocks)
        if n0 % bs and self.device_pool.ref_count(t.blocks[-1]) > 1:
            need += 1  # NOTE(cow): the shared partial last block is copied before the write
        return need

    def can_append(self, seq_ids: Sequence[int], num_new_tokens: int = 1) -> bool:
        """Whether every listed running sequence can take ``num_new_tokens`` more tokens.

        Exact need (new blocks plus copy-on-write copies); vLLM v0's bound of one block per
        sequence is its worst case for one token."""
        need = 0
        for s in seq_ids:
            t = self.tables[s]
            if t.device is not Device.DEVICE:
                raise InvalidBlockError(f"sequence {s} is swapped out; swap it in first")
            need += self.need(t, num_new_tokens)
        return need <= self.device_pool.num_free_blocks

    def append_batch(
        self, items: Sequence[tuple[int, Sequence[int]]]
    ) -> list[list[tuple[int, int]]] | None:
        """``manager.append_slots`` for many sequences under one lock; all or nothing. A
        sequence listed twice or a token id outside u32 raises before anything changes."""
        pool = self.device_pool
        with self.writing:
            tables = [self.tables[s] for s, _ in items]
            if len(set(map(id, tables))) != len(tables):  # NOTE(batch-first)
                raise DuplicateSequenceError("a sequence is listed twice in append_batch")
            if self.caching:  # NOTE(token-range)
                for _, toks in items:
                    check_token_ids(toks)
            need = 0
            for t, (_, toks) in zip(tables, items):
                if t.device is not Device.DEVICE:
                    raise InvalidBlockError(f"sequence {t.seq_id} is swapped out")
                need += self.need(t, len(toks))
            if need > pool.takeable():
                return None
            return [self.append_locked(t, toks) for t, (_, toks) in zip(tables, items)]

    def append_decodes(self, seq_ids: Sequence[int], token_ids: Sequence[int],
                       group_ends: Sequence[int] | None = None
                       ) -> tuple[list[Sequence[tuple[int, int]]], list[list[int]], int]:
        """A decode step's appends under one lock: ``token_ids[i]`` to ``seq_ids[i]`` for the
        leading groups (``group_ends``: group end indices; None: one group, all or nothing)
        that fit together. Returns each appended sequence's copy-on-write pairs (empty when
        none) and a read-only copy of its table, and how many groups were appended.
        NOTE(speed): ``manager.append_slots``'s fast path inlined (no new block, no copy;
        a block it fills is hashed inline), the rest through ``append_locked``; a table
        whose blocks did not change since its last decode append hands out the same read-only
        copy again (``BlockTable.view``). Misuse raises before anything changes
        (``_check_decodes``)."""
        with self.writing:
            try:  # NOTE(speed): one C-level pass; the slow one names the first bad id
                tables = list(map(self.tables.__getitem__, seq_ids))
            except KeyError:
                tables = self._decode_tables(seq_ids)
            self._check_decodes(seq_ids, token_ids, group_ends)
            ends = (len(tables),) if group_ends is None else group_ends
            groups = self._groups_that_fit(tables, ends)
            n = ends[groups - 1] if groups else 0
            cows, copies = self._append_each(tables, token_ids, n)
            self.counters.used_slots += cows.count(())  # one slot per fast append (() left)
            return cows, copies, groups

    def _check_decodes(self, seq_ids: Sequence[int], token_ids: Sequence[int],
                       group_ends: Sequence[int] | None) -> None:
        """NOTE(batch-first): a decode step's batch is checked whole before any table moves
        (as ``manager.free`` does): one token per sequence and groups within the batch (O(1)),
        no sequence twice (a second entry would append on top of the first in the same step,
        registering a block whose last token is not computed), and with caching every id in
        u32 (NOTE(token-range): one C-level pass). NOTE(speed): the ids are checked distinct
        with a set only when they differ from the last list found distinct (a copy, compared
        at C level): the steady decode state lists the same sequences step after step."""
        k = len(seq_ids)
        if len(token_ids) != k or group_ends and group_ends[-1] > k:
            raise ValueError(f"append_decodes got {len(token_ids)} token ids for {k} sequences"
                             + ("" if not group_ends else f", groups ending at {group_ends[-1]}"))
        if seq_ids != self._distinct:
            if len(set(seq_ids)) != k:
                raise DuplicateSequenceError("a sequence is listed twice in append_decodes")
            self._distinct = list(seq_ids)
        if self.caching:
            check_token_ids(token_ids)

    def _append_each(self, tables: list[BlockTable], token_ids: Sequence[int], n: int
                     ) -> tuple[list[Sequence[tuple[int, int]]], list[list[int]]]:
        """One token each to the first ``n`` tables (they fit); their cows and views. Fast
        path (cow ``()``): one token into the table's own partial block (ref read only if a
        tail may be shared: NOTE(tail-sharers)), nothing to register; the token filling the
        block hashes it. Opening a block (``_open_block``) leaves ``()`` too; the blocks come
        in one call after the loop (``_give_blocks``). NOTE(event-tokens): kept ids grow."""
        bs, ref, caching = self.block_size, self.ref_count, self.caching
        hash_block, last = self.hasher.hash_block, bs - 1
        shared = self.counters.tail_sharers
        cows: list[Sequence[tuple[int, int]]] = [()] * n
        copies: list[list[int]] = []
        opened: list[int] = []
        add = copies.append
        for i, t, tok in zip(range(n), tables, token_ids):
            r0 = (n0 := t.num_tokens) % bs
            if (r0 and (not shared or ref(t.blocks[-1]) == 1)
                    and (not caching or t.num_registered == n0 // bs)):
                t.num_computed = n0
                t.num_tokens = n0 + 1
                if t.tokens is not None:
                    t.tokens.append(tok)
                if caching:
                    tail = t.tail
                    tail.append(tok)
                    if r0 == last:  # the block is full: its hash (registered once written)
                        hs = t.hashes
                        hs.append(hash_block(hs[-1] if hs else t.root, tail, t.extra))
                        tail.clear()
            elif not r0 and last:
                self._open_block(t, n0, tok)
                opened.append(i)
            else:
                cows[i] = self.append_locked(t, (tok,))
            if (view := t.view) is None:
                view = t.view = list(t.blocks)
            add(view)
        if opened:
            self._give_blocks(tables, opened, copies)
        return cows, copies

    def _open_block(self, t: BlockTable, n0: int, tok: int) -> None:
        """``append_locked(t, (tok,))`` where the last block is full (``n0 % bs == 0``,
        ``bs > 1``), but for the new block itself (``_give_blocks``): register the blocks
        written meanwhile, count the token. Its used slot is counted by the caller (cow entry
        ``()``)."""
        t.num_computed = n0
        if self.caching:
            if t.num_registered < n0 // self.block_size:
                self.register_upto(t, n0)
            t.tail.append(tok)
        if t.tokens is not None:
            t.tokens.append(tok)
        t.num_tokens = n0 + 1

    def _give_blocks(self, tables: list[BlockTable], opened: list[int],
                     copies: list[list[int]]) -> None:
        """One new block for each table ``opened`` names (NOTE(speed): one take, and one
        eviction call when the pool is full, per step instead of per table), and its view."""
        for i, b in zip(opened, self.device_pool.take(len(opened))):  # type: ignore[arg-type]
            t = tables[i]
            t.blocks.append(b)
            t.view = copies[i] = list(t.blocks)  # blocks_changed(), then the new view

    def _groups_that_fit(self, tables: list[BlockTable], ends: Sequence[int]) -> int:
        """How many leading groups (``ends``) can take one more token per table together
        with the blocks free now. One token takes one block from a table whose last block
        is full (a new one) or shared (its copy), none from the others. Raises, before
        anything changes, when a table is swapped out."""
        if self.counters.num_swapped_seqs:  # NOTE(speed): the device pass only when needed
            for t in tables:
                if t.device is not _DEVICE:
                    raise InvalidBlockError(f"sequence {t.seq_id} is swapped out")
        free = self.device_pool.takeable()
        if len(tables) <= free:
            return len(ends)  # NOTE(speed): at most one block per table
        bs, ref = self.block_size, self.ref_count
        shared = self.counters.tail_sharers  # NOTE(tail-sharers): 0: no ref count to read
        need = 0
        for j, t in enumerate(tables):  # one pass: the groups only at the first table short
            if not t.num_tokens % bs or shared and ref(t.blocks[-1]) > 1:
                need += 1
                if need > free:  # tables[:j] fit: so do the groups that end by j
                    return bisect_right(ends, j)
        return len(ends)

    def _decode_tables(self, seq_ids: Sequence[int]) -> list[BlockTable]:
        """The device tables of ``seq_ids`` (unknown or swapped-out sequences raise)."""
        tables = self.tables
        out = []
        for s in seq_ids:
            t = tables[s]  # UnknownSequenceError when unknown (BlockTables)
            if t.device is not _DEVICE:
                raise InvalidBlockError(f"sequence {s} is swapped out")
            out.append(t)
        return out

    def append_locked(self, t: BlockTable, toks: Sequence[int]) -> list[tuple[int, int]]:
        """Append ``toks`` to ``t`` (its ``need`` fits; with caching its ids are in u32:
        the caller checked them, NOTE(token-range)). Writer section held."""
        bs, pool = self.block_size, self.device_pool
        n0 = t.num_tokens
        k = len(toks)
        blocks = t.blocks
        t.num_computed = n0  # appending means every earlier token was computed
        c = self.counters
        cow: list[tuple[int, int]] = []
        r0 = n0 % bs
        if r0:
            if pool.ref_count(blocks[-1]) > 1:  # NOTE(cow): the shared partial block is copied
                src = blocks[-1]                # first; the source keeps its other sharers
                dst = pool.take(1)[0]  # type: ignore[index]
                pool.release((src,))
                blocks[-1] = dst
                t.blocks_changed()
                cow.append((src, dst))
                c.used_slots += r0
                c.cow_copies += 1
        if self.caching and t.num_registered < n0 // bs:
            self.register_upto(t, n0)  # full blocks written by earlier steps become hits
        extra = (n0 + k + bs - 1) // bs - len(blocks)
        if extra > 0:
            blocks += pool.take(extra)  # type: ignore[arg-type]
            t.blocks_changed()
        t.num_tokens = n0 + k
        c.used_slots += k
        if self.caching:
            self._extend_hashes(t, toks)
        return cow

    def _extend_hashes(self, t: BlockTable, toks: Sequence[int]) -> None:
        """``toks`` joined ``t``'s tail: hash every block they filled (caching on)."""
        bs = self.block_size
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

