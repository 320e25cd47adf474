"""A streaming client that stops reading, through the router: each SSE write the router makes
to it is bounded (Router.stream_write_timeout, the replica's own default), then its connection
is dropped and the upstream connection closed, so the replica's request ends too. Before, the
router's write waited for ever: the replica streamed to the router's buffers until it
finished, the client's connection stayed open.

The replica is a real aiohttp server on 127.0.0.1 streaming 64 KiB events until its client
goes; the client a raw socket with a small receive buffer that never reads."""

from __future__ import annotations

import asyncio
import socket

from aiohttp import web

from stress.http.edge import open_raw
from tests.router.helpers import router
from tests.router.test_router_hostile_replica import GOOD, OK_HEALTH

EVENT = b"data: " + b"x" * 65536 + b"\n\n"
BOUND = 30.0  # seconds the replica's stream may outlive the write timeout: generous


async def streaming_replica(ended: asyncio.Event):
    async def health(_):
        return web.Response(body=OK_HEALTH, content_type="application/json")

    async def lookup(_):
        return web.json_response(GOOD)

    async def stream(request):
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        try:
            for _ in range(20000):  # ~1.3 GB: far more than any buffer between us
                await resp.write(EVENT)
        finally:
            ended.set()
        return resp

    app = web.Application(handler_args={"handler_cancellation": True})
    app.router.add_get("/health", health)
    app.router.add_post("/v1/kvpool/lookup", lookup)
    app.router.add_post("/v1/completions", stream)
    runner = web.AppRunner(app, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


async def test_a_client_that_stops_reading_a_stream_is_dropped_and_the_replica_freed():
    ended = asyncio.Event()
    runner, url = await streaming_replica(ended)
    try:
        async with router([url], interval=0.2) as (r, rurl):
            r.stream_write_timeout = 1.0
            for _ in range(100):
                if r.replicas.healthy():
                    break
                await asyncio.sleep(0.05)
            reader, writer = await open_raw(rurl)
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            body = b'{"prompt": "hi", "stream": true}'
            writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: "
                         b"application/json\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
            try:
                await asyncio.wait_for(ended.wait(), BOUND)  # never read a byte
            finally:
                writer.close()
    finally:
        await runner.cleanup()
