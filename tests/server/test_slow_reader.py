"""Issue 12 item 4: a client that opens a stream and never reads must not hold a --max-queue
slot once the engine is done with its request, and its connection is closed after
--stream-write-timeout. The client is a raw socket with a small receive buffer, so the server's
socket buffers really fill and its SSE writes really block."""

from __future__ import annotations

import asyncio
import logging
import socket

import aiohttp
from aiohttp.test_utils import get_port_socket

from tests.server.helpers import parse_metrics, wait_until
from tests.server.non_reader import MAX_TOKENS, N, open_non_reader, read_to_end

SLOW = dict(max_queue=1, max_model_len=512, max_tokens_limit=512, num_device_blocks=150)


def _small_send_buffer(host: str, port: int, family: socket.AddressFamily) -> socket.socket:
    sock = get_port_socket(host, port, family)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 16384)  # accepted sockets inherit it
    return sock


SMALL_BUFFERS = {"socket_factory": _small_send_buffer}


async def _metrics(url: str) -> dict:
    async with aiohttp.ClientSession() as s, s.get(url + "/metrics") as r:
        return parse_metrics(await r.text())


async def _generation_done(srv, tokens: int) -> bool:
    """The engine generated ``tokens`` and has nothing left to run."""
    for _ in range(3000):
        m = await _metrics(srv.url)
        if m["kvpool_generation_tokens_total"][()] >= tokens and not srv.engine.core.has_work():
            return True
        await asyncio.sleep(0.02)
    return False


async def test_finished_request_frees_its_queue_slot_while_the_client_is_not_reading(
        make_server):
    async with make_server(**SLOW, server_options=SMALL_BUFFERS) as srv:  # stream write timeout: the 30 s default
        port = int(srv.url.rsplit(":", 1)[1])
        sock = await asyncio.to_thread(open_non_reader, port)
        try:
            assert await _generation_done(srv, N * MAX_TOKENS)
            m = await _metrics(srv.url)
            assert m["kvpool_requests_in_flight"][()] == 0
            async with aiohttp.ClientSession() as s:
                async with s.post(srv.v1 + "/completions",
                                  json={"prompt": "hi", "max_tokens": 2}) as r:
                    assert r.status == 200, await r.text()  # was 503: slot held by the reader
                    assert (await r.json())["usage"]["completion_tokens"] == 2
        finally:
            sock.close()


async def test_stream_write_timeout_closes_a_client_that_never_reads(make_server, caplog):
    caplog.set_level(logging.WARNING, logger="kvpool.server")
    async with make_server(**SLOW, server_options=SMALL_BUFFERS,
                           app_options={"stream_write_timeout": 0.5}) as srv:
        port = int(srv.url.rsplit(":", 1)[1])
        sock = await asyncio.to_thread(open_non_reader, port)
        try:
            # reading before the server gives up would unblock its writes: wait for its word
            assert await wait_until(lambda: any("stopped reading" in r.getMessage()
                                                for r in caplog.records), timeout=60)
            data = await asyncio.to_thread(read_to_end, sock)
        finally:
            sock.close()
        assert b"data: [DONE]" not in data  # the server closed the stream, it did not end it
        assert not [r for r in caplog.records if r.exc_info]  # one line, no traceback
        assert await wait_until(lambda: srv.engine.requests_in_flight() == 0)
        async with aiohttp.ClientSession() as s:
            async with s.post(srv.v1 + "/completions",
                              json={"prompt": "hi", "max_tokens": 2}) as r:
                assert r.status == 200
