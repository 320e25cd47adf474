"""Peers that hold the picker's resources, on 127.0.0.1 against the real picker service: a peer
that floods PINGs and never reads is no longer read either (NOTE(backpressure) in
kvpool.epp.h2), while another connection's pick is answered; a connection that never sends
the HTTP/2 preface is closed (NOTE(preface-timeout)); peers that fill their buffer cap or send
past it (NOTE(buffer-cap)) neither slow nor fail another connection's picks."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket

import grpc
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc

from kvpool.epp.calls import (ACK, DATA, DEFAULT_WINDOW, END_HEADERS, ENHANCE_YOUR_CALM, GOAWAY,
                             HEADERS, PING, PREFACE, SETTINGS, frame)
from kvpool.epp.listener import Server
from kvpool.epp.picker import Picker
from kvpool.epp.service import EndpointPicker
from kvpool.router.proxy import Router
from kvpool.router.replicas import ReplicaSet
from tests.router.helpers import LOOKUP_TIMEOUT

FLOOD = 48 << 20  # bytes of PING frames offered: several times what the kernel buffers hold


@contextlib.asynccontextmanager
async def served(**kw):
    """The picker service (its one replica never healthy: every decision a 503) on its
    transport; yields (server, port)."""
    picker = Picker(Router(ReplicaSet(["http://127.0.0.1:9"], interval=0.5),
                           lookup_timeout=LOOKUP_TIMEOUT))
    await picker.start()
    server = Server(EndpointPicker(picker).process, 1 << 20, **kw)
    try:
        yield server, await server.start("127.0.0.1", 0)
    finally:
        await server.stop(grace=1)
        await picker.close()


async def pick(port: int) -> int:
    """A body-less request's decision over grpcio, on a connection of its own: its status."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = pb_grpc.ExternalProcessorStub(channel).Process(iter([pb.ProcessingRequest(
            request_headers=pb.HttpHeaders(end_of_stream=True))]))
        answers = await asyncio.wait_for(_drain(call), 20)
    return answers[0].immediate_response.status.code


async def _drain(call) -> list:
    return [m async for m in call]


def queued(server: Server) -> int:
    """The most bytes any connection has waiting in its transport's write buffer."""
    return max((c.transport.get_write_buffer_size() for c in server.connections
                if c.transport is not None), default=0)


async def flood(sock: socket.socket, server: Server, stall: float) -> tuple[int, int]:
    """PINGs on non-blocking ``sock`` until FLOOD bytes went out or none could for ``stall``
    seconds; (bytes sent, the most the server had queued meanwhile)."""
    loop = asyncio.get_running_loop()
    chunk = memoryview(frame(PING, 0, 0, b"12345678") * 4096)  # 68 KiB
    sent = most = 0
    last = loop.time()
    while sent < FLOOD and loop.time() - last < stall:
        most = max(most, queued(server))
        try:
            at = sent % len(chunk)  # a partial send goes on mid-chunk, on a frame or not
            n = sock.send(chunk[at:at + FLOOD - sent])
        except BlockingIOError:
            await asyncio.sleep(0.02)
            continue
        sent, last = sent + n, loop.time()
        await asyncio.sleep(0)  # the server's turn: it shares this loop
    return sent, max(most, queued(server))


async def test_a_ping_flood_that_never_reads_is_not_read_and_others_are_served():
    """The flooder's receive buffer is tiny and never read: every PING's ACK stays with the
    server. Its write buffer stays near asyncio's high-water mark (64 KiB) plus one read's
    answers, the flooder cannot push all it offers, and a pick on another connection is
    answered meanwhile. Without NOTE(backpressure) every ACK was queued (tens of MiB here)."""
    async with served() as (server, port):
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 65536)
        sock.setblocking(False)
        try:
            await asyncio.get_running_loop().sock_connect(sock, ("127.0.0.1", port))
            sock.send(PREFACE + frame(SETTINGS, 0, 0))
            sent, most = await flood(sock, server, stall=3)
            assert most < 2 << 20, f"{most} bytes queued for a peer that does not read"
            assert sent < FLOOD, "every byte of the flood was read"
            assert await pick(port) == 503
        finally:
            sock.close()


