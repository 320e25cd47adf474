"""UpstreamPool (kvpool/router/wire.py) reusing a kept-alive connection the replica closed:
NOTE(idle)'s poll before reuse, with a real aiohttp replica whose keep-alive is shorter than the
pool's (as vLLM's uvicorn, 5 s, is shorter than the router's), and NOTE(unsent)'s one fresh try
for a request the replica closed the connection under before all of it was sent."""

from __future__ import annotations

import asyncio
import contextlib
import select
import threading

import pytest
from aiohttp import web

from kvpool.router.wire import UpstreamLost
from tests.router.test_wire import LENGTH, post, scripted

BIG = 32 << 20  # a body no socket buffer holds whole: its write is not done at once


@contextlib.contextmanager
def replica_in_thread(keepalive: float):
    """A real aiohttp replica (answering ``post``'s GET) on its own loop in a thread, so that it closes
    idle connections while the test's loop is blocked; yields its URL and its request count."""
    loop = asyncio.new_event_loop()
    seen = []

    async def models(request: web.Request) -> web.Response:
        seen.append(request.path)
        return web.json_response({"object": "list", "data": []})

    async def start() -> web.AppRunner:
        app = web.Application()
        app.router.add_get("/v1/completions", models)
        runner = web.AppRunner(app, keepalive_timeout=keepalive)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        return runner

    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    runner = asyncio.run_coroutine_threadsafe(start(), loop).result(10)
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}", seen
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


async def test_a_connection_closed_by_a_shorter_replica_keepalive_is_not_reused():
    with replica_in_thread(keepalive=0.2) as (url, seen):
        async with scripted([]) as (_, pool, _unused):  # a pool keeping connections 10 s
            assert (await post(pool, url, b"", "GET"))[0] == 200
            (pooled,) = pool.idle.conns[url]
            # this loop blocked until the replica's close is in the pooled socket, unread:
            # the race of a request coming in as the replica's keep-alive ends
            poller = select.poll()
            poller.register(pooled.transport.get_extra_info("socket").fileno(), select.POLLIN)
            assert poller.poll(10_000), "the replica did not close its idle connection"
            status, _, body = await post(pool, url, b"", "GET")
            assert (status, body) == (200, b'{"object": "list", "data": []}')
            assert seen == ["/v1/completions"] * 2


class CutUnderWrite:
    """Answers its first connection's first request (kept alive), then closes (resets) that
    connection after reading a few bytes of the next; later connections are answered whole.
    ``whole``: the requests read whole."""

    def __init__(self) -> None:
        self.conns = 0
        self.whole = 0

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.conns += 1
        first = self.conns == 1
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            while True:
                if first and self.whole == 1:
                    await reader.read(16)  # the next request's first bytes only
                    writer.transport.abort()
                    return
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:"))
                await reader.readexactly(length)
                self.whole += 1
                writer.write(LENGTH)
        writer.close()


async def test_a_request_cut_under_its_write_on_a_reused_connection_is_sent_once_anew():
    server = CutUnderWrite()
    async with scripted([]) as (_, pool, _unused):
        listener = await asyncio.start_server(server.handle, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{listener.sockets[0].getsockname()[1]}"
        try:
            assert (await post(pool, url))[2] == b"hello"
            assert (await post(pool, url, b"x" * BIG))[2] == b"hello"
        finally:
            listener.close()
    assert (server.conns, server.whole) == (2, 2)  # the cut request ran on the fresh one only


async def test_a_reused_connection_closed_after_the_whole_request_is_not_sent_again():
    async with scripted([LENGTH, None, LENGTH]) as (script, pool, url):
        assert (await post(pool, url))[2] == b"hello"
        with pytest.raises(UpstreamLost):  # upstream.py NOTE(retry): it may have run there
            await post(pool, url)
        assert len(script.seen) == 2 and script.conns == 1

