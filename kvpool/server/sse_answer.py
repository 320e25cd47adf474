"""One generation request's answer as server-sent events: the role head, each update's
chunks as they come, the tail (usage, or the failure in-band) and ``[DONE]``; every write
bounded (connections.py ``bounded_write``, handlers.py NOTE(slow-reader)).

NOTE(keep-alive): vLLM's ``--sse-keep-alive-interval N`` sends the SSE comment
``: keep-alive`` whenever a streaming answer has been idle N seconds, queued, in prefill or
between tokens, so that a reverse proxy or tunnel with a read timeout (a load balancer's
idle timeout, a tunnel's 100 s) does not cut a long prefill. Every SSE parser skips a comment
line. 0, the default, sends none and changes nothing: the headers wait for every prompt's
first update, so an engine error or a full queue is still a proper status
(handlers.py ``answer``). With an interval, a first update later than the interval sends the
headers and a comment, and a failure after that is reported in-band, as one after the first
token always was. The comments go on every streamed route (vLLM sends them on chat and
completions only): a proxy's timeout does not care which route it cuts (docs/architecture.md
"Keep-alive comments").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any, TypeVar

from aiohttp import web

from kvpool.server.body_fields import ignored_header
from kvpool.server.chunk_view import SSE_HEADERS, ChunkView
from kvpool.server.connections import bounded_write
from kvpool.server.first_events import EventEncoder
from kvpool.server.first_updates import FirstUpdates
from kvpool.server.middleware import STREAM_STARTED, APIError, known_error

__all__ = ["IDLE", "KEEP_ALIVE", "SSEAnswer", "idle_marked"]

log = logging.getLogger("kvpool.server")
KEEP_ALIVE = b": keep-alive\n\n"  # vLLM's comment, byte for byte
IDLE = object()  # what idle_marked yields for an interval with no item
T = TypeVar("T")


async def idle_marked(source: AsyncIterator[T], interval: float) -> AsyncIterator[Any]:
    """``source``'s items, with IDLE for every ``interval`` seconds none came. One pending
    ``__anext__`` at a time, never cancelled while the loop runs: a timeout only stops
    waiting for it (NOTE(keep-alive))."""
    nxt = asyncio.ensure_future(anext(source))
    try:
        while True:
            done, _ = await asyncio.wait({nxt}, timeout=interval)
            if not done:
                yield IDLE
                continue
            try:
                item = nxt.result()
            except StopAsyncIteration:
                return
            yield item
            nxt = asyncio.ensure_future(anext(source))
    finally:
        nxt.cancel()
        with contextlib.suppress(BaseException):
            await nxt


class SSEAnswer:
    """How the server streams: each write bounded by ``write_timeout`` seconds; a keep-alive
    comment after ``keep_alive`` idle seconds (0: none); first updates folded by ``firsts``.
    Shared by every request."""

    def __init__(self, write_timeout: float, keep_alive: float, firsts: FirstUpdates) -> None:
        if not keep_alive >= 0:
            raise ValueError(f"sse keep-alive interval {keep_alive!r}: use seconds >= 0 "
                             "(0 sends no keep-alive comments)")
        self.write_timeout = write_timeout
        self.keep_alive = keep_alive
        self.firsts = firsts  # the server's: NOTE(format-off-loop) in first_updates.py
        self.first_events = EventEncoder()  # NOTE(echo-events) in first_events.py

    async def stream(self, request: web.Request, view: Any, updates: Any) -> web.StreamResponse:
        """Start ``updates`` (handlers.py PromptStreams) and stream ``view``'s events."""
        resp = web.StreamResponse(headers={**SSE_HEADERS,
                                           **ignored_header(view.builder.req.ignored)})
        updates.open()  # the pool's 400s and a full queue's 503 come before any byte
        failure = await self._firsts(request, resp, updates, view.builder.engine_id)
        if not resp.prepared:
            await self.prepare(request, resp)
        if failure is None:
            failure = await self._updates(request, resp, view, updates)
        await self.write(request, resp, view.tail(failure))
        await resp.write_eof()
        return resp

    async def write(self, request: web.Request, resp: web.StreamResponse, data: bytes) -> None:
        await bounded_write(request, resp, data, self.write_timeout)

    @staticmethod
    async def prepare(request: web.Request, resp: web.StreamResponse) -> None:
        """Send the headers: from here on the stream reports its failures itself."""
        await resp.prepare(request)
        request[STREAM_STARTED] = True  # NOTE(sse) in middleware.py: late errors in-band

    async def _firsts(self, request: web.Request, resp: web.StreamResponse, updates: Any,
                      name: str) -> APIError | None:
        """Every prompt's first update, with a comment each idle interval (NOTE(keep-alive));
        a failure once the headers are out, to be reported in-band (before, it is raised)."""
        if not self.keep_alive:
            await updates.firsts_awaited()
            return None
        task = asyncio.ensure_future(updates.firsts_awaited())
        try:
            while not (await asyncio.wait({task}, timeout=self.keep_alive))[0]:
                if not resp.prepared:
                    await self.prepare(request, resp)
                await self.write(request, resp, KEEP_ALIVE)
            task.result()
        except (ConnectionError, asyncio.CancelledError):
            raise
        except Exception as exc:  # noqa: BLE001 - headers out: the failure goes in-band
            if not resp.prepared:
                raise
            return _in_band(exc, name)
        finally:
            task.cancel()
        return None

    async def _updates(self, request: web.Request, resp: web.StreamResponse, view: Any,
                       updates: Any) -> APIError | None:
        """The head, the first updates and every later one as events; the failure, if any."""
        builder = view.builder
        head = view.head()  # before the first updates: its usage (if shown) counts none
        chunks = await self.firsts.fold(builder, updates)
        # completions' (ChunkView's) first chunks may carry a long echo's logprobs n times:
        # encoded in slices, once (NOTE(echo-events)); the other views' events are their own
        events = await self.first_events.events(chunks) if type(view) is ChunkView \
            else view.events(chunks)
        await self.write(request, resp, head + events)
        source = idle_marked(updates, self.keep_alive) if self.keep_alive else updates
        try:
            async for item in source:
                if item is IDLE:
                    await self.write(request, resp, KEEP_ALIVE)
                    continue
                chunks = builder.update(item[1], item[0])
                if chunks:
                    await self.write(request, resp, view.events(chunks))
            return builder.failure()
        except (ConnectionError, asyncio.CancelledError):
            raise
        except Exception as exc:  # noqa: BLE001 - headers are out: report in-band
            return _in_band(exc, builder.engine_id)
        finally:  # its pending read cancelled before the handler releases the streams
            if source is not updates:
                await source.aclose()


def _in_band(exc: Exception, name: str) -> APIError:
    """A failure after the headers: the server's own errors as they would have been
    answered, anything else a 500 generation_error (logged)."""
    known = known_error(exc)
    if known is not None:
        return known
    log.error("stream %s failed", name, exc_info=exc)
    return APIError(500, f"generation failed: {type(exc).__name__}", code="generation_error")
