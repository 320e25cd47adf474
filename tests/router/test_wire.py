"""UpstreamPool (kvpool/router/wire.py) against a scripted HTTP/1.1 server on 127.0.0.1: body
framings, answers split into single bytes, keep-alive reuse, and every way a connection ends."""

from __future__ import annotations

import asyncio
import contextlib

import pytest

from kvpool.router.connect_errors import UpstreamDown
from kvpool.router.wire import UpstreamLost, UpstreamPool

CHUNKED = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
           b"Transfer-Encoding: chunked\r\n\r\n"
           b"7\r\ndata: a\r\n5;ext=1\r\n\n\ndat\r\n6\r\na: b\n\n\r\n0\r\nX-Trailer: t\r\n\r\n")
CHUNKED_BODY = b"data: a\n\ndata: b\n\n"
LENGTH = b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nX-Request-Id: r1\r\n\r\nhello"


class Script:
    """A server answering each request (a head plus its Content-Length body) with the next
    of ``answers``: bytes (written one byte at a time when ``trickle``), (bytes,) (then the
    connection is closed) or None (closed instead). ``seen``: the requests; ``conns``:
    connections made; ``closed``: set when a connection ended, by either side."""

    def __init__(self, answers: list[bytes | None], trickle: bool = False) -> None:
        self.answers, self.trickle = list(answers), trickle
        self.seen: list[bytes] = []
        self.conns = 0
        self.closed = asyncio.Event()  # a client closed a connection

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.conns += 1
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError,
                                 asyncio.CancelledError):  # (cancelled: the test ended)
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n")
                               if line.lower().startswith(b"content-length:")), 0)
                self.seen.append(head + await reader.readexactly(length))
                answer = self.answers.pop(0)
                if answer is None:
                    break
                last = isinstance(answer, tuple)
                answer = answer[0] if last else answer
                for i in range(len(answer)) if self.trickle else (None,):
                    writer.write(answer if i is None else answer[i:i + 1])
                    await asyncio.sleep(0)  # the client reads each write on its own
                if last:
                    break
        self.closed.set()
        writer.close()


@contextlib.asynccontextmanager
async def scripted(answers, trickle=False, keepalive=10.0):
    script = Script(answers, trickle)
    server = await asyncio.start_server(script.handle, "127.0.0.1", 0)
    pool = UpstreamPool(connect_timeout=2.0, keepalive=keepalive)
    try:
        yield script, pool, f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        pool.close()
        server.close()


async def post(pool, url, body=b"{}", method="POST"):
    up = await pool.request(url, method, "/v1/completions?x=1", [("X-Request-Id", "r1")], body)
    async with up:
        return up.status, up.headers, await up.read()


@pytest.mark.parametrize("trickle", [False, True])
async def test_chunked_and_length_bodies_whole_and_byte_by_byte_on_one_connection(trickle):
    async with scripted([CHUNKED, LENGTH], trickle) as (script, pool, url):
        status, headers, body = await post(pool, url)
        assert (status, body) == (200, CHUNKED_BODY)
        assert headers["Content-Type"] == "text/event-stream"
        status, headers, body = await post(pool, url)
        assert (status, body, headers["X-Request-Id"]) == (200, b"hello", "r1")
        assert script.conns == 1  # kept alive and reused
    assert script.seen[0] == (b"POST /v1/completions?x=1 HTTP/1.1\r\nHost: "
                              + url[7:].encode() + b"\r\nContent-Length: 2\r\n"
                              b"X-Request-Id: r1\r\n\r\n{}")


async def test_readany_passes_on_each_piece_as_it_arrives():
    async with scripted([CHUNKED], trickle=True) as (_, pool, url):
        up = await pool.request(url, "POST", "/", [], b"")
        async with up:
            pieces = []
            while piece := await up.readany():
                pieces.append(piece)
        assert b"".join(pieces) == CHUNKED_BODY and len(pieces) > 1


async def test_an_answer_without_length_is_read_to_the_close_and_not_reused():
    until_close = b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nall of it"
    async with scripted([(until_close,), LENGTH]) as (script, pool, url):
        assert (await post(pool, url))[2] == b"all of it"
        await asyncio.wait_for(script.closed.wait(), 5)
        assert (await post(pool, url))[2] == b"hello"
        assert script.conns == 2


async def test_head_and_204_have_no_body():
    no_content = b"HTTP/1.1 204 No Content\r\n\r\n"
    head = b"HTTP/1.1 200 OK\r\nContent-Length: 99\r\n\r\n"
    async with scripted([no_content, head, LENGTH]) as (script, pool, url):
        assert (await post(pool, url))[0::2] == (204, b"")
        assert (await post(pool, url, b"", "HEAD"))[0::2] == (200, b"")
        assert (await post(pool, url))[2] == b"hello"
        assert script.conns == 1
    assert b"Content-Length" not in script.seen[1]  # a HEAD without a body says no length


async def test_refused_connect_is_down():
    probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = probe.sockets[0].getsockname()[1]
    probe.close()
    await probe.wait_closed()
    with pytest.raises(UpstreamDown):
        await UpstreamPool(connect_timeout=2.0, keepalive=10.0).request(
            f"http://127.0.0.1:{port}", "GET", "/", [], b"")


async def test_a_close_before_the_head_or_midway_is_lost():
    cut = CHUNKED[:CHUNKED.index(b"5;ext")]
    async with scripted([None]) as (_, pool, url):
        with pytest.raises(UpstreamLost):
            await pool.request(url, "POST", "/", [], b"{}")
    async with scripted([(cut,)]) as (script, pool, url):
        up = await pool.request(url, "POST", "/", [], b"{}")
        with pytest.raises(UpstreamLost):
            async with up:
                assert await up.readany() == b"data: a"
                await up.readany()
        assert not pool.idle.conns.get(url)  # a broken connection is never pooled


