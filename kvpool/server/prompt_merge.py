"""PromptStreams: the engine streams of one HTTP request's prompts, read as one stream.

::

    start()     every prompt's pool rules asked first (NOTE(all-or-nothing): one that can
                never fit fails the request before any is queued), then the ticket opens
                <id>, <id>-1 ... <id>-<P-1> (request_gate.py) and each one's first update is
                awaited (the engine's own errors surface before any byte is sent)
    firsts()    [(0, first_0), ..., (P-1, first_P-1)]
    async for   (prompt index, update) as the engine delivers them, until every prompt finished
    release()   close every stream; abort every prompt that has not finished; close the
                ticket (idempotent)

One prompt reads its stream directly (the common path adds no task). Several are pumped by one
task each into a queue, so a slow prompt never holds back another's chunks.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING

from kvpool.runtime.engine.output_processor import RequestOutput, aclose_updates
from kvpool.server.engine_client import EngineClient
from kvpool.server.request_gate import GatedStream, Ticket

if TYPE_CHECKING:
    from kvpool.runtime.model import SamplingParams

__all__ = ["PromptStreams"]

log = logging.getLogger("kvpool.server")
_END = object()  # a pump's last item: its stream ended


class PromptStreams:
    """Owned by one handler; not shared."""

    def __init__(self, engine: EngineClient, ticket: Ticket, request_id: str,
                 prompts: Sequence[list[int]], params: SamplingParams, *, priority: int) -> None:
        self.engine = engine
        self.ticket = ticket  # the gate's admission of this request
        self.prompts = list(prompts)
        self.params = params
        self.priority = priority
        one = len(self.prompts) == 1
        self.ids = [request_id] if one else [f"{request_id}-{i}" for i in range(len(prompts))]
        self.streams: list[GatedStream] = []
        self.done = [False] * len(self.prompts)  # saw the prompt's finished update
        self._firsts: list[RequestOutput] = []
        self._queue: asyncio.Queue | None = None
        self._tasks: list[asyncio.Task] = []
        self._ended = 0

    async def start(self) -> None:
        for ids in self.prompts:
            self.engine.check_pool(ids, self.params)
        for i, (rid, ids) in enumerate(zip(self.ids, self.prompts)):
            self.streams.append(self.ticket.open(i, rid, ids, self.params,
                                                 priority=self.priority, checked=True))
        for i, s in enumerate(self.streams):
            first = await anext(s)
            self.done[i] = first.finished
            self._firsts.append(first)

    def firsts(self) -> list[tuple[int, RequestOutput]]:
        return list(enumerate(self._firsts))

    def __aiter__(self) -> PromptStreams:
        return self

    async def __anext__(self) -> tuple[int, RequestOutput]:
        if len(self.streams) == 1:
            return 0, await self._read(0)
        if self._queue is None:
            self._queue = asyncio.Queue()
            self._ended = sum(self.done)
            self._tasks = [asyncio.create_task(self._pump(i))
                           for i in range(len(self.streams)) if not self.done[i]]
        while self._ended < len(self.streams):
            i, item = await self._queue.get()
            if item is _END:
                self._ended += 1
                continue
            if isinstance(item, BaseException):
                raise item
            return i, item
        raise StopAsyncIteration

    async def _read(self, i: int) -> RequestOutput:
        if self.done[i]:
            raise StopAsyncIteration
        try:
            out = await anext(self.streams[i])
        except StopAsyncIteration:
            self.done[i] = True  # ended without finished=True: failure() reports an abort
            raise
        self.done[i] = out.finished
        return out

    async def _pump(self, i: int) -> None:
        queue = self._queue
        try:
            while True:
                queue.put_nowait((i, await self._read(i)))
        except StopAsyncIteration:
            pass
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - handed to the reader, which raises it
            queue.put_nowait((i, exc))
        queue.put_nowait((i, _END))

    async def release(self) -> None:
        """Stop the pumps, close the streams, abort every unfinished prompt."""
        for t in self._tasks:
            t.cancel()
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
        for i, s in enumerate(self.streams):
            try:
                await aclose_updates(s)
                if not self.done[i]:
                    await self.engine.abort(self.ids[i])
            except Exception:  # noqa: BLE001 - never mask the handler's own outcome
                log.exception("releasing request %s failed", self.ids[i])
        self.ticket.close()
