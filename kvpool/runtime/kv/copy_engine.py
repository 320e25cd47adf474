"""CopyEngine: runs swap-out, swap-in, copy-on-write and defrag block copies off the compute path.

Invariants:

- **FIFO**: batches execute one at a time, strictly in submission order, on one worker thread;
  a later batch never overtakes an earlier one (so a swap-out's reads of a freed device block
  finish before a later batch, or a later step, may write it).
- **Busy blocks**: a block is busy in its pool from ``submit`` until its handle is done
  (success, failure or cancellation): exactly the source and destination blocks of the pending
  handles. Compute must not read or write a busy block: call :meth:`wait_for_blocks` with the
  blocks of the forward first.
- **Failure isolation**: an exception inside a batch fails only its handle (``wait`` re-raises a
  :class:`~kvpool.errors.CopyError` chained to the cause); the worker keeps serving later batches.
  A failed batch's destination bytes are unspecified (some runs may have been copied).
- Every handle finishes exactly once; its callbacks run once, after it is done.
- **Worker death** (NOTE(worker-death)): a BaseException that ends the worker thread fails the
  running batch and every queued one (:class:`~kvpool.errors.CopyError`), turns the engine
  unhealthy (:meth:`CopyEngine.is_healthy`) and makes ``submit`` raise :class:`EngineError`.

Threads::

    submitters (any thread)        worker thread "kvpool-copy"
    submit() -> CopyHandle   ---->  deque (FIFO) -> faults.before_copy -> backend.copy() -> finish
    wait_for_blocks / wait  <-----  handle events (after counters, pending set, callbacks)

The handle (copy_handle.py) is what a submitter holds; it is re-exported here.

Kinds and pools: ``swap_out`` device->host, ``swap_in`` host->device, ``cow`` and ``defrag``
device->device. Pairs are ``(src, dst)`` block ids, as the block manager returns them.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Iterable

import torch

from kvpool.errors import CopyError, EngineError
from kvpool.runtime.ema import ema
from kvpool.runtime.faults import NO_FAULTS, FaultPlan
from kvpool.runtime.kv.copy_backends import COPY_KINDS, CopyBackend, TorchCopyBackend
from kvpool.runtime.kv.copy_checks import check_pools, checked_pairs
from kvpool.runtime.kv.copy_handle import CopyCancelledError, CopyHandle

__all__ = ["COPY_KINDS", "CopyCancelledError", "CopyEngine", "CopyHandle", "CopyStats"]

log = logging.getLogger(__name__)


@dataclass(slots=True)
class CopyStats:
    """Counters snapshot (plain data for metrics and the scheduler's cost model)."""

    blocks: dict[str, int]  # kind -> blocks copied by successful batches
    bytes: dict[str, int]  # kind -> bytes copied by successful batches
    batches: dict[str, int]  # kind -> successful batches
    failures: dict[str, int]  # kind -> failed or cancelled batches
    seconds: dict[str, float]  # kind -> backend time of successful batches
    bandwidth: dict[str, float]  # kind -> EMA of bytes/s per batch (0.0 before the first)
    bandwidth_all: float  # EMA over all kinds, bytes/s
    pending: int  # handles submitted and not yet done
    backend: str = ""


class CopyEngine:
    """Executes copy batches on a worker thread through a backend (see the module docstring).

    ``device_kv``/``host_kv`` are the pools (``KVStorage.device_kv``/``host_kv``); the backend
    defaults to :class:`TorchCopyBackend`. ``bandwidth_alpha`` weights the newest batch in the
    bandwidth EMA. ``worker_nice`` > 0 raises the worker thread's nice value by that much
    (lower CPU priority; Linux only, best effort): on an oversubscribed CPU box compute then
    keeps more of its share while copies run in the gaps (a compute thread blocked in
    ``wait_for_blocks`` sleeps, so the copies it needs still get the CPU); bench/copy.py reports
    both. ``faults`` (a :class:`~kvpool.runtime.faults.FaultPlan`, no faults by default) is
    consulted before each batch. Use as a context manager or call :meth:`close`.
    """

    def __init__(self, device_kv: torch.Tensor, host_kv: torch.Tensor | None = None, *,
                 backend: CopyBackend | None = None,
                 faults: FaultPlan | None = None,
                 bandwidth_alpha: float = 0.2, worker_nice: int = 0,
                 name: str = "kvpool-copy") -> None:
        check_pools(device_kv, host_kv)
        if not 0.0 < bandwidth_alpha <= 1.0:
            raise ValueError("bandwidth_alpha must lie in (0, 1]")
        self._pools = {"device": device_kv}
        if host_kv is not None:
            self._pools["host"] = host_kv
        self.bytes_per_block = device_kv[0].numel() * device_kv.element_size() \
            if device_kv.shape[0] else 0
        self.backend: CopyBackend = backend if backend is not None else TorchCopyBackend()
        self.backend.attach(self._pools)
        self._faults = faults if faults is not None else NO_FAULTS
        self._alpha = bandwidth_alpha
        self._nice = int(worker_nice)
        self._cond = threading.Condition()
        self._queue: deque[CopyHandle] = deque()
        # seq -> handle, queued or running; the step thread tests it for emptiness without the
        # lock (one dict truth test) before it asks wait_for_blocks (NOTE(speed))
        self.pending: dict[int, CopyHandle] = {}
        self._seq = 0
        self._running: CopyHandle | None = None  # the batch the worker is executing
        self.worker_error: BaseException | None = None  # what ended the worker (worker-death)
        self._closing = False
        self._closed = False
        kinds = list(COPY_KINDS)
        self._blocks = dict.fromkeys(kinds, 0)
        self._bytes = dict.fromkeys(kinds, 0)
        self._batches = dict.fromkeys(kinds, 0)
        self._failures = dict.fromkeys(kinds, 0)
        self._seconds = dict.fromkeys(kinds, 0.0)
        self._bw = dict.fromkeys(kinds, 0.0)
        self._bw_all = 0.0
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    @classmethod
    def for_storage(cls, storage: Any, **kwargs: Any) -> "CopyEngine":
        """An engine over a :class:`~kvpool.runtime.kv.storage.KVStorage`'s two pools."""
        return cls(storage.device_kv, storage.host_kv, **kwargs)

    # ------------------------------------------------------------------ submit
    def submit(self, kind: str, pairs: Iterable[tuple[int, int]], *,
               tag: Any = None) -> CopyHandle:
        """Queue one batch of ``(src, dst)`` block pairs of ``kind`` and return its handle.

        Validates at once (raises, queues nothing): ``kind`` in :data:`COPY_KINDS`
        (``ValueError``), pairs not a mapping (``TypeError``: NOTE(pairs-mapping)), ids are
        ints (``TypeError``) inside their pools (:class:`InvalidBlockError`), no destination
        twice (``ValueError``): copy_checks.py. A pair ``(b, b)`` of one pool is not counted
        as copied (NOTE(no-op-pairs)); an empty batch returns an already-done handle. Raises
        :class:`EngineError` after :meth:`close` or once the worker died.
        """
        if kind not in COPY_KINDS:
            raise ValueError(f"unknown copy kind {kind!r}: use one of {', '.join(COPY_KINDS)}")
        pairs_t, moved = checked_pairs(kind, pairs, self._pools)
        with self._cond:
            self.check_worker()
            if self._closing:
                raise EngineError("the copy engine is closed; no more copies can be submitted")
            self._seq += 1
            handle = CopyHandle(self._seq, kind, pairs_t, self.bytes_per_block, tag, moved)
            if not pairs_t:
                handle.finish(None, 0.0)
                return handle
            self.pending[handle.seq] = handle
            self._queue.append(handle)
            self._cond.notify_all()
        return handle

    # ------------------------------------------------------------------ block safety
    def wait_for_blocks(self, block_ids: Iterable[int], pool: str = "device",
                        timeout: float | None = None) -> list[CopyHandle]:
        """Wait until every batch submitted *before this call* that touches ``block_ids`` of
        ``pool`` is done; return those handles (check ``exception()`` for failures). Batches
        submitted later are not waited for. ``TimeoutError`` after ``timeout`` seconds;
        :class:`EngineError` once the worker died (NOTE(worker-death): EngineCore._copy calls
        this while ``worker_error`` is set, so the step that finds it dead fails the engine)."""
        with self._cond:
            if not self.pending:  # NOTE(speed): the common step: ``block_ids`` is not read
                self.check_worker()
                return []
            wanted = frozenset(block_ids)
            hit = [h for h in self.pending.values() if not wanted.isdisjoint(h.blocks(pool))]
        done = self._wait_all(sorted(hit, key=lambda h: h.seq), timeout)
        self.check_worker()
        return done

    def _wait_all(self, handles: list[CopyHandle], timeout: float | None) -> list[CopyHandle]:
        deadline = None if timeout is None else time.monotonic() + timeout
        for h in handles:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not h.wait_done(left):
                raise TimeoutError(f"{h!r} not done after {timeout} s")
        return handles

    # ------------------------------------------------------------------ stats
    def bandwidth(self, kind: str | None = None) -> float:
        """EMA of measured bytes/s (of ``kind``, or of all batches); 0.0 before any copy."""
        with self._cond:
            return self._bw_all if kind is None else self._bw[kind]

    def stats(self) -> CopyStats:
        with self._cond:
            return CopyStats(dict(self._blocks), dict(self._bytes), dict(self._batches),
                             dict(self._failures), dict(self._seconds), dict(self._bw),
                             self._bw_all, len(self.pending), self.backend.name)

    # ------------------------------------------------------------------ health
    def is_healthy(self) -> bool:
        """False once the worker died (NOTE(worker-death)); a closed engine stays healthy."""
        return self.worker_error is None

    def check_worker(self) -> None:
        """Raise :class:`EngineError` if the worker died (NOTE(worker-death))."""
        if self.worker_error is not None:
            raise EngineError(f"the copy worker died ({self.worker_error!r}): its batches "
                              "failed and no more copies can run")

    # ------------------------------------------------------------------ worker
    def _run(self) -> None:
        if self._nice > 0:
            try:  # NOTE(nice): on Linux a thread id names one thread: only the worker is lowered
                tid = threading.get_native_id()
                os.setpriority(os.PRIO_PROCESS, tid,
                               min(19, os.getpriority(os.PRIO_PROCESS, tid) + self._nice))
            except (AttributeError, OSError) as exc:
                log.info("copy worker priority unchanged: %s", exc)
        try:
            while True:
                with self._cond:
                    while not self._queue and not self._closing:
                        self._cond.wait()
                    if not self._queue:
                        return  # closing and drained
                    handle = self._running = self._queue.popleft()
                self._execute(handle)
                self._running = None
        except BaseException as exc:  # noqa: BLE001 - NOTE(worker-death): logged, then failed
            self._died(exc)
        finally:
            self._fail_leftovers()

    def _died(self, exc: BaseException) -> None:
        """NOTE(worker-death): a BaseException (SystemExit, KeyboardInterrupt...) escaped a
        batch and ends the worker. Before, the batch it was running stayed pending forever:
        EngineCore._copy waited on it with no timeout while the engine looked healthy. Now it
        is logged once here, the engine turns unhealthy and refuses new batches, and
        _fail_leftovers fails the running batch and the queued ones, releasing every waiter."""
        with self._cond:
            self.worker_error = exc
            self._closing = True
        log.critical("the copy worker died running %r: %r; that batch and the queued ones fail, "
                     "and no more copies can run", self._running, exc, exc_info=exc)

    def _fail_leftovers(self) -> None:
        """When the worker ends, fail the batch it was running (if it died in one) and what
        is queued rather than leave waiters hanging, and refuse new work."""
        with self._cond:
            self._closing = True
            running, self._running = self._running, None
            left = [running] if running is not None and not running.done() else []
            left += self._queue
            self._queue.clear()
        why = (f"the copy worker died ({self.worker_error!r})" if self.worker_error is not None
               else "the copy worker exited")
        for h in left:
            error = CopyError(f"{h.kind} copy #{h.seq} lost: {why}")
            error.__cause__ = self.worker_error
            self._complete(h, error, None)

    def _execute(self, handle: CopyHandle) -> None:
        src_pool, dst_pool = COPY_KINDS[handle.kind]
        handle.started_at = time.monotonic()
        error: BaseException | None = None
        seconds: float | None = None
        try:
            self._faults.before_copy(handle.kind, handle.pairs, handle.tag)
            t0 = time.perf_counter()
            self.backend.copy(src_pool, dst_pool, handle.pairs)  # validated by submit()
            seconds = time.perf_counter() - t0
        except Exception as exc:  # noqa: BLE001 - any failure fails this handle only
            error = CopyError(f"{handle.kind} copy #{handle.seq} of {handle.num_blocks} blocks "
                              f"failed: {exc}")
            error.__cause__ = exc
            log.warning("%s", error)
        self._complete(handle, error, seconds)

    def _complete(self, handle: CopyHandle, error: BaseException | None,
                  seconds: float | None) -> None:
        kind = handle.kind
        with self._cond:
            self.pending.pop(handle.seq, None)
            if error is None:
                self._blocks[kind] += handle.num_blocks
                self._bytes[kind] += handle.bytes
                self._batches[kind] += 1
                self._seconds[kind] += seconds or 0.0
                if seconds and seconds > 0 and handle.bytes:  # NOTE(no-op-pairs)
                    rate = handle.bytes / seconds
                    self._bw[kind] = ema(self._bw[kind], rate, self._alpha)
                    self._bw_all = ema(self._bw_all, rate, self._alpha)
            else:
                self._failures[kind] += 1
            self._cond.notify_all()
        # NOTE(order): the handle leaves the pending set before it turns done, so a waiter woken
        # by the handle never sees its blocks still busy.
        handle.finish(error, seconds)

    # ------------------------------------------------------------------ lifecycle
    def close(self, cancel: bool = False, timeout: float | None = None) -> None:
        """Stop accepting work; run the queued batches (default) or fail them with
        :class:`CopyCancelledError` (``cancel=True``; a batch already running completes); join
        the worker. Idempotent. ``TimeoutError`` if the worker is still busy after ``timeout``."""
        cancelled: list[CopyHandle] = []
        with self._cond:
            self._closing = True
            if cancel:
                cancelled = list(self._queue)
                self._queue.clear()
            self._cond.notify_all()
        for h in cancelled:
            self._complete(h, CopyCancelledError(f"{h.kind} copy #{h.seq} cancelled by close()"),
                           None)
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError(f"copy worker still running after {timeout} s")
        if not self._closed:
            self._closed = True
            self.backend.close()

    @property
    def closed(self) -> bool:
        return self._closing

    def __enter__(self) -> "CopyEngine":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"CopyEngine(backend={self.backend.name}, pending={len(self.pending)}, "
                f"closed={self._closing})")

