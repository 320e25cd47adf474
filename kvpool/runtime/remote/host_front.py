"""The asyncio front of the host pool: the remote prefetch's host blocks, taken from the loop.

The remote reader lends host blocks to land fetched bytes in, and the reader and writer give
them back, from coroutines, while the engine's step thread holds the pool lock for whole
steps::

    front = HostBlockFront(manager)
    ids = await front.allocate_host_blocks(8)           # lent host blocks, or None
    await front.free_host_blocks(ids)

``call(fn, *args, undo=)`` applies any manager callable the same way; the stress harness's
front (stress/pool/front.py) builds the manager's other calls on it.

Every method is a coroutine function: the call is made when the coroutine first runs (when
it is awaited, or when the task wrapping it starts), and calls made in that order are
applied in that order.

Inline when free: the coroutine first tries the pool lock without blocking. When nobody
holds it (no step thread inside a step) and no batch is in a worker, the call is applied at
once, on the caller's stack, and the coroutine returns its value: no Future, no queueing,
no yield to the loop. That is the cost of a direct call plus one coroutine. Calls queued
ahead of it (below) are applied first, in the same lock hold, so it never overtakes them.

Batched under contention: when the try fails (the step thread holds the lock) or a batch is
in a worker, the call queues an operation and a future and awaits it. The first queued call
of an iteration schedules one flush with ``loop.call_soon``; asyncio runs callbacks
scheduled during an iteration in the next one, so the flush sees every operation queued by
the coroutines that ran in between (unless a call that found the lock free applied them
sooner)::

    iteration k     coro A: allocate(3) ─┐   coro B: free(7) ─┐   coro C: append(...) ─┐
                                         v                    v                        v
    iteration k+1   flush: lock once ── A, B, C applied in order ── futures resolved ── unlock

The pool lock is shared with the engine's step thread, so the flush never blocks the event
loop on it: it tries a non-blocking acquire and, when the lock is busy, hands the whole batch
to a worker thread (one hop for the batch, not one per call). Scarcity comes back as the core
returns it (None); misuse raises in the awaiting coroutine only, never in the others. A
coroutine cancelled while its queued operation was being applied gets it undone (the undo
is queued like any call), so a cancellation never leaks blocks or tables. NOTE(cancel-free):
a cancelled caller's queued operation is skipped when it takes something (nothing to
undo), but a release (``free_host_blocks``, ``call(..., always=True)``, every undo) is
applied anyway, in its turn: a free has no undo, so skipping it would lend its blocks out
for good (an engine shutdown cancels prefetches waiting on exactly such frees). The
cancelled caller still gets its CancelledError; the free's result or error goes nowhere.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kvpool.core import BlockSpaceManager, Device
from kvpool.errors import QueueFullError

# fn, args, future, undo(result, *args) or None, applied even if cancelled (NOTE(cancel-free))
_Op = tuple[Callable[..., Any], tuple, asyncio.Future, Callable[..., Any] | None, bool]


class HostBlockFront:
    """Applies BlockSpaceManager calls inline when the pool lock is free, in batches per loop
    iteration when it is not.

    Invariant: every call is applied exactly once, in the order the calls were made: an
    inline call runs only with no batch in a worker and after everything queued before it,
    and at most one batch is in a worker (a flush waits for it). Queued calls are applied inside
    one ``manager.batch()`` (one acquisition of the device and host pool locks) per flush,
    and each future receives its result or its own exception.
    """

    def __init__(self, manager: BlockSpaceManager, *, max_pending: int = 100_000,
                 executor: ThreadPoolExecutor | None = None) -> None:
        self.manager = manager
        self.max_pending = max_pending
        self._pending: list[_Op] = []  # queued, not yet handed to a flush
        self._queued = 0  # calls queued or in a worker and not yet resolved (order guard)
        self._scheduled = False  # a flush is scheduled, or due when the worker's batch is back
        self._in_worker = False  # a batch is in a worker thread (maybe not yet applied)
        self._executor = executor
        lock = manager.device_pool.lock
        # NOTE(speed): bound methods looked up once; the inline path runs per call
        self._try_lock = lock.acquire
        self._unlock = lock.release
        self.flushes = 0  # batches applied (monotonic)
        self.batched_ops = 0  # operations applied in batches (monotonic)
        self.offloaded = 0  # batches handed to a worker because the lock was busy
        self.inline = 0  # calls applied at once because the lock was free (monotonic)

    @property
    def ops(self) -> int:
        """Operations applied, inline or batched (monotonic)."""
        return self.inline + self.batched_ops

    @property
    def queued(self) -> int:
        """Calls queued or being applied in a worker, not yet resolved."""
        return self._queued

    # ---------------------------------------------------------------- the one entry
    async def call(self, fn: Callable[..., Any], *args: Any,
                   undo: Callable[..., Any] | None = None, always: bool = False) -> Any:
        """Apply ``fn(*args)`` under the pool locks, inline or batched (module docstring).
        ``undo(result, *args)`` compensates an operation that was applied after its caller
        was cancelled (so nothing it created is left without an owner). ``always``: a
        release, applied even when its caller is cancelled while it is queued
        (NOTE(cancel-free))."""
        if not self._in_worker and self._try_lock(False):
            # NOTE(inline): the lock is free and nothing is in a worker: apply what is queued
            # ahead first (order kept, and those callers need not wait for the flush), then
            # this call. The manager's calls take their own (re-entrant) writer sections.
            try:
                if self._pending:
                    self._apply_pending()
                self.inline += 1
                return fn(*args)
            finally:
                self._unlock()
        return await self._enqueue(fn, args, undo, always)

    def _enqueue(self, fn: Callable[..., Any], args: tuple,
                 undo: Callable[..., Any] | None, always: bool) -> asyncio.Future:
        pending = self._pending
        if len(pending) >= self.max_pending:
            raise QueueFullError(f"{len(pending)} pool operations pending; retry later")
        loop = asyncio.get_running_loop()
        fut = loop.create_future()
        pending.append((fn, args, fut, undo, always))
        self._queued += 1
        if not self._scheduled:
            self._scheduled = True
            loop.call_soon(self._flush, loop)
        return fut

    def _flush(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._in_worker:
            # NOTE(order): the worker's batch may not have taken the lock yet; applying this
            # one now (the lock free) would overtake it. _resolve_job flushes when it is back.
            return
        self._scheduled = False
        if not self._pending:  # an inline call applied them already
            return
        if self._try_lock(False):  # NOTE(loop): never block the loop on the step lock
            try:
                self._apply_pending()
            finally:
                self._unlock()
        else:
            batch, self._pending = self._pending, []
            self.offloaded += 1
            self._in_worker = True
            job = loop.run_in_executor(self._executor, self._apply, batch)
            job.add_done_callback(lambda f: self._resolve_job(batch, f))

    def _apply_pending(self) -> None:
        """Apply and resolve everything queued; the caller holds the lock and no batch is in
        a worker. Twice at most: resolving may queue undos, which go before newer calls."""
        while self._pending:
            batch, self._pending = self._pending, []
            self._resolve(batch, self._apply(batch))

    def _apply(self, batch: list[_Op]) -> list[tuple[bool, Any]]:
        """Run every operation under one manager.batch(); capture results and exceptions."""
        out: list[tuple[bool, Any]] = []
        with self.manager.batch():
            for fn, args, fut, _, always in batch:
                if not always and fut.cancelled():  # NOTE(cancel-free): takes are skipped
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
        self._in_worker = False
        self._scheduled = False  # a flush that came meanwhile returned early (NOTE(order))
        exc = job.exception()
        if exc is not None:  # the batch itself failed (not one operation): fail them all
            self._resolve(batch, [(False, exc)] * len(batch))
        else:
            self._resolve(batch, job.result())
        if self._pending and not self._scheduled:  # queued behind the worker's batch
            self._scheduled = True
            job.get_loop().call_soon(self._flush, job.get_loop())

    def _resolve(self, batch: list[_Op], results: list[tuple[bool, Any]]) -> None:
        self._queued -= len(batch)
        for (_, args, fut, undo, _), (ok, value) in zip(batch, results):
            if fut.done():
                if fut.cancelled() and ok and undo is not None:
                    # NOTE(cancel): applied, then abandoned: queued, so it keeps its turn
                    self._enqueue(undo, (value, *args), None, True)
                continue
            if ok:
                fut.set_result(value)
            elif value is not None:
                fut.set_exception(value)
            else:
                fut.cancel()

    # ---------------------------------------------------------------- host blocks
    def _undo_host(self, ids: list[int] | None, *_: Any) -> None:
        if ids:
            self.manager.lender.give_back(Device.HOST, ids)

    def allocate_host_blocks(self, n: int):
        """``n`` host blocks lent out of the tables (``manager.lender.lend``), or None: the
        remote prefetch lands fetched bytes in them before the step thread copies them in.
        A plain function returning call()'s coroutine: one coroutine per call, not two.
        NOTE(host-count): ``n`` must be an int >= 0 (``ValueError``, raised here, before
        anything is queued, as ``allocate_many`` does); -1 lent ``[]`` and True one block."""
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise ValueError(f"allocate_host_blocks: n must be an int >= 0, got {n!r}")
        return self.call(self.manager.lender.lend, Device.HOST, n, undo=self._undo_host)

    def free_host_blocks(self, block_ids: Sequence[int]):
        """Give lent host blocks back; carried out once asked for, even if the caller is
        cancelled while it is queued (NOTE(cancel-free))."""
        return self.call(self.manager.lender.give_back, Device.HOST, block_ids, always=True)
