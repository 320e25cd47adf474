"""Peers that hold the picker's resources, on 127.0.0.1 against the real picker service: a peer
that floods PINGs and never reads is no longer read either (NOTE(backpressure) in
kvpool.epp.h2), while another connection's pick is answered; a connection that never sends
the HTTP/2 preface is closed (NOTE(preface-timeout))."""

from __future__ import annotations

import asyncio
import contextlib
import socket

import grpc
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc

from kvpool.epp.calls import ACK, PING, PREFACE, SETTINGS, frame
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