async def closed_by_server(reader: asyncio.StreamReader) -> bool:
    """Read (the server's SETTINGS, then nothing) until the server ends the connection; True
    when it did within 10 s."""
    try:
        while await asyncio.wait_for(reader.read(1 << 16), 10):
            pass
    except ConnectionResetError:
        pass
    except asyncio.TimeoutError:
        return False
    return True


async def test_a_connection_without_the_preface_is_closed_and_one_with_it_stays():
    """A silent connection and one that sent half the preface are closed past the bound
    (0.5 s here); one that sent the preface is still served after twice that."""
    async with served(preface_timeout=0.5) as (_, port):
        silent = await asyncio.open_connection("127.0.0.1", port)
        half = await asyncio.open_connection("127.0.0.1", port)
        good = await asyncio.open_connection("127.0.0.1", port)
        try:
            half[1].write(PREFACE[:10])
            good[1].write(PREFACE + frame(SETTINGS, 0, 0))
            assert await closed_by_server(silent[0]), "a silent connection stayed open"
            assert await closed_by_server(half[0]), "half a preface kept it open"
            await asyncio.sleep(1)
            good[1].write(frame(PING, 0, 0, b"stillopn"))
            assert await asyncio.wait_for(pong(good[0]), 10) == b"stillopn"
            assert await pick(port) == 503
        finally:
            for _, writer in (silent, half, good):
                writer.close()


async def pong(reader: asyncio.StreamReader) -> bytes:
    """The payload of the first PING ACK the server sends."""
    while True:
        head = await reader.readexactly(9)
        body = await reader.readexactly(int.from_bytes(head[:3], "big"))
        if head[3] == PING and head[4] & ACK:
            return body


CAP = 4 << 20  # the hostile test's max_connection_bytes (the service's max_message: 1 MiB)


async def hold_the_cap(port: int, streams: int = 200) -> asyncio.StreamWriter:
    """A connection that keeps to its windows: on ``streams`` streams a 1 MiB message is
    announced and its body dribbled in 4 KiB frames until the connection's window (CAP) is
    used up; then it sends nothing more (the caller closes it)."""
    _, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(PREFACE + frame(SETTINGS, 0, 0) + b"".join(
        frame(HEADERS, END_HEADERS, 2 * i + 1, b"\x88")
        + frame(DATA, 0, 2 * i + 1, (1 << 20).to_bytes(5, "big")) for i in range(streams)))
    left = CAP - 5 * streams
    while left:
        for i in range(streams):
            n = min(4096, left)
            writer.write(frame(DATA, 0, 2 * i + 1, bytes(n)))
            left -= n
            if not left:
                break
        await writer.drain()
    return writer


async def past_the_cap(port: int, stop: asyncio.Event) -> int:
    """Connections that ignore their windows (a 1 MiB message announced on each of 100
    streams, 64 KiB of it each), one after another until ``stop``: how many the server cut
    short (GOAWAY ENHANCE_YOUR_CALM, a reset: it closed with the flood unread, or the oldest
    calls ended RESOURCE_EXHAUSTED as the window filled: NOTE(window-room))."""
    ended = 0
    flood = b"".join(frame(HEADERS, END_HEADERS, 2 * i + 1, b"\x88")
                     + frame(DATA, 0, 2 * i + 1, (1 << 20).to_bytes(5, "big"))
                     + frame(DATA, 0, 2 * i + 1, bytes(16384)) * 4 for i in range(100))
    while not stop.is_set():
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        try:
            writer.write(PREFACE + frame(SETTINGS, 0, 0) + flood)
            ended += await cut_short(reader)
        except ConnectionError:
            ended += 1
        finally:
            writer.close()
    return ended


async def cut_short(reader: asyncio.StreamReader) -> bool:
    """Whether the server ends the connection (GOAWAY ENHANCE_YOUR_CALM) or a call of it
    (trailers with grpc-status 8, RESOURCE_EXHAUSTED) before it closes or 5 s pass unread."""
    with contextlib.suppress(asyncio.IncompleteReadError):
        while head := await asyncio.wait_for(reader.readexactly(9), 5):
            body = await reader.readexactly(int.from_bytes(head[:3], "big"))
            if head[3] == GOAWAY and int.from_bytes(body[4:8], "big") == ENHANCE_YOUR_CALM \
                    or head[3] == HEADERS and b"grpc-status\x018" in body:
                return True
    return False


