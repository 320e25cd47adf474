"""A client that sends its request's body and closes at once gets its request ended in the
router (proxy.py NOTE(cancel)), not relayed for nobody. The body read was bounded with
``asyncio.wait_for`` (json_body.py NOTE(slow-body)); on Python 3.11 wait_for returns the read
body when its task is cancelled in the step the read finished (CPython gh-86296), which is
where aiohttp's cancel for such a client lands (the body and the close come in one segment):
most of these requests were relayed anyway and held their replica's in-flight count, upstream
connection and generation until the replica answered (here: never). Fixed with
``asyncio.timeout`` (json_body.py NOTE(read-cancel)), which the replica's own reads share.

Real aiohttp servers on 127.0.0.1: a replica that never answers a completion, a router, and
raw-socket clients that send the head, then the body and close.
"""

from __future__ import annotations

import asyncio
import json

from aiohttp import web

from kvpool.router.proxy import Router
from kvpool.router.replicas import ReplicaSet
from tests.router.helpers import apps_served, served

CLIENTS = 20
SETTLE = 5.0  # seconds allowed for the router to end what it holds (a bound, not a measure)


def silent_replica(release: asyncio.Event) -> web.Application:
    async def health(_):
        return web.json_response({"status": "ok", "num_running": 0, "num_waiting": 0})

    async def complete(request):
        await request.read()
        await release.wait()  # never answers while the test runs
        return web.json_response({"id": "x"})

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_post("/v1/completions", complete)
    return app


async def send_and_close(port: int) -> None:
    body = json.dumps({"prompt": "x", "max_tokens": 1000}).encode()
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n\r\n").encode()
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(head)
    await writer.drain()
    await asyncio.sleep(0.05)  # the router's handler is reading the body now
    writer.write(body)
    writer.close()  # the body and the close in one go
    await writer.wait_closed()


async def test_a_client_gone_with_its_body_has_nothing_left_in_flight():
    release = asyncio.Event()
    async with apps_served(silent_replica(release)) as (rep,):
        r = Router(ReplicaSet([rep], interval=3600), policy="round_robin")
        try:
            async with served(r) as url:
                port = int(url.rsplit(":", 1)[1])
                for _ in range(CLIENTS):
                    await send_and_close(port)
                replica = r.replicas.replicas[0]
                loop = asyncio.get_running_loop()
                end = loop.time() + SETTLE
                while replica.in_flight and loop.time() < end:
                    await asyncio.sleep(0.02)
                assert replica.in_flight == 0, f"{replica.in_flight} of {CLIENTS} still relayed"
        finally:
            release.set()
