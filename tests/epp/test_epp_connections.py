"""The picker's listening socket on 127.0.0.1 (kvpool/epp/listener.py): past the connection cap
a new connection is closed at once with one throttled WARNING while those open are served
(NOTE(connection-cap)), unless one without a call makes room (NOTE(make-room)); a stop, and
a connection error, close within ``close_timeout`` even when the peer never reads
(NOTE(close-timeout))."""

from __future__ import annotations

import asyncio
import logging
import socket

from kvpool.epp.calls import (CONTINUATION, DATA, END_HEADERS, END_STREAM, ENHANCE_YOUR_CALM,
                             GOAWAY, HEADERS, PING, PREFACE, SETTINGS, frame)
from kvpool.epp.listener import Server
from tests.epp.test_epp_buffers import read_frame, said, tally, until

HELLO = PREFACE + frame(SETTINGS, 0, 0)
# a call on stream 1 that sent one (empty) message and stays open: not silent, so neither cap
# takes it first (NOTE(first-message) in kvpool/epp/silence.py)
SPOKEN = frame(HEADERS, END_HEADERS, 1, b"\x88") + frame(DATA, 0, 1, bytes(5))


async def echo(call) -> None:
    while (raw := await call.messages.get()) is not None:
        await call.send([raw], False)


async def connect(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(HELLO)
    return reader, writer


async def test_past_the_connection_cap_new_connections_are_closed_at_once(caplog):
    """Cap 3: three connections, each with a call open (none makes room: NOTE(make-room)); five
    more get GOAWAY ENHANCE_YOUR_CALM, closed, one WARNING (clock still) saying 1, the stop's
    4 (NOTE(said-counts) in kvpool/throttle.py: never said before); the three answer a PING;
    once one leaves, a new connection is served. Before NOTE(connection-cap), no cap."""
    caplog.set_level(logging.WARNING, logger="kvpool.epp")
    server = Server(tally, 1 << 20, max_connections=3, clock=lambda: 0.0)
    port = await server.start("127.0.0.1", 0)
    held = [await connect(port) for _ in range(3)]
    try:
        for reader, writer in held:
            await until(reader, SETTINGS)  # each was admitted (the server spoke first)
            writer.write(SPOKEN)  # a call, left open
        await wait_for(lambda: server.open_streams == 3)
        for _ in range(5):
            reader, writer = await connect(port)
            _, body = await until(reader, GOAWAY)
            assert int.from_bytes(body[4:8], "big") == ENHANCE_YOUR_CALM
            assert await read_frame(reader) is None  # closed
            writer.close()
        assert len(server.connections) == 3 and server.refused == 5
        warned = [r for r in caplog.records if r.name == "kvpool.epp"]
        assert len(warned) == 1 and said(caplog, "connection cap") == [1], warned
        for reader, writer in held:
            writer.write(frame(PING, 0, 0, b"servedok"))
            assert (await until(reader, PING))[1] == b"servedok"
        held.pop()[1].close()
        for _ in range(100):  # bounded: 5 s for the server to see it leave
            if len(server.connections) < 3:
                break
            await asyncio.sleep(0.05)
        reader, writer = await connect(port)
        held.append((reader, writer))
        writer.write(frame(PING, 0, 0, b"admitted"))
        assert (await until(reader, PING))[1] == b"admitted"
    finally:
        for _, writer in held:
            writer.close()
        await server.stop(grace=0.5)
    assert said(caplog, "connection cap reached: 3 open (--max-connections 3)") == [1, 4]


async def wait_for(done, seconds: float = 5) -> None:
    """Poll ``done()`` every 50 ms for ``seconds`` at most; fails when it never held."""
    for _ in range(int(seconds / 0.05)):
        if done():
            return
        await asyncio.sleep(0.05)
    raise AssertionError("the server never reached the state waited for")


async def test_at_the_cap_the_connection_longest_without_a_call_makes_room():
    """Cap 2, idle timeout 60 s: one connection with a call open, one silent. A third is
    admitted (SETTINGS, no ENHANCE_YOUR_CALM) and the silent one gets GOAWAY NO_ERROR and is
    closed; the call on the busy one still completes. A fourth makes the third (now the one
    without a call) retire; with both slots holding calls a fifth is refused. Before
    NOTE(make-room) the third was refused for as long as the silent one stayed quiet."""
    server = Server(tally, 1 << 20, max_connections=2, idle_timeout=60, close_timeout=0.5)
    port = await server.start("127.0.0.1", 0)
    busy, silent = await connect(port), await connect(port)
    conns = [busy, silent]
    try:
        for reader, _ in conns:
            await until(reader, SETTINGS)
        busy[1].write(SPOKEN)
        await wait_for(lambda: server.open_streams == 1)
        third = await connect(port)
        conns.append(third)
        await until(third[0], SETTINGS)
        _, body = await until(silent[0], GOAWAY)
        assert body[:8] == bytes(4) + bytes(4)  # last stream 0, NO_ERROR
        assert await read_frame(silent[0]) is None  # closed after close_timeout
        conns.append(await connect(port))
        await until(conns[-1][0], SETTINGS)
        _, body = await until(third[0], GOAWAY)  # the third had no call: it made room
        conns[-1][1].write(SPOKEN)
        await wait_for(lambda: server.open_streams == 2)
        refused = await connect(port)
        conns.append(refused)
        _, body = await until(refused[0], GOAWAY)
        assert int.from_bytes(body[4:8], "big") == ENHANCE_YOUR_CALM
        busy[1].write(frame(DATA, END_STREAM, 1, b""))  # the busy call ends: answered "1"
        assert (await until(busy[0], DATA, 1))[1] == b"\x00\x00\x00\x00\x011"
        assert server.idle_closed == 2 and server.refused == 1
    finally:
        for _, writer in conns:
            writer.close()
        await server.stop(grace=0)


async def non_reader(port: int, server: Server) -> socket.socket:
    """A connection that floods PINGs and reads nothing until the server holds answers it
    cannot write (its transport's buffer); the caller closes the socket."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    await loop.sock_connect(sock, ("127.0.0.1", port))
    sock.send(HELLO)
    pings = frame(PING, 0, 0, b"12345678") * 4096
    for _ in range(1000):  # bounded: ~20 s
        if any(c.transport.get_write_buffer_size() for c in server.connections):
            return sock
        try:
            sock.send(pings)
        except BlockingIOError:
            await asyncio.sleep(0.02)
        await asyncio.sleep(0)
    sock.close()
    raise AssertionError("the server never held unwritten answers")


async def test_a_stop_closes_a_connection_that_never_reads_within_the_close_timeout():
    """The peer's answers fill every buffer and it never reads: stop() returns within grace +
    close_timeout (+1 s) and the connection is gone (aborted). Before NOTE(close-timeout) the
    connection stayed open after stop() returned, its close waiting on the peer for ever."""
    server = Server(tally, 1 << 20, close_timeout=0.5)
    port = await server.start("127.0.0.1", 0)
    sock = await non_reader(port, server)
    try:
        loop = asyncio.get_running_loop()
        began = loop.time()
        await asyncio.wait_for(server.stop(grace=0.2), 10)
        assert loop.time() - began < 0.2 + 0.5 + 1
        assert not server.connections
    finally:
        sock.close()
        await server.stop(grace=0)


async def test_a_connection_error_closes_within_the_close_timeout_when_the_peer_never_reads():
    """The server's socket buffer is shrunk to 4 KiB and a 40 KiB answer fills it and the
    peer's (which never reads), leaving the rest in the transport's buffer under the
    high-water mark, so the server still reads: a frame that is a connection error (a
    CONTINUATION with no header block open) is answered GOAWAY, and the connection is gone
    within close_timeout (+1 s) though the GOAWAY is never read."""
    server = Server(echo, 1 << 20, close_timeout=0.5)
    port = await server.start("127.0.0.1", 0)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.setblocking(False)
    loop = asyncio.get_running_loop()
    try:
        await loop.sock_connect(sock, ("127.0.0.1", port))
        await asyncio.sleep(0.1)
        (conn,) = server.connections
        conn.transport.get_extra_info("socket").setsockopt(
            socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
        answer = (40 << 10).to_bytes(5, "big") + bytes(40 << 10)
        await loop.sock_sendall(sock, HELLO + frame(HEADERS, END_HEADERS, 1, b"\x88") + b"".join(
            frame(DATA, 0, 1, answer[i:i + 16384]) for i in range(0, len(answer), 16384)))
        await asyncio.sleep(0.3)
        assert 0 < conn.transport.get_write_buffer_size() < 32 << 10
        # a CONTINUATION with no header block open: PROTOCOL_ERROR
        await loop.sock_sendall(sock, frame(CONTINUATION, END_HEADERS, 1))
        for _ in range(30):
            await asyncio.sleep(0.05)
        assert conn.transport.is_closing()
        await asyncio.sleep(0.5 + 0.5)
        assert not server.connections, "the close waited on a peer that never reads"
    finally:
        sock.close()
        await server.stop(grace=0)
