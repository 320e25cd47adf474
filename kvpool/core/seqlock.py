"""SeqLock: one pool's writer lock and its reader version (docs/architecture.md#locking).

Invariant: ``version`` is odd exactly while a writer is inside the outermost ``with`` block;
each completed outermost writer section adds 2. Writers nest (the lock is re-entrant): only
the outermost entry and exit move the version, so a reader never sees an even version in the
middle of a batch.

Readers never take the lock::

    v = seqlock.version          # odd: a writer is inside, retry
    ... read fields ...
    seqlock.version == v         # unchanged: the read saw all of a write or none of it

One reusable object serves every ``with``: the nesting depth is kept on it, and it is only
touched while the lock is held, so no per-entry state is needed (and no allocation per entry).

A write that readers can see as ONE store (atomic under the GIL, e.g. one counter) cannot be
seen torn, so it needs the lock but not the odd phase: the writer holds ``lock`` (a C-level
``with``, no Python frames) and calls ``single_store()`` after the store, which adds 2 (one
completed write) unless the thread is already inside a section whose exit will count it.
Readers then retry exactly as for a section. This is the decode hot path (one call per token),
where the two Python-level frames of ``with seqlock:`` cost more than the work they guard.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class SeqLock:
    """``with seqlock:`` takes the lock and keeps the seqlock version (see module docstring)."""

    __slots__ = ("lock", "version", "_depth", "_acquire", "_release")

    def __init__(self) -> None:
        self.lock = threading.RLock()  # re-entrant so a batch can nest public calls
        self.version = 0  # seqlock version: odd while a writer is inside
        self._depth = 0  # nesting depth of writer sections (written only under the lock)
        # NOTE(speed): bound methods cached once; __enter__ runs per decode token
        self._acquire = self.lock.acquire
        self._release = self.lock.release

    def __enter__(self) -> SeqLock:
        self._acquire()
        d = self._depth
        self._depth = d + 1
        if not d:
            self.version += 1
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        d = self._depth - 1
        self._depth = d
        if not d:
            self.version += 1
        self._release()

    def single_store(self) -> None:
        """Count one completed write made of a single reader-visible store. Caller holds
        ``lock``; inside a section (version odd, necessarily this thread's) it does nothing."""
        v = self.version
        if not v & 1:
            self.version = v + 2

    def held_here(self) -> bool:
        """Whether the calling thread is inside a writer section. NOTE(own-reader): a reader
        on the writer's own thread (inside ``manager.batch()``, an observer or evict hook)
        would wait for an odd version forever; the state cannot move under it, so it reads
        directly. Holding the lock, an odd version can only be this thread's; a try-lock,
        so it costs a writer nothing and never blocks."""
        if not self._acquire(False):
            return False  # another thread holds the lock
        odd = self.version & 1
        self._release()
        return bool(odd)

    def read(self, fn: Callable[[], T]) -> tuple[T, int]:
        """Run ``fn`` until it ran with no writer inside; returns its result and the (even)
        version it saw. On the writer's own thread it runs once, at the odd version
        (NOTE(own-reader))."""
        while True:
            v = self.version
            if v & 1:
                if self.held_here():
                    return fn(), v
                time.sleep(0)  # a writer is inside; yield the GIL to it
                continue
            out = fn()
            if self.version == v:
                return out, v