async def test_a_connection_the_replica_closed_while_idle_is_not_reused():
    async with scripted([LENGTH, (LENGTH,), LENGTH]) as (script, pool, url):
        assert (await post(pool, url))[2] == b"hello"
        assert (await post(pool, url))[2] == b"hello"  # answered, then closed by the script
        await asyncio.wait_for(script.closed.wait(), 5)
        await asyncio.sleep(0.05)  # the close reaches the pooled connection
        assert (await post(pool, url))[2] == b"hello"
        assert script.conns == 2


async def test_an_idle_connection_is_closed_once_its_keepalive_passed():
    """idle_pool.py NOTE(sweep): with no further request to its replica (one removed from the
    router's set, say), a pooled connection is closed when it can no longer be reused; it was
    kept open for the router's life. The replica sees the close; nothing stays pooled."""
    async with scripted([LENGTH], keepalive=0.05) as (script, pool, url):
        assert (await post(pool, url))[2] == b"hello"
        assert pool.idle.conns.get(url)  # pooled for reuse first
        await asyncio.wait_for(script.closed.wait(), 5)
        assert not pool.idle.conns


async def test_a_cancel_while_waiting_closes_the_connection():
    async with scripted([b"HTTP/1.1 200 OK\r\n"]) as (script, pool, url):
        task = asyncio.ensure_future(pool.request(url, "POST", "/", [], b"{}"))
        while not script.seen:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.wait_for(script.closed.wait(), 5)  # the replica sees the close
        assert not pool.idle.conns.get(url)


@pytest.mark.parametrize("answer", [b"SSH-2.0-x\r\n\r\n",
                                    b"HTTP/1.1 200 OK\r\nbad line\r\n\r\n",
                                    b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
                                    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                                    b"zz\r\n"])
async def test_what_is_not_http_is_lost(answer):
    async with scripted([answer]) as (_, pool, url):
        with pytest.raises(UpstreamLost):
            await post(pool, url)


async def test_a_line_break_in_a_header_is_refused_before_sending():
    async with scripted([LENGTH]) as (script, pool, url):
        with pytest.raises(ValueError):
            await pool.request(url, "GET", "/", [("X-A", "1\r\nX-Injected: 1")], b"")
        assert script.conns == 0


async def test_interim_answers_trailers_and_304_as_llhttp_frames_them():
    interim = b"HTTP/1.1 100 Continue\r\nX-Interim: 1\r\n\r\n" + LENGTH
    not_modified = b"HTTP/1.1 304 Not Modified\r\nETag: \"e\"\r\n\r\n"
    async with scripted([interim, CHUNKED, not_modified, LENGTH]) as (script, pool, url):
        status, headers, body = await post(pool, url)
        assert (status, body, "X-Interim" in headers) == (200, b"hello", False)
        status, headers, body = await post(pool, url)
        assert body == CHUNKED_BODY and "X-Trailer" not in headers  # trailers dropped
        assert (await post(pool, url))[0::2] == (304, b"")
        assert (await post(pool, url))[2] == b"hello"
        assert script.conns == 1


async def test_no_length_on_http_1_1_reads_to_the_close():
    async with scripted([(b"HTTP/1.1 200 OK\r\nX-A: 1 \r\n\r\nto the end",), LENGTH]) \
            as (script, pool, url):
        status, headers, body = await post(pool, url)
        assert (status, headers["X-A"], body) == (200, "1", b"to the end")
        assert (await post(pool, url))[2] == b"hello"
        assert script.conns == 2


async def test_a_close_before_the_length_is_read_is_lost():
    async with scripted([(LENGTH[:-2],)]) as (_, pool, url):
        with pytest.raises(UpstreamLost):
            await post(pool, url)
        assert not pool.idle.conns.get(url)


async def test_bytes_after_a_whole_answer_keep_the_connection_out_of_the_pool():
    async with scripted([LENGTH + b"HTTP/1.1 200 OK\r\n", LENGTH]) as (script, pool, url):
        assert (await post(pool, url))[2] == b"hello"
        assert (await post(pool, url))[2] == b"hello"
        assert script.conns == 2


async def test_a_large_body_is_read_whole_through_paused_reads():
    big = bytes(range(256)) * 4096  # 1 MiB: above HIGH_WATER
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(big) + big
    async with scripted([answer, LENGTH]) as (script, pool, url):
        up = await pool.request(url, "GET", "/", [], b"")
        async with up:
            await asyncio.sleep(0.1)  # let the socket fill past HIGH_WATER before reading
            assert await up.read() == big
        assert (await post(pool, url))[2] == b"hello"
        assert script.conns == 1


@pytest.mark.parametrize("answer", [b"HTTP/2.0 200 OK\r\nContent-Length: 0\r\n\r\n",
                                    b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: x\r\n"
                                    b"Connection: upgrade\r\n\r\n",
                                    b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 70000 + b"\r\n\r\n",
                                    b"HTTP/1.1 200 OK\r\nX-Big: " + b"a" * 70000],
                         ids=["http2", "upgrade", "big-head", "big-head-unended"])
async def test_another_version_an_upgrade_or_an_oversized_head_is_lost(answer):
    async with scripted([answer]) as (_, pool, url):
        with pytest.raises(UpstreamLost):
            await post(pool, url)
