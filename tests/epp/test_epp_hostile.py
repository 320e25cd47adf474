"""Hostile input at the picker's gRPC port, on 127.0.0.1: a bad frame ends only its own
connection (GOAWAY PROTOCOL_ERROR, then closed), a bad message only its own call, and the
picker keeps serving everyone else (grpcio's client, and the real picker service)."""

from __future__ import annotations

import asyncio
import logging

import grpc
import pytest
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb

from kvpool.epp.cli import picking
from kvpool.epp.calls import (CONTINUATION, DATA, END_HEADERS, GOAWAY, HEADERS, PREFACE,
                             SETTINGS, frame)
from kvpool.epp.listener import Server
from kvpool.epp.picker import Picker
from kvpool.router.proxy import Router
from kvpool.router.replicas import ReplicaSet
from tests.router.helpers import LOOKUP_TIMEOUT

METHOD = "/envoy.service.ext_proc.v3.ExternalProcessor/Process"
PROTOCOL_ERROR = 1


async def echo(call) -> None:
    while (raw := await call.messages.get()) is not None:
        await call.send([raw], False)
    await call.send([], True)


async def goaway_code(port: int, payload: bytes) -> int | None:
    """Send ``payload`` on a fresh connection; the GOAWAY's error code (None: closed without
    one), after checking the server closed the connection."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(payload)
        code = None
        while head := await asyncio.wait_for(reader.read(9), 5):
            if len(head) < 9:
                head += await reader.readexactly(9 - len(head))
            body = await reader.readexactly(int.from_bytes(head[:3], "big"))
            if head[3] == GOAWAY:
                code = int.from_bytes(body[4:8], "big")
        return code  # read() gave b"": the server closed the connection
    finally:
        writer.close()


async def test_bad_frames_end_their_connection_and_the_next_client_is_served():
    server = Server(echo, 1 << 20)
    port = await server.start("127.0.0.1", 0)
    hello = PREFACE + frame(SETTINGS, 0, 0)
    try:
        assert await goaway_code(port, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n" + bytes(20)) \
            == PROTOCOL_ERROR  # not HTTP/2
        # a CONTINUATION with no header block open, and one interleaved with another frame
        assert await goaway_code(port, hello + frame(CONTINUATION, END_HEADERS, 1)) \
            == PROTOCOL_ERROR
        assert await goaway_code(port, hello + frame(HEADERS, 0, 1, b"\x88")
                                 + frame(DATA, 0, 1, b"x")) == PROTOCOL_ERROR
        async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
            call = channel.stream_stream(METHOD, request_serializer=bytes,
                                         response_deserializer=bytes)
            assert [m async for m in call(iter([b"still here"]))] == [b"still here"]
    finally:
        await server.stop(grace=1)


async def test_data_for_a_stream_never_opened_is_dropped_and_the_connection_stays():
    """DATA on stream 7 before any HEADERS opened it: dropped, no call starts, and the
    connection stays open."""
    server = Server(echo, 1 << 20)
    port = await server.start("127.0.0.1", 0)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(PREFACE + frame(SETTINGS, 0, 0)
                     + frame(DATA, 0, 7, b"\x00\x00\x00\x00\x01z"))
        await asyncio.sleep(0.2)
        assert all(not c.streams for c in server.connections)
        assert len(server.connections) == 1  # still open
    finally:
        writer.close()
        await server.stop(grace=1)


async def test_a_message_that_is_no_processing_request_fails_only_its_call(caplog):
    """Garbage where a ProcessingRequest belongs, on 5 calls: each ends INVALID_ARGUMENT, the
    log holds one WARNING for them all and no traceback (NOTE(garbage)); the picker's next
    call (a body-less request: decided at once, 503 with no healthy replica) is answered."""
    caplog.set_level(logging.INFO, logger="kvpool.epp")
    picker = Picker(Router(ReplicaSet(["http://127.0.0.1:9"], interval=0.5),
                           lookup_timeout=LOOKUP_TIMEOUT))
    async with picking(picker, "127.0.0.1", 0) as port, grpc.aio.insecure_channel(
            f"127.0.0.1:{port}") as channel:
        raw = channel.stream_stream(METHOD, request_serializer=bytes,
                                    response_deserializer=bytes)
        for _ in range(5):
            with pytest.raises(grpc.aio.AioRpcError) as err:
                await asyncio.wait_for(_drain(raw(iter([b"\xff\xff\xff garbage"]))), 5)
            assert err.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        ok = channel.stream_stream(
            METHOD, request_serializer=pb.ProcessingRequest.SerializeToString,
            response_deserializer=pb.ProcessingResponse.FromString)
        headers = pb.ProcessingRequest(request_headers=pb.HttpHeaders(end_of_stream=True))
        answers = [m async for m in ok(iter([headers]))]
        assert answers[0].immediate_response.status.code == 503
    logged = [r for r in caplog.records if r.name == "kvpool.epp" and r.levelno >= logging.WARNING]
    assert len(logged) == 1 and "ProcessingRequest" in logged[0].getMessage(), logged
    assert not any(r.exc_info for r in caplog.records)


async def _drain(call) -> list[bytes]:
    return [m async for m in call]
