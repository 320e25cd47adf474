"""Defragmentation: compact live device blocks into the lowest block ids.

Protocol (docs/architecture.md#locking, layer 3, version-retry)::

    plan = mgr.defrag.plan()          # under the lock: pick moves, reserve the destinations
    copy engine: kv[dst] <- kv[src]   # outside any lock, while the tables keep using src
    mgr.defrag.commit(plan)           # under the lock: remap what is still valid; the rest is
                                      # dropped (dst released) and reported for a re-plan
    mgr.defrag.abort(plan)            # the copies failed: release every destination

Only immutable blocks move: blocks whose every slot is computed (a sequence only ever writes
slots past ``num_computed``: its last, partial block, or slots reserved for a step still to
run) and evictable cached blocks. So the bytes copied stay right even while decoding goes on; a move
is dropped at commit when its source block changed owner since the plan: its ref count or hash
differs, or a table that referenced it was freed, swapped or no longer holds it at that index
(compared directly, table by table and block by block: a freed sequence's id may come back as
a new table, NOTE(defrag-aba)).

Layout before / after, ``#`` live, ``.`` free, block ids left to right::

    before   # . # # . . # . # #        holes below the live count (6): ids 1, 4, 5
    moves    9->1  8->4  6->5
    after    # # # # # # . . . .        one free run: external fragmentation 0
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import count

from kvpool.core.block import Device
from kvpool.core.block_table import BlockTable, BlockTables
from kvpool.core.pool import BlockPool
from kvpool.core.stats import ManagerCounters
from kvpool.errors import InvalidBlockError


def _unhashed(block_id: int) -> bytes | None:
    return None  # a pool without prefix caching holds no hashes


@dataclass(frozen=True, slots=True)
class MoveCheck:
    src: int
    dst: int
    ref: int  # src's ref count when planned
    block_hash: bytes | None  # src's hash when planned
    refs: tuple[tuple[int, int], ...]  # (seq_id, index) pointing at src


@dataclass(frozen=True, slots=True)
class DefragPlan:
    """Block moves to execute; ``moves`` are ``(src, dst)`` pairs for the copy engine."""

    plan_id: int
    moves: tuple[tuple[int, int], ...]
    checks: tuple[MoveCheck, ...]

    def __len__(self) -> int:
        return len(self.moves)


@dataclass(frozen=True, slots=True)
class DefragResult:
    committed: list[tuple[int, int]]  # remapped: dst now holds the block, src is free
    retried: list[tuple[int, int]]  # dropped because a table changed; plan again later


class DefragPlanner:
    """plan / commit / abort of defrag moves over the manager's tables (lent to it, owned by
    the manager) and its device pool. Invariant: at most one plan is in flight, and its
    destinations are exactly the pool's reserved blocks."""

    def __init__(self, device: BlockPool, tables: BlockTables,
                 counters: ManagerCounters) -> None:
        self.device = device
        # the content hash per block (a moved block keeps it), or None for every block
        self.hash_of = device.index.hash_of if device.index is not None else _unhashed
        self.tables = tables
        self.counters = counters
        # plan id -> (the plan, per check the tables its refs named when planned)
        self._plans: dict[int, tuple[DefragPlan, tuple[tuple[BlockTable, ...], ...]]] = {}
        self._plan_ids = count(1)

    def reserved_blocks(self) -> list[int]:
        """Destinations held by the plan in flight (each holds one reference)."""
        return [dst for p, _ in self._plans.values() for _, dst in p.moves]

    def plan(self, max_moves: int | None = None) -> DefragPlan | None:
        """Plan moves that pack live blocks into ids ``[0, live)``; None if nothing to move.
        The destinations are reserved (never handed out) until commit or abort."""
        pool = self.device
        with pool.writing():
            if self._plans:
                raise InvalidBlockError("a defrag plan is already in flight; commit or abort it")
            n = pool.num_blocks
            # NOTE(plan-drain): a lock-free allocate() pops the magazine without this lock; once
            # drained it waits on the slow path, so no id read as free here goes live meanwhile
            pool.free_list.drain()
            free = pool.free_list.ids()
            live = n - len(free)
            holes = sorted(b for b in free if b < live)
            if not holes:
                return None
            refs, pinned = self._table_refs(live)
            ref, hash_of = pool.ref_count, self.hash_of
            fs = set(free)
            sources = [b for b in range(n - 1, live - 1, -1)
                       if b not in fs and b not in pinned
                       and (b in refs or (ref(b) == 0 and hash_of(b) is not None))
                       and ref(b) == len(refs.get(b, ()))]
            k = min(len(holes), len(sources))
            if max_moves is not None:
                k = min(k, max_moves)
            if k == 0:
                return None
            dsts = holes[:k]
            pool.reserve(dsts)
            checks = tuple(MoveCheck(src, dst, ref(src), hash_of(src), tuple(refs.get(src, ())))
                           for src, dst in zip(sources[:k], dsts))
            plan = DefragPlan(next(self._plan_ids), tuple((c.src, c.dst) for c in checks),
                              checks)
            # NOTE(defrag-aba): the tables themselves, kept here (the plan goes to callers,
            # who get copies of tables, never one): a freed sequence's id may come back as a
            # new table holding the same block at the same index, which its id cannot tell
            owners = tuple(tuple(self.tables[s] for s, _ in c.refs) for c in checks)
            self._plans[plan.plan_id] = (plan, owners)
            return plan

    def _table_refs(self, live: int) -> tuple[dict[int, list[tuple[int, int]]], set[int]]:
        """The device tables' entries on blocks at or above ``live`` (block -> ``(seq_id,
        index)``), and those of them that must not move. Lock held."""
        bs = self.device.block_size
        refs: dict[int, list[tuple[int, int]]] = {}
        pinned: set[int] = set()
        for s, t in self.tables.items():
            if t.device is not Device.DEVICE:
                continue
            # a swap-in copy still unconfirmed: its bytes are not known written yet
            full = 0 if t.copy_pending else t.num_computed // bs
            for i, b in enumerate(t.blocks):
                if b >= live:
                    if i >= full:  # NOTE(defrag): a block not yet fully written (partial,
                        pinned.add(b)  # or reserved for a step still to run) never moves
                    refs.setdefault(b, []).append((s, i))
        return refs, pinned

    def _move_valid(self, c: MoveCheck, owners: tuple[BlockTable, ...]) -> bool:
        pool = self.device
        if pool.ref_count(c.src) != c.ref or self.hash_of(c.src) != c.block_hash:
            return False
        if c.ref == 0 and c.block_hash is None:
            return False  # it went back to the free list
        tables = self.tables
        for (s, i), owner in zip(c.refs, owners):
            t = tables.get(s)
            if t is not owner or t.device is not Device.DEVICE:  # NOTE(defrag-aba)
                return False
            if i >= len(t.blocks) or t.blocks[i] != c.src:
                return False
        return True

    def commit(self, plan: DefragPlan) -> DefragResult:
        """Remap the moves whose source is unchanged (after the copies and any compute that read
        the old tables completed); the others are released for a re-plan."""
        pool = self.device
        with pool.writing():
            owners = self._take_plan(plan)
            committed, retried = [], []
            for c, own in zip(plan.checks, owners):
                if self._move_valid(c, own):
                    pool.move(c.src, c.dst)
                    for s, i in c.refs:
                        t = self.tables[s]
                        t.blocks[i] = c.dst
                        t.blocks_changed()
                    committed.append((c.src, c.dst))
                else:
                    pool.unreserve(c.dst)
                    retried.append((c.src, c.dst))
            self.counters.defrag_moves += len(committed)
            self.counters.defrag_retries += len(retried)
            return DefragResult(committed, retried)

    def abort(self, plan: DefragPlan) -> None:
        """The copies failed or were cancelled: release every reserved destination."""
        pool = self.device
        with pool.writing():
            self._take_plan(plan)
            for _, dst in plan.moves:
                pool.unreserve(dst)

    def _take_plan(self, plan: DefragPlan) -> tuple[tuple[BlockTable, ...], ...]:
        """Remove ``plan`` from the plans in flight; its checks' tables. NOTE(own-plan): plan
        ids count from 1 per manager, so another manager's plan (or a copy) can carry the id
        of this one's: only this very object is in flight; anything else raises, unchanged."""
        entry = self._plans.get(plan.plan_id)
        if entry is None or entry[0] is not plan:
            raise InvalidBlockError(f"defrag plan {plan.plan_id} is not in flight here")
        del self._plans[plan.plan_id]
        return entry[1]
