"""MergedUpdates: several update streams read as one, in the order their updates arrive.

A request's prompts (handlers.py PromptStreams) and a prompt's child requests
(child_requests.py) each run as several engine streams that one reader consumes as they come.
One pump task per stream copies its updates, up to the ``finished`` one, into a queue; ``get``
hands out ``(i, item)``: stream ``i``'s update, the exception its stream raised (the reader
raises it), or ``None`` when stream ``i`` ended. The pumps start at the first ``get``; ``stop`` cancels them (the
streams themselves are their owner's to close).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

__all__ = ["MergedUpdates"]


class MergedUpdates:
    """Owned by one reader. Invariant: every started stream puts exactly one final item
    (``None`` or its exception) unless stopped."""

    def __init__(self, streams: Sequence[Any], skip: Sequence[bool] = ()) -> None:
        """``streams``: async iterators of updates; ``skip[i]``: stream ``i`` already ended
        (its final update read before), so it is never pumped."""
        self.streams = list(streams)
        self.skip = list(skip) or [False] * len(self.streams)
        self.live = self.skip.count(False)  # streams whose final item has not been handed out
        self._queue: asyncio.Queue = asyncio.Queue()
        self._pumps: list[asyncio.Task] = []

    async def get(self) -> tuple[int, Any]:
        """The next ``(i, item)`` (see the module docstring); StopAsyncIteration once every
        stream's final item was handed out."""
        if not self._pumps and self.live:
            self._pumps = [asyncio.create_task(self._pump(i))
                           for i, ended in enumerate(self.skip) if not ended]
        if not self.live:
            raise StopAsyncIteration
        i, item = await self._queue.get()
        if item is None or isinstance(item, BaseException):
            self.live -= 1
        return i, item

    async def _pump(self, i: int) -> None:
        queue = self._queue
        try:
            async for out in self.streams[i]:
                queue.put_nowait((i, out))
                if out.finished:  # its last update: nothing is read past it
                    break
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - handed to the reader, which raises it
            queue.put_nowait((i, exc))
            return
        queue.put_nowait((i, None))

    async def stop(self) -> None:
        """Cancel the pumps and wait for them (nothing more is read)."""
        for t in self._pumps:
            t.cancel()
        if self._pumps:
            await asyncio.gather(*self._pumps, return_exceptions=True)
