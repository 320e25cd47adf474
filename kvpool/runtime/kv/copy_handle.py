"""CopyHandle: one batch submitted to the CopyEngine, and how its caller waits on it.

A handle is created by ``CopyEngine.submit`` and finished exactly once by the engine's worker
(``finish``); callers ``wait`` / ``exception`` / ``add_done_callback`` on it from any thread::

    submit() -> handle (pending) --worker runs the batch--> finish(error, seconds)
                                                              callbacks, then the event:
                                                              wait() returns or re-raises
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

from kvpool.errors import CopyError
from kvpool.runtime.kv.copy_backends import COPY_KINDS

__all__ = ["CopyCancelledError", "CopyHandle"]

log = logging.getLogger(__name__)


class CopyCancelledError(CopyError):
    """The batch never ran: the engine was closed with ``cancel=True`` before its turn."""


class CopyHandle:
    """One submitted batch. Metadata is fixed at submit; ``seconds``/``error`` once done.

    Invariant: ``done()`` turns true exactly once, after ``error``/``seconds`` are set and after
    the callbacks added until then have run (on the worker thread); callbacks added later run at
    once on the caller's thread.
    """

    __slots__ = ("kind", "pairs", "num_blocks", "bytes", "tag", "seq", "submitted_at",
                 "started_at", "finished_at", "seconds", "_error", "_event", "_callbacks",
                 "_lock", "_blocks")

    def __init__(self, seq: int, kind: str, pairs: tuple[tuple[int, int], ...],
                 bytes_per_block: int, tag: Any, num_blocks: int | None = None) -> None:
        self.seq = seq  # submission number, increasing (FIFO order)
        self.kind = kind  # one of COPY_KINDS
        self.pairs = pairs  # ((src, dst), ...) as submitted
        # the pairs that move bytes: a (b, b) pair of one pool does not (NOTE(no-op-pairs))
        self.num_blocks = len(pairs) if num_blocks is None else num_blocks
        self.bytes = self.num_blocks * bytes_per_block  # bytes this batch moves
        self.tag = tag  # caller's metadata (e.g. request ids), never read by the engine
        self.submitted_at = time.monotonic()
        self.started_at: float | None = None
        self.finished_at: float | None = None
        self.seconds: float | None = None  # copy time (backend), None until done or if cancelled
        self._error: BaseException | None = None
        self._event = threading.Event()
        self._callbacks: list[Callable[[CopyHandle], Any]] | None = []  # None once finishing
        self._lock = threading.Lock()
        self._blocks: dict[str, frozenset[int]] | None = None  # built on first use

    def blocks(self, pool: str) -> frozenset[int]:
        """The blocks of ``pool`` this batch reads or writes."""
        blocks = self._blocks
        if blocks is None:  # lazily: most handles are waited on, never asked for blocks
            src_pool, dst_pool = COPY_KINDS[self.kind]
            srcs = frozenset(s for s, _ in self.pairs)
            dsts = frozenset(d for _, d in self.pairs)
            blocks = self._blocks = ({src_pool: srcs | dsts} if src_pool == dst_pool
                                     else {src_pool: srcs, dst_pool: dsts})
        return blocks.get(pool, frozenset())

    def done(self) -> bool:
        return self._event.is_set()

    def cancelled(self) -> bool:
        return isinstance(self._error, CopyCancelledError)

    def wait(self, timeout: float | None = None) -> "CopyHandle":
        """Block until done; re-raise the batch's :class:`CopyError`; ``TimeoutError`` if not
        done within ``timeout`` seconds. Returns ``self``."""
        if not self._event.wait(timeout):
            raise TimeoutError(f"copy {self.kind}#{self.seq} not done after {timeout} s")
        if self._error is not None:
            raise self._error
        return self

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The failure (a :class:`CopyError`) or ``None``; waits like :meth:`wait`, except
        inside a done callback (the outcome is already known there: no wait, no deadlock)."""
        if self.finished_at is None and not self._event.wait(timeout):
            raise TimeoutError(f"copy {self.kind}#{self.seq} not done after {timeout} s")
        return self._error

    def add_done_callback(self, fn: Callable[["CopyHandle"], Any]) -> None:
        """Call ``fn(handle)`` once done (on the worker thread; exceptions are logged). From
        asyncio, hop back with ``loop.call_soon_threadsafe``."""
        with self._lock:
            if self._callbacks is not None:
                self._callbacks.append(fn)
                return
        _run_callback(fn, self)

    def failed(self) -> bool:
        """Done with a failure (no wait)."""
        return self._error is not None

    def wait_done(self, timeout: float | None = None) -> bool:
        """Wait until done; False if ``timeout`` passed first (never raises the failure)."""
        return self._event.wait(timeout)

    def finish(self, error: BaseException | None, seconds: float | None) -> None:
        """Complete the handle (the CopyEngine calls this once, when the batch ran)."""
        self._error = error
        self.seconds = seconds
        self.finished_at = time.monotonic()
        with self._lock:
            callbacks, self._callbacks = self._callbacks, None  # later adds run at once
        # NOTE(callbacks-first): callbacks run before waiters wake, so a caller returning from
        # wait() sees the effects of every callback registered before completion.
        for fn in callbacks or ():
            _run_callback(fn, self)
        self._event.set()

    def __repr__(self) -> str:
        state = ("pending" if not self.done() else "failed" if self._error else "done")
        return (f"CopyHandle({self.kind}#{self.seq}, blocks={self.num_blocks}, "
                f"bytes={self.bytes}, {state})")


def _run_callback(fn: Callable[[CopyHandle], Any], handle: CopyHandle) -> None:
    try:
        fn(handle)
    except Exception:  # a callback bug must not kill the worker
        log.exception("copy handle callback %r failed for %r", fn, handle)
