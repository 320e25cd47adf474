"""Issue 12 follow-up: ``--socket-send-buffer BYTES`` sets SO_SNDBUF on every accepted socket
(connections.py, NOTE(sndbuf)). With the OS's autotuning a loopback client that never reads
can pin megabytes of kernel memory and swallow a whole stream, so the stream write timeout is
never met; with a small buffer the server's writes block and the timeout closes the stream."""

from __future__ import annotations

import asyncio
import socket
import sys

import aiohttp
import pytest
from aiohttp import web

from kvpool.server import serve
from kvpool.server.connections import ConnectionLimiter, start_listener
from tests.server.serve_process import subprocess_server
from tests.server.non_reader import MAX_TOKENS, N, open_non_reader, read_to_end


async def _accepted_sndbuf(send_buffer: int | None) -> int:
    """SO_SNDBUF of the server side of one accepted connection, as its handler reads it."""

    async def handler(request: web.Request) -> web.Response:
        sock = request.transport.get_extra_info("socket")
        return web.json_response(sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF))

    app = web.Application()
    app.router.add_get("/", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    listener = await start_listener(runner, "127.0.0.1", 0, limiter=ConnectionLimiter(8),
                                    send_buffer=send_buffer)
    try:
        port = listener.sockets[0].getsockname()[1]
        async with aiohttp.ClientSession() as s, s.get(f"http://127.0.0.1:{port}/") as r:
            return int(await r.json())
    finally:
        listener.close()
        await runner.cleanup()


async def test_send_buffer_is_set_on_accepted_sockets():
    size = 65536
    got = await _accepted_sndbuf(size)
    assert got == (2 * size if sys.platform == "linux" else size)  # Linux doubles it
    assert await _accepted_sndbuf(None) != got  # the OS's default otherwise


async def test_send_buffer_below_a_page_is_refused():
    with pytest.raises(ValueError, match="send_buffer"):
        await _accepted_sndbuf(100)
    assert serve.main(["--socket-send-buffer", "100"]) == 2


async def test_a_small_send_buffer_lets_the_write_timeout_close_a_non_reader():
    """A real `kvpool serve` process: the stream (~4 x 400 SSE chunks) no longer fits the
    buffers, the server's write waits, and --stream-write-timeout closes it (no [DONE])."""
    async with subprocess_server("--socket-send-buffer", "16384", "--stream-write-timeout",
                                 "0.5", blocks=150) as (proc, url, lines):
        port = int(url.rsplit(":", 1)[1])
        sock = await asyncio.to_thread(open_non_reader, port)
        try:
            # its WARNING line says the server gave up; reading earlier would unblock it
            line = await asyncio.wait_for(proc.stdout.readline(), timeout=60)
            assert b"stopped reading" in line, line
            data = await asyncio.to_thread(read_to_end, sock)
        finally:
            sock.close()
        assert data.startswith(b"HTTP/1.1 200") and b"data: [DONE]" not in data
        assert data.count(b"data: {") < N * MAX_TOKENS
