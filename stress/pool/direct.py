"""DirectRuntime: ShadowRuntime plus unbatched calls, for a share of ``stress pool``'s thread
operations (``--direct``).

Each call here takes only the manager's own locks, as the engine's step thread and the remote
tier's inline front calls do, so a mutator that lost its writer section races the other
threads (NOTE(direct), stress/pool/shadow.py: the batched operations hold the lock around the
manager call and hide that)::

    allocate    mgr.allocate -> write the uncached tokens -> mgr.mark_computed, each call alone
    append      mgr.append_slots (the one-token fast path included) -> copy-on-write -> write
    fork, free, abort (allocate then free)   the manager calls alone
    raw blocks  pool.allocate_many, or n lock-free pool.allocate() calls (every other time;
                ``--no-lock-free-allocate``: never), tagged in the fake KV, held a moment,
                checked, pool.free_many

The fake-KV writes run outside the lock, as the runtime's do: they fill only slots past the
table's ``num_computed``, in blocks that defrag never moves (kvpool/core/defrag.py
NOTE(defrag)) and that no other table shares (copy-on-write). A call marks its sequences
``in_flight`` before its first manager call; at its end it takes them back and verifies them
inside one batch, so no full check ever sees one half done. NOTE(raw-gate): raw blocks have
ref 1 and no table, which ``check_invariants`` rightly calls a leak, and it is exact only while
no ``pool.allocate()`` runs (kvpool/core/free_list.py NOTE(quiescent-check)), so a full check
waits until no thread holds raw blocks, and raw blocks wait for the check (a gate, not a pool
lock: the raw calls keep their own locking).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from kvpool.core import BlockSpaceManager, Device
from stress.pool.races import OwnershipLedger
from stress.pool.shadow import ShadowRuntime

__all__ = ["DirectRuntime", "RawGate"]


class RawGate:
    """Any number of raw-block holders at once, or one full check (NOTE(raw-gate)). Taken
    before any pool lock and never while holding one, so it cannot deadlock with them."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._holders = 0
        self._checking = False

    @contextmanager
    def raw(self) -> Iterator[None]:
        with self._cv:
            self._cv.wait_for(lambda: not self._checking)
            self._holders += 1
        try:
            yield
        finally:
            with self._cv:
                self._holders -= 1
                self._cv.notify_all()

    @contextmanager
    def check(self) -> Iterator[None]:
        with self._cv:
            self._cv.wait_for(lambda: not self._checking)
            self._checking = True  # no new holder from here on
            self._cv.wait_for(lambda: not self._holders)
        try:
            yield
        finally:
            with self._cv:
                self._checking = False
                self._cv.notify_all()


class DirectRuntime(ShadowRuntime):
    """The ShadowRuntime's checks over unbatched manager calls (module docstring)."""

    def __init__(self, manager: BlockSpaceManager, *, lock_free_allocate: bool = True) -> None:
        super().__init__(manager)
        self.lock_free_allocate = lock_free_allocate
        self.gate = RawGate()
        self.ledger = OwnershipLedger(self.violation)  # raw blocks by live owner (NOTE(races))

    def check_all(self) -> None:
        with self.gate.check():  # NOTE(raw-gate)
            super().check_all()

    def _land(self, seq_ids: Sequence[int], where: str) -> None:
        """The call is done: its sequences leave ``in_flight`` and are verified, in one batch
        (so the full checks see them either in flight or whole)."""
        with self.manager.batch():
            self.in_flight.difference_update(seq_ids)
            self._verify_locked(seq_ids, where)

    # ---------------------------------------------------------------- operations
    def allocate_direct(self, seq_ids: Sequence[int], token_ids: Sequence[int],
                        cache_salt: str | None = None) -> int | None:
        mgr, ids, toks = self.manager, list(seq_ids), list(token_ids)
        self.in_flight.update(ids)
        try:
            cached = mgr.allocate(ids, toks, cache_salt=cache_salt)
            if cached is None:
                return None
            if not (0 <= cached < len(toks) and cached % self.bs == 0):
                self.violation(f"allocate (direct): {cached} cached tokens of {len(toks)}")
            self._write(ids[0], toks, cached, cache_salt)  # the prefill: slots not computed
            for s in ids:
                mgr.mark_computed(s)
                self.expected[s] = (list(toks), cache_salt)
            return cached
        finally:
            self._land(ids, "allocate (direct)")

    def allocate_uncomputed_direct(self, seq_ids: Sequence[int], token_ids: Sequence[int],
                                   cache_salt: str | None = None) -> bool:
        """A request aborted at admission, each manager call alone."""
        ids = list(seq_ids)
        self.in_flight.update(ids)
        try:
            return self._allocate_then_free(ids, token_ids, cache_salt, "abort (direct)")
        finally:
            self.in_flight.difference_update(ids)

    def append_slots_direct(self, seq_id: int, token_ids: Sequence[int]) -> list | None:
        self.in_flight.add(seq_id)
        try:
            toks, salt = self.expected[seq_id]
            pairs = self.manager.append_slots(seq_id, token_ids)
            if pairs is not None:
                self._copy(pairs, Device.DEVICE, Device.DEVICE)  # NOTE(cow): before the write
                new = toks + list(token_ids)
                self.expected[seq_id] = (new, salt)
                self._write(seq_id, new, len(toks), salt)
            return pairs
        finally:
            self._land([seq_id], "append (direct)")

    def fork_direct(self, parent: int, child: int) -> None:
        self.in_flight.add(child)
        try:
            self.manager.fork(parent, child)
            toks, salt = self.expected[parent]
            self.expected[child] = (list(toks), salt)
        finally:
            self._land([parent, child], "fork (direct)")

    def free_direct(self, *seq_ids: int) -> None:
        mgr, ids = self.manager, list(seq_ids)
        self.in_flight.update(ids)
        try:
            for s in ids:
                self.expected.pop(s, None)
            mgr.free(*ids)
            for s in ids:
                if mgr.has_seq(s):
                    self.violation(f"free (direct): seq {s} still has a table")
        finally:
            self.in_flight.difference_update(ids)

    def raw_blocks(self, owner: int, n: int, one_by_one: bool = False) -> int:
        """Take ``n`` raw device blocks (no table; ``one_by_one``: through the lock-free
        ``pool.allocate()``, when allowed), tag them with ``owner`` in the fake KV, let the
        others run, check no one else wrote or got them, give them back."""
        pool = self.manager.device_pool
        with self.gate.raw():  # NOTE(raw-gate)
            if one_by_one and self.lock_free_allocate:
                ids = [b for b in (pool.allocate() for _ in range(n)) if b is not None]
            else:
                ids = pool.allocate_many(n) or []
            self.ledger.claim(owner, ids)  # a second live owner of an id is reported here
            tag = ("raw", owner)
            salts = self._salt[Device.DEVICE]
            for b in ids:
                salts[b] = tag
            time.sleep(0)  # held a moment while the other threads run
            if any(salts[b] != tag for b in ids):
                self.violation(f"raw blocks {ids} of {owner}: written by another owner "
                               "meanwhile")
            self.ledger.release(owner, ids)  # before the pool has them back
            pool.free_many(ids[::-1])
        return len(ids)
