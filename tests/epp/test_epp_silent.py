"""Calls that never send their first message (NOTE(first-message) in kvpool/epp/silence.py), on
127.0.0.1 with raw HTTP/2 peers and grpcio clients: one silent past --first-message-timeout is
ended DEADLINE_EXCEEDED, counted and logged once while a call that spoke goes on; connections
whose calls are all silent make room at --max-connections (NOTE(make-room)) and are cut first
at --max-open-streams (NOTE(stream-cap)), so a client holding silent calls cannot lock a
picker's real client out. The flag is checked as the other transport flags are."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math

import aiohttp
import grpc
import pytest

from kvpool.epp.calls import (DATA, DEADLINE_EXCEEDED, END_HEADERS, END_STREAM,
                             ENHANCE_YOUR_CALM, GOAWAY, HEADERS, PING, RST_STREAM, frame)
from kvpool.epp.cli import limits, main, picking
from kvpool.epp.listener import FIRST_MESSAGE_TIMEOUT, Server
from kvpool.epp.metrics import MetricsPort
from kvpool.epp.picker import Picker
from kvpool.router.proxy import Router
from kvpool.router.replicas import ReplicaSet
from tests.epp.test_epp_buffers import read_frame, said, tally, until
from tests.epp.test_epp_connections import connect
from tests.epp.test_epp_idle import served_within
from tests.epp.test_epp_limits import served
from tests.epp.test_epp_streams import FIRST, open_calls, opened
from tests.router.helpers import LOOKUP_TIMEOUT
from tests.server.helpers import parse_metrics



def silent(sid: int) -> bytes:
    """A call on ``sid`` that never sends a message (HEADERS only)."""
    return frame(HEADERS, END_HEADERS, sid, b"\x88")


def spoken(sid: int) -> bytes:
    """A call on ``sid`` that sends one (empty) message and stays open."""
    return silent(sid) + frame(DATA, 0, sid, bytes(5))


async def test_a_call_silent_past_the_bound_is_ended_and_one_that_spoke_goes_on(caplog):
    """--first-message-timeout 0.3 s: on one connection call 1 sends nothing after its HEADERS,
    call 3 sends one message, then call 5 nothing. Calls 1 and 5 are ended with grpc-status
    DEADLINE_EXCEEDED, counted, one WARNING (the server's clock stands still) and the stop's
    for call 5 (NOTE(said-counts) in kvpool/throttle.py); call 3 is still open after 1 s (a
    PING answered, nothing on it) and ends with its message counted. Before, call 1 stayed open
    for ever; before the stop said the rest, call 5 was never said."""
    caplog.set_level(logging.WARNING, logger="kvpool.epp")
    server = Server(tally, 1 << 20, first_message_timeout=0.3, clock=lambda: 0.0)
    port = await server.start("127.0.0.1", 0)
    reader, writer = await connect(port)
    try:
        writer.write(silent(1) + spoken(3))
        for sid in (1, 5):
            flags, trailers = await until(reader, HEADERS, sid)
            if not flags & END_STREAM:  # the response headers; the trailers follow
                flags, trailers = await until(reader, HEADERS, sid)
            assert flags & END_STREAM and b"grpc-status\x01%d" % DEADLINE_EXCEEDED in trailers
            writer.write(silent(5))
        await asyncio.sleep(1)
        writer.write(frame(PING, 0, 0, b"stillok!"))
        while (got := await read_frame(reader)) is not None and got[0] != PING:
            assert got[2] != 3, f"call 3 was touched: {got}"
        writer.write(frame(DATA, END_STREAM, 3, b""))
        assert (await until(reader, DATA, 3))[1] == b"\x00\x00\x00\x00\x011"
        assert server.failed[DEADLINE_EXCEEDED] == 2 and server.open_streams == 0
        warned = [r.getMessage() for r in caplog.records if r.name == "kvpool.epp"]
        assert len(warned) == 1 and "--first-message-timeout 0.3s" in warned[0], warned
    finally:
        writer.close()
        await server.stop(grace=0)
    assert said(caplog, "--first-message-timeout 0.3s") == [1, 1]


@contextlib.asynccontextmanager
async def silent_calls(port: int, n: int):
    """``n`` grpcio channels, each on a connection of its own with one Process call whose
    request stream never yields (HEADERS sent, no message); closed at the end."""
    channels = [grpc.aio.insecure_channel(f"127.0.0.1:{port}", options=[
        ("grpc.use_local_subchannel_pool", 1), ("grpc.channel_id", i)]) for i in range(n)]
    never = asyncio.Event()

    async def nothing():
        await never.wait()
        yield b""

    calls = [ch.stream_stream("/envoy.service.ext_proc.v3.ExternalProcessor/Process",
                              request_serializer=bytes, response_deserializer=bytes)(nothing())
             for ch in channels]
    waits = [asyncio.ensure_future(call.initial_metadata()) for call in calls]
    try:
        yield
    finally:
        for call in calls:
            call.cancel()
        for ch in channels:
            await ch.close()
        await asyncio.gather(*waits, return_exceptions=True)


async def scrape(url: str) -> dict:
    async with aiohttp.ClientSession() as s, s.get(url + "/metrics") as r:
        return parse_metrics(await r.text())


async def test_connections_holding_only_silent_calls_make_room_at_the_connection_cap():
    """--max-connections 4, --first-message-timeout 60: four grpcio connections each hold one
    silent call (every slot has a call open); a grpcio pick on a new connection is answered
    within 15 s, a silent one having made room (an idle close), none refused. Before, make-room
    took only connections without a call, so every new connection was refused for as long as
    the silent calls stayed (with 1024 of them at the defaults, Envoy's too)."""
    picker = Picker(Router(ReplicaSet(["http://127.0.0.1:9"], interval=0.5),
                           lookup_timeout=LOOKUP_TIMEOUT))
    metrics = MetricsPort("127.0.0.1", 0)
    async with picking(picker, "127.0.0.1", 0, max_connections=4, metrics=metrics,
                       first_message_timeout=60) as port, silent_calls(port, 4):
        for _ in range(100):  # bounded: 5 s for the four calls to open
            if (await scrape(metrics.url))["kvpool_epp_open_streams"][()] == 4:
                break
            await asyncio.sleep(0.05)
        assert await served_within(port, 15)
        samples = await scrape(metrics.url)
    assert samples["kvpool_epp_connections_idle_closed_total"][()] >= 1
    assert samples["kvpool_epp_connections_refused_total"][(("reason", "max_connections"),)] == 0


async def test_at_the_open_call_cap_connections_with_only_silent_calls_are_cut_first():
    """--max-open-streams 4: A holds 2 silent calls, E (Envoy with 2 requests in flight) 2 that
    spoke. E's third call is taken and A is cut (GOAWAY ENHANCE_YOUR_CALM), nothing refused.
    Then, cap 2, two connections with one silent call each: a grpcio pick (one call against
    one) is answered. Before, the asker lost ties and the larger count: E's third call, and
    the pick, were refused for as long as the silent calls stayed."""
    async with served(max_open_streams=4, first_message_timeout=60) as (server, port):
        a = await connect(port)
        a[1].write(silent(1) + silent(3))
        await open_calls(server, 2)
        e = await opened(port, 1, 3)
        try:
            await open_calls(server, 4)
            e[1].write(frame(HEADERS, END_HEADERS, 5, b"\x88") + frame(DATA, 0, 5, FIRST))
            _, payload = await until(a[0], GOAWAY)
            assert int.from_bytes(payload[4:8], "big") == ENHANCE_YOUR_CALM
            await open_calls(server, 3)
            assert server.cut == 1 and server.streams_refused["max_open_streams"] == 0
            e[1].write(frame(PING, 0, 0, b"eserved!"))
            while (got := await read_frame(e[0])) is not None and got[0] != PING:
                assert got[0] != RST_STREAM, f"E's call was refused: {got}"
        finally:
            for _, writer in (a, e):
                writer.close()
    async with served(max_open_streams=2, first_message_timeout=60) as (server, port):
        held = [await connect(port) for _ in range(2)]
        try:
            for _, writer in held:
                writer.write(silent(1))
            await open_calls(server, 2)
            assert await served_within(port, 15)
            assert server.cut == 1
        finally:
            for _, writer in held:
                writer.close()


def test_the_first_message_timeout_flag_and_its_checks(capsys):
    """--first-message-timeout: 10 s by default, in --help; 0, a negative or a non-finite
    value is a clear error (exit status 2) and the Server refuses it too."""
    assert FIRST_MESSAGE_TIMEOUT == 10 and limits(4 << 20)["first_message_timeout"] == 10
    assert limits(4 << 20, first_message_timeout=0.5)["first_message_timeout"] == 0.5
    for bad in (0.0, -1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="--first-message-timeout"):
            limits(4 << 20, first_message_timeout=bad)
        with pytest.raises(ValueError, match="first_message_timeout"):
            Server(tally, 1 << 20, first_message_timeout=bad)
    replica = ["--replica", "http://127.0.0.1:9"]
    assert main([*replica, "--first-message-timeout", "0"]) == 2
    assert "--first-message-timeout" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "--first-message-timeout SECONDS" in capsys.readouterr().out