async def goaway_code(reader: asyncio.StreamReader) -> int | None:
    """The code of the GOAWAY among the server's frames until it closed (None: none came)."""
    code = None
    with contextlib.suppress(asyncio.IncompleteReadError):
        while head := await asyncio.wait_for(reader.readexactly(9), 5):
            body = await reader.readexactly(int.from_bytes(head[:3], "big"))
            code = int.from_bytes(body[4:8], "big") if head[3] == GOAWAY else code
    return code


async def test_peers_at_and_past_their_buffer_cap_do_not_slow_other_picks():
    """One connection holds its whole cap in partial messages on 200 streams, others send past
    theirs again and again: meanwhile 20 picks, each on a connection of its own, are each
    answered within 1 s; the holder's bytes are within its cap by the server's count, less the
    room kept for other calls (NOTE(window-room) in kvpool/epp/room.py)."""
    async with served(max_connection_bytes=CAP) as (server, port):
        holder = await hold_the_cap(port)
        stop = asyncio.Event()
        flooding = asyncio.ensure_future(past_the_cap(port, stop))
        try:
            loop = asyncio.get_running_loop()
            for _ in range(20):
                began = loop.time()
                assert await asyncio.wait_for(pick(port), 5) == 503
                assert loop.time() - began < 1.0
                assert server.buffered <= CAP * len(server.connections)
            # the holder, full but for the room its oldest calls' ends keep (NOTE(window-room))
            assert CAP - 2 * DEFAULT_WINDOW < max(c.buffered for c in server.connections) \
                <= CAP - DEFAULT_WINDOW
        finally:
            stop.set()
            ended = await asyncio.wait_for(flooding, 20)
            holder.close()
        assert ended >= 1


PART = 512 << 10  # what one stream of ``holding`` keeps: part of an announced 1 MiB message


async def holding(port: int, streams: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection that keeps to its windows and leaves PART bytes on each of ``streams``
    streams: an empty first message (so no call is silent: NOTE(first-message) in
    kvpool/epp/silence.py), then part of an announced 1 MiB one (the caller closes it)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    body = bytes(5) + (1 << 20).to_bytes(5, "big") + bytes(PART - 10)
    out = [PREFACE + frame(SETTINGS, 0, 0)]
    for sid in range(1, 2 * streams, 2):
        out.append(frame(HEADERS, END_HEADERS, sid, b"\x88"))
        out += [frame(DATA, 0, sid, body[i:i + 16384]) for i in range(0, PART, 16384)]
    writer.write(b"".join(out))
    await writer.drain()
    return reader, writer


async def holds(server: Server, total: int) -> None:
    """Wait (10 s at most) until the server's own count of held bytes is ``total``."""
    for _ in range(200):
        if server.buffered == total:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"the server holds {server.buffered} bytes, not {total}")


async def test_connections_within_their_windows_but_over_the_budget_cut_the_largest(caplog):
    """Budget 6 MiB, each connection's window 4 MiB: A holds 3 MiB, B 2 MiB, then C sends
    1.5 MiB, each within its windows. The frame of C's that would pass the budget cuts A, the
    largest holder (GOAWAY ENHANCE_YOUR_CALM, closed, one WARNING); C's bytes are all taken, B
    and C still answer PINGs and a pick on another connection is answered. Without
    NOTE(held-budget) the sum was not bounded: A was never cut (its read timed out)."""
    caplog.set_level(logging.WARNING, logger="kvpool.epp")
    async with served(max_connection_bytes=CAP, max_held_bytes=6 << 20) as (server, port):
        a = await holding(port, 6)
        await holds(server, 3 << 20)
        b = await holding(port, 4)
        await holds(server, 5 << 20)
        c = await holding(port, 3)
        try:
            assert await goaway_code(a[0]) == ENHANCE_YOUR_CALM
            await holds(server, (2 << 20) + 3 * PART)
            assert server.cut == 1
            for reader, writer in (b, c):
                writer.write(frame(PING, 0, 0, b"stillok!"))
                assert await asyncio.wait_for(pong(reader), 5) == b"stillok!"
            assert await pick(port) == 503
        finally:
            for _, writer in (a, b, c):
                writer.close()
    warned = [r.getMessage() for r in caplog.records if "budget" in r.getMessage()]
    assert len(warned) == 1 and "--max-held-bytes 6291456" in warned[0], warned
