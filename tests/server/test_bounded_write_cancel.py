"""A stream handler cancelled as its write completes stays cancelled (connections.py
NOTE(write-cancel)). ``bounded_write`` was ``asyncio.wait_for(resp.write(data), timeout)``; on
Python 3.11 wait_for returns the inner result when its own task is cancelled in the step the
inner write finished (CPython gh-86296), so aiohttp's handler cancellation for a client gone
just then was lost: the router went on reading the replica for nobody, its in-flight count
and upstream connection held (the replica's request not aborted) until the replica's next
event, and the replica's own SSE handler the same until its next token. Seen with real
processes: ``kvpool router`` (uvloop), a replica sending one event then pausing, a client
reading that event and closing: 2 to 9 of 30 such requests stayed in flight.

A real aiohttp server on 127.0.0.1; the client's going away is the handler's cancel, made in
the very step the write completes (a StreamResponse whose write cancels its handler after
the bytes went out), which is the race's timing without relying on the scheduler.
"""

from __future__ import annotations

import asyncio
import contextlib

import aiohttp
from aiohttp import web

from kvpool.server.connections import bounded_write
from tests.router.helpers import apps_served


class GoneAsWritten(web.StreamResponse):
    """A stream whose client goes away just as a write completes: aiohttp cancels the
    handler then (handler_cancellation)."""

    handler: asyncio.Task | None = None

    async def write(self, data: bytes) -> None:
        await super().write(data)
        assert self.handler is not None
        self.handler.cancel()


async def test_a_cancel_that_lands_as_a_write_completes_is_not_lost():
    outcome: list[str] = []

    async def stream(request: web.Request) -> web.StreamResponse:
        resp = GoneAsWritten(headers={"Content-Type": "text/event-stream"})
        resp.handler = asyncio.current_task()
        await resp.prepare(request)
        try:
            await bounded_write(request, resp, b"data: 1\n\n", 30.0)
            await asyncio.sleep(0)  # the handler's next wait: where a kept cancel lands
            outcome.append("went on")  # the replica read on for a client that is gone
        except asyncio.CancelledError:
            outcome.append("cancelled")
            raise
        return resp

    app = web.Application()
    app.router.add_get("/stream", stream)
    async with apps_served(app) as (url,), aiohttp.ClientSession() as s:
        async with s.get(url + "/stream") as r:
            with contextlib.suppress(aiohttp.ClientPayloadError):  # cut short once cancelled
                await r.read()
    assert outcome == ["cancelled"]
