"""The picker's HTTP/2 transport (kvpool.epp.h2) against a real gRPC client (grpcio's C core),
on 127.0.0.1: framing, flow control, pings, cancellation, errors and a graceful stop. The
service behind it here echoes each message back (the picker's own service runs behind Envoy in
test_epp_envoy.py)."""

from __future__ import annotations

import asyncio
import contextlib

import grpc
import pytest

from kvpool.epp.calls import (ACK, GOAWAY, INTERNAL, PING, PREFACE, SETTINGS, WINDOW_UPDATE,
                             Stream, frame)
from kvpool.epp.listener import Server

METHOD = "/envoy.service.ext_proc.v3.ExternalProcessor/Process"


async def echo(call: Stream) -> None:
    """Each message back as it comes; b"boom" raises; b"wait" holds the call 0.5 s."""
    while (raw := await call.messages.get()) is not None:
        if raw == b"boom":
            raise RuntimeError("boom")
        if raw == b"wait":
            await asyncio.sleep(0.5)
        await call.send([raw], False)
    await call.send([], True)


@contextlib.asynccontextmanager
async def served(max_message: int = 8 << 20, options=()):
    server = Server(echo, max_message)
    port = await server.start("127.0.0.1", 0)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=[
        ("grpc.max_receive_message_length", 16 << 20), *options])
    try:
        yield server, channel.stream_stream(METHOD, request_serializer=bytes,
                                            response_deserializer=bytes)
    finally:
        await channel.close()
        await server.stop(grace=1)


async def no_stream_left(server: Server) -> None:
    """Every connection's streams are gone within 1 s (a cancelled call's included)."""
    for _ in range(100):
        if not any(c.streams for c in server.connections):
            break
        await asyncio.sleep(0.01)
    assert not any(c.streams for c in server.connections)


async def exchange(process, messages, **kw) -> list[bytes]:
    call = process(iter(messages), **kw)
    return [m async for m in call]


async def test_large_messages_cross_both_flow_control_windows():
    """Messages of MBs each way: the client's 64 KiB windows make the server wait for its
    WINDOW_UPDATEs; the server's own windows never stall the client (a call's window is one
    largest message, never reopened: NOTE(buffer-cap), so the three fit in 10 MiB)."""
    big = [bytes([i]) * (3 << 20) for i in range(3)]
    async with served(max_message=10 << 20,  # the client's windows stay as they are:
                      options=[("grpc.http2.bdp_probe", 0)]) as (_, process):
        assert await exchange(process, big) == big


async def test_concurrent_calls_on_one_connection_get_their_own_answers():
    async with served() as (_, process):
        outs = await asyncio.gather(*(exchange(process, [b"%d" % i, b"x" * i])
                                      for i in range(64)))
    assert outs == [[b"%d" % i, b"x" * i] for i in range(64)]


async def test_a_cancelled_call_leaves_the_connection_serving():
    async with served() as (server, process):
        call = process()
        await call.write(b"wait")
        await asyncio.sleep(0.1)
        call.cancel()  # RST_STREAM to the server while its handler sleeps
        assert await exchange(process, [b"after"]) == [b"after"]
        await no_stream_left(server)


async def test_a_call_reset_while_its_answer_waits_for_a_window():
    """The client reads nothing of a 3 MB answer (its 64 KiB window fills), then cancels: the
    server's sender stops, the stream goes, the connection serves the next call."""
    async with served(options=[("grpc.http2.bdp_probe", 0)]) as (server, process):
        call = process()
        await call.write(b"w" * (3 << 20))
        await asyncio.sleep(0.3)
        assert [c.streams for c in server.connections] != [{}]  # its sender is waiting
        call.cancel()
        assert await exchange(process, [b"after"]) == [b"after"]
        await no_stream_left(server)


async def test_a_failing_handler_is_an_internal_status_and_the_next_call_works():
    async with served() as (_, process):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await exchange(process, [b"boom"])
        assert err.value.code() == grpc.StatusCode.INTERNAL
        assert err.value.code().value[0] == INTERNAL
        assert await exchange(process, [b"ok"]) == [b"ok"]


async def test_a_compressed_or_oversized_message_ends_the_call():
    async with served(max_message=1000) as (_, process):
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await exchange(process, [b"y" * 2000])
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await exchange(process, [b"z" * 500], compression=grpc.Compression.Gzip)
        assert err.value.code() == grpc.StatusCode.UNIMPLEMENTED
        assert await exchange(process, [b"fine"]) == [b"fine"]


