"""The asyncio front of the block manager: kvpool's asyncio API to the pool.

Use it from any coroutine (the engine's remote prefetch does, the stress harness and
benchmarks too)::

    front = AsyncManagerFront(manager)
    hit = await front.allocate([seq], token_ids)        # None when the pool is short
    ids = await front.allocate_host_blocks(8)           # raw host blocks, or None
    await front.free_host_blocks(ids)

Inline when free: a call first tries the pool lock without blocking. When nobody holds it
(no step thread inside a step, no batch pending) the call is applied at once, on the caller's
stack, and its future is already resolved: the cost of a direct call plus one future, no
queueing, no extra loop iteration.

Batched under contention: when the try fails (the step thread holds the lock) or a batch is
already pending (so order is kept), the call only queues an operation and a future. The first
queued call of an iteration schedules one flush with ``loop.call_soon``; asyncio runs
callbacks scheduled during an iteration in the next one, so the flush sees every operation
queued by the coroutines that ran in between::

    iteration k     coro A: allocate(3) ─┐   coro B: free(7) ─┐   coro C: append(...) ─┐
                                         v                    v                        v
    iteration k+1   flush: lock once ── A, B, C applied in order ── futures resolved ── unlock

The pool lock is shared with the engine's step thread, so the flush never blocks the event
loop on it: it tries a non-blocking acquire and, when the lock is busy, hands the whole batch
to a worker thread (one hop for the batch, not one per call). Scarcity comes back as the core
returns it (None); misuse raises in the awaiting coroutine only, never in the others.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kvpool.core import BlockSpaceManager
from kvpool.errors import QueueFullError

_Op = tuple[Callable[..., Any], tuple, asyncio.Future, Callable[[Any], Any] | None]


class AsyncManagerFront:
    """Batches BlockSpaceManager calls per loop iteration.

    Invariant: every queued operation is applied exactly once, in submission order, inside
    one ``manager.batch()`` (one acquisition of the device and host pool locks) per flush,
    and its future receives its result or its own exception.
    """

    def __init__(self, manager: BlockSpaceManager, *, max_pending: int = 100_000,
                 executor: ThreadPoolExecutor | None = None) -> None:
        self.manager = manager
        self.max_pending = max_pending
        self._pending: list[_Op] = []
        self._scheduled = False
        self._inflight = 0  # batches handed to a worker and not yet resolved (order guard)
        self._executor = executor
        self._lock = manager.device_pool.lock
        self.flushes = 0  # batches applied (monotonic)
        self.batched_ops = 0  # operations applied in batches (monotonic)
        self.offloaded = 0  # batches handed to a worker because the lock was busy
        self.inline = 0  # calls applied at once because the lock was free (monotonic)

    @property
    def ops(self) -> int:
        """Operations applied, inline or batched (monotonic)."""
        return self.inline + self.batched_ops

    # ---------------------------------------------------------------- queueing
    def _submit(self, fn: Callable[..., Any], *args: Any,
                undo: Callable[[Any], Any] | None = None) -> asyncio.Future:
        """Queue ``fn(*args)``. ``undo(result)`` compensates an operation that was applied but
        whose caller cancelled meanwhile (so nothing it created is left without an owner)."""
        pending = self._pending
        loop = asyncio.get_running_loop()
        lock = self._lock
        if not pending and not self._inflight and lock.acquire(False):
            # NOTE(inline): free lock and nothing queued ahead: apply now, keep the order
            fut = loop.create_future()
            try:  # the manager's calls take their own (re-entrant) writer sections
                fut.set_result(fn(*args))
            except Exception as e:  # noqa: BLE001 - delivered to the caller's future
                fut.set_exception(e)
            finally:
                lock.release()
            self.inline += 1
            return fut
        if len(pending) >= self.max_pending:
            raise QueueFullError(f"{len(pending)} pool operations pending; retry later")
        fut = loop.create_future()
        pending.append((fn, args, fut, undo))
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._flush, loop)
        return fut

    def _flush(self, loop: asyncio.AbstractEventLoop) -> None:
        self._scheduled = False
        batch, self._pending = self._pending, []
        if not batch:
            return
        lock = self.manager.device_pool.lock
        if lock.acquire(blocking=False):  # NOTE(loop): never block the loop on the step lock
            try:
                results = self._apply(batch)
            finally:
                lock.release()
            self._resolve(batch, results)
        else:
            self.offloaded += 1
            self._inflight += 1
            job = loop.run_in_executor(self._executor, self._apply, batch)
            job.add_done_callback(lambda f: self._resolve_job(batch, f))

    def _apply(self, batch: list[_Op]) -> list[tuple[bool, Any]]:
        """Run every operation under one manager.batch(); capture results and exceptions."""
        out: list[tuple[bool, Any]] = []
        with self.manager.batch():
            for fn, args, fut, _ in batch:
                if fut.cancelled():
                    out.append((False, None))
                    continue
                try:
                    out.append((True, fn(*args)))
                except Exception as e:  # noqa: BLE001 - delivered to the caller's future
                    out.append((False, e))
        self.flushes += 1
        self.batched_ops += len(batch)
        return out

    def _resolve_job(self, batch: list[_Op], job: asyncio.Future) -> None:
        self._inflight -= 1
        exc = job.exception()
        if exc is not None:  # the batch itself failed (not one operation): fail them all
            self._resolve(batch, [(False, exc)] * len(batch))
        else:
            self._resolve(batch, job.result())

    def _resolve(self, batch: list[_Op], results: list[tuple[bool, Any]]) -> None:
        for (_, _, fut, undo), (ok, value) in zip(batch, results):
            if fut.done():
                if fut.cancelled() and ok and undo is not None:
                    self._submit(undo, value)  # NOTE(cancel): applied, then abandoned
                continue
            if ok:
                fut.set_result(value)
            elif value is not None:
                fut.set_exception(value)
            else:
                fut.cancel()

    # ---------------------------------------------------------------- manager operations
    def can_allocate(self, num_tokens: int, block_hashes: Sequence[bytes] = ()
                     ) -> asyncio.Future:
        return self._submit(self.manager.can_allocate, num_tokens, block_hashes)

    def allocate(self, seq_ids: Sequence[int], token_ids: Sequence[int],
                 cache_salt: str | None = None) -> asyncio.Future:
        """Result: prefix-cached token count, or None when the pool is short."""
        mgr = self.manager
        ids = list(seq_ids)
        return self._submit(lambda s, t, c: mgr.allocate(s, t, cache_salt=c),
                            ids, token_ids, cache_salt,
                            undo=lambda r: None if r is None else mgr.free_batch(ids))

    def append_slots(self, seq_id: int, token_ids: Sequence[int]) -> asyncio.Future:
        return self._submit(self.manager.append_slots, seq_id, token_ids)

    def fork(self, parent: int, child: int) -> asyncio.Future:
        return self._submit(self.manager.fork, parent, child,
                            undo=lambda _: self.manager.free(child))

    def free(self, seq_id: int) -> asyncio.Future:
        return self._submit(self.manager.free, seq_id)

    def swap_out(self, seq_ids: Sequence[int]) -> asyncio.Future:
        return self._submit(self.manager.swap_out, seq_ids)

    def swap_in(self, seq_ids: Sequence[int]) -> asyncio.Future:
        return self._submit(self.manager.swap_in, seq_ids)

    # ---------------------------------------------------------------- raw blocks
    def allocate_blocks(self, n: int) -> asyncio.Future:
        """``n`` device blocks with ref 1 (no table), or None: for KV transfer style users."""
        pool = self.manager.device_pool
        return self._submit(pool.allocate_many, n, undo=lambda ids: ids and pool.free_many(ids))

    def free_blocks(self, block_ids: Sequence[int]) -> asyncio.Future:
        return self._submit(self.manager.device_pool.free_many, block_ids)

    def allocate_host_blocks(self, n: int) -> asyncio.Future:
        """``n`` host blocks lent out of the tables (``manager.lend_host``), or None: the
        remote prefetch lands fetched bytes in them before the step thread copies them in."""
        mgr = self.manager
        return self._submit(mgr.lend_host, n, undo=lambda ids: ids and mgr.return_host(ids))

    def free_host_blocks(self, block_ids: Sequence[int]) -> asyncio.Future:
        return self._submit(self.manager.return_host, block_ids)
