"""FailedCopies: KV copy batches that failed (every kind: step_copies.py NOTE(copy-settle)),
handed from the copy worker to the step thread.

The copy worker records a failure from its done callback; the step thread drains the record
(at its next step, or within the step once it waited: step_copies.py) and fails those
requests (the engine core stays single-threaded: the worker never touches the scheduler).
"""

from __future__ import annotations

from collections import deque
from typing import Any

__all__ = ["FailedCopies", "SwapOutWatch"]


class FailedCopies(deque):
    """Request ids whose copy failed, appended by any thread, drained by one.

    A deque itself, so the step thread's ``if failed_copies:`` is the deque's own C-level
    truth test and runs no code of this module while nothing failed.

    NOTE(failed-deque): the copy worker appends, the step thread pops: both are single atomic
    deque operations, so an append racing a drain is never lost (a list swapped out for an
    empty one could drop one)."""

    def on_copy_done(self, handle: Any) -> None:
        """A copy handle's done callback (the worker thread): only record the failure."""
        if handle.exception() is not None and handle.tag is not None:
            self.note(handle.tag)

    def note(self, request_id: str) -> None:
        """Record that a background copy of ``request_id`` failed (any thread); the next
        step fails the request."""
        self.append(request_id)

    def drain(self) -> list[str]:
        """Pop every recorded failure (the step thread; appends may race)."""
        out = []
        while True:
            try:
                out.append(self.popleft())
            except IndexError:
                return out


class SwapOutWatch:
    """The engine's swap-out copies not yet confirmed to the scheduler, in submission order
    (the step thread only). NOTE(swap-out-confirm): a swap-out runs on behind the step that
    planned it; its host blocks are published only once ``completed`` found it done."""

    def __init__(self) -> None:
        self.handles: list[tuple[Any, int]] = []  # (copy handle, the step that planned it)

    def watch(self, handle: Any, step_id: int) -> None:
        self.handles.append((handle, step_id))

    def completed(self) -> list[tuple[str, int]]:
        """``(request_id, step_id)`` of the copies that completed without error since the last
        call; failed ones are dropped (FailedCopies fails their requests), running ones kept."""
        ok, left = [], []
        for h, step_id in self.handles:
            if not h.done():
                left.append((h, step_id))
            elif h.exception() is None and h.tag is not None:
                ok.append((h.tag, step_id))
        self.handles = left
        return ok