async def test_a_ping_is_answered_with_its_payload():
    """On the wire: the preface, a SETTINGS and a PING; the server's frames until its PING
    ACK, which carries the same 8 bytes."""
    server = Server(echo, 1 << 20)
    port = await server.start("127.0.0.1", 0)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(PREFACE + frame(SETTINGS, 0, 0) + frame(PING, 0, 0, b"kvpool:)"))
        seen = []
        while (kind := await read_frame(reader, seen)) != PING:
            assert kind in (SETTINGS, WINDOW_UPDATE), kind
        assert seen[-1] == (PING, ACK, b"kvpool:)")
        assert (SETTINGS, ACK, b"") in seen  # ours acknowledged too
    finally:
        writer.close()
        await server.stop(grace=1)


async def test_a_frame_over_the_size_limit_is_a_goaway_before_its_payload():
    """A DATA frame header claiming 1 MiB (past the default 16 KiB the server keeps): the
    server answers GOAWAY PROTOCOL_ERROR and closes, without waiting for the payload."""
    server = Server(echo, 1 << 20)
    port = await server.start("127.0.0.1", 0)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(PREFACE + frame(SETTINGS, 0, 0) + (1 << 20).to_bytes(3, "big")
                     + bytes([0, 0]) + (1).to_bytes(4, "big"))
        seen = []
        while await read_frame(reader, seen) != GOAWAY:
            pass
        assert int.from_bytes(seen[-1][2][4:8], "big") == 1  # PROTOCOL_ERROR
        assert await asyncio.wait_for(reader.read(), 5) == b""  # closed
    finally:
        writer.close()
        await server.stop(grace=1)


def _setting(key: int, value: int) -> bytes:
    return key.to_bytes(2, "big") + value.to_bytes(4, "big")


@pytest.mark.parametrize("frames, code", [
    (frame(SETTINGS, 0, 0, _setting(5, 0)), 1),  # SETTINGS_MAX_FRAME_SIZE 0: PROTOCOL_ERROR
    (frame(SETTINGS, 0, 0, _setting(5, 1 << 24)), 1),  # past 2**24-1
    (frame(SETTINGS, 0, 0, _setting(4, 1 << 31)), 3),  # INITIAL_WINDOW past 2**31-1: FLOW
    (frame(SETTINGS, 0, 0, b"\0\5\0\0\0"), 6),  # not a multiple of 6: FRAME_SIZE_ERROR
    (frame(WINDOW_UPDATE, 0, 0, bytes(4)), 1),  # a connection increment of 0
    (frame(WINDOW_UPDATE, 0, 0, ((1 << 31) - 1).to_bytes(4, "big")), 3)],  # window overflow
    ids=["max-frame-0", "max-frame-big", "window-big", "settings-size", "update-0",
         "update-overflow"])
async def test_settings_and_window_updates_out_of_range_are_connection_errors(frames, code):
    """h2.py NOTE(settings-range): what RFC 9113 6.5.2 / 6.9.1 rule out ends the connection
    with GOAWAY and its error code; before, a SETTINGS_MAX_FRAME_SIZE of 0 was taken and every
    answer on the connection waited forever."""
    server = Server(echo, 1 << 20)
    port = await server.start("127.0.0.1", 0)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(PREFACE + frame(SETTINGS, 0, 0) + frames)
        seen = []
        while await read_frame(reader, seen) != GOAWAY:
            pass
        assert int.from_bytes(seen[-1][2][4:8], "big") == code
        assert await asyncio.wait_for(reader.read(), 5) == b""  # closed
    finally:
        writer.close()
        await server.stop(grace=1)


async def read_frame(reader: asyncio.StreamReader, seen: list) -> int:
    head = await asyncio.wait_for(reader.readexactly(9), 5)
    size, kind, flags = int.from_bytes(head[:3], "big"), head[3], head[4]
    seen.append((kind, flags, await reader.readexactly(size)))
    return kind


async def test_a_graceful_stop_lets_a_call_in_flight_finish():
    server = Server(echo, 1 << 20)
    port = await server.start("127.0.0.1", 0)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        process = channel.stream_stream(METHOD, request_serializer=bytes,
                                        response_deserializer=bytes)
        call = asyncio.ensure_future(exchange(process, [b"wait", b"last"]))
        await asyncio.sleep(0.2)
        await server.stop(grace=5)
        assert await call == [b"wait", b"last"]
