"""Connections without a call (NOTE(idle-timeout) in kvpool/epp/h2.py, docs/epp.md), on
127.0.0.1: one that sent its preface and then nothing, or only its own GOAWAY, gets GOAWAY
NO_ERROR after ``idle_timeout`` and is closed, a stream opened after it refused; one with a call
open is never closed by the timer, and its idle period starts again when the call ends. With
``--max-connections`` slots all held by silent connections, a grpcio client gets in, whether
they are reaped by the timer or make room at the cap (NOTE(make-room) in
kvpool/epp/listener.py). The flag is checked as the others are."""

from __future__ import annotations

import asyncio
import math

import aiohttp
import grpc
import pytest

from kvpool.epp.calls import (ACK, DATA, END_HEADERS, END_STREAM, GOAWAY, HEADERS, NO_ERROR,
                             PING, REFUSED_STREAM, RST_STREAM, SETTINGS, frame, goaway)
from kvpool.epp.cli import limits, main, picking
from kvpool.epp.listener import IDLE_TIMEOUT, Server
from kvpool.epp.metrics import MetricsPort
from kvpool.epp.picker import Picker
from kvpool.router.proxy import Router
from kvpool.router.replicas import ReplicaSet
from tests.epp.test_epp_buffers import read_frame, tally, until
from tests.epp.test_epp_connections import connect
from tests.epp.test_epp_limits import pick
from tests.router.helpers import LOOKUP_TIMEOUT
from tests.server.helpers import parse_metrics

IDLE = 0.3  # the tests' idle timeout, seconds


async def goaway_of(reader: asyncio.StreamReader) -> tuple[int, int]:
    """(last stream id, error code) of the server's next GOAWAY."""
    _, body = await until(reader, GOAWAY)
    return int.from_bytes(body[:4], "big"), int.from_bytes(body[4:8], "big")


async def closed(reader: asyncio.StreamReader) -> None:
    """Read until the server closes the connection (5 s at most between two frames)."""
    while await read_frame(reader) is not None:
        pass


async def test_idle_connections_are_closed_gracefully_and_one_with_a_call_is_not():
    """Idle timeout 0.3 s: a silent connection and one that sent only its own GOAWAY each get
    GOAWAY NO_ERROR (last stream 0) and are closed; a stream the first opens after it is
    refused (REFUSED_STREAM, counted "going_away"). A connection with a call open is still
    open after 1 s (a PING answered, no GOAWAY); once its call ends it gets GOAWAY NO_ERROR
    naming stream 1 and is closed. Before NOTE(idle-timeout) all three stayed open for ever."""
    server = Server(tally, 1 << 20, idle_timeout=IDLE, close_timeout=0.6)
    port = await server.start("127.0.0.1", 0)
    silent, quitting, busy = [await connect(port) for _ in range(3)]
    try:
        quitting[1].write(goaway(0, NO_ERROR))
        busy[1].write(frame(HEADERS, END_HEADERS, 1, b"\x88"))  # a call waiting for its body
        assert await goaway_of(silent[0]) == (0, NO_ERROR)
        silent[1].write(frame(HEADERS, END_HEADERS, 1, b"\x88"))
        _, code = await until(silent[0], RST_STREAM, 1)
        assert int.from_bytes(code, "big") == REFUSED_STREAM
        assert await goaway_of(quitting[0]) == (0, NO_ERROR)
        for reader, _ in (silent, quitting):
            await closed(reader)
        await asyncio.sleep(1)  # more than three idle timeouts with the call open
        busy[1].write(frame(PING, 0, 0, b"stillopn"))
        while (got := await read_frame(busy[0])) is not None and got[:2] != (PING, ACK):
            assert got[0] != GOAWAY, "a connection with a call open was closed as idle"
        assert got is not None and got[3] == b"stillopn"
        busy[1].write(frame(DATA, END_STREAM, 1, b""))  # the call ends: answered "0"
        assert (await until(busy[0], DATA, 1))[1] == b"\x00\x00\x00\x00\x010"
        assert await goaway_of(busy[0]) == (1, NO_ERROR)
        await closed(busy[0])
        assert server.idle_closed == 3 and server.streams_refused["going_away"] == 1
    finally:
        for _, writer in (silent, quitting, busy):
            writer.close()
        await server.stop(grace=0)


async def served_within(port: int, seconds: float) -> bool:
    """Whether a grpcio pick (a body-less request: 503, no replica healthy) is answered
    within ``seconds``: each try on a new channel for 1 s at most, since grpcio's channel
    backs off longer and longer between connections refused at the cap."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + seconds
    while loop.time() < deadline:
        try:
            return await asyncio.wait_for(pick(port), min(1, deadline - loop.time())) == 503
        except (grpc.aio.AioRpcError, asyncio.TimeoutError):
            await asyncio.sleep(0.1)
    return False


@pytest.mark.parametrize("idle_timeout", [IDLE, 0])
async def test_silent_connections_at_the_cap_make_room_and_envoy_gets_in(idle_timeout):
    """--max-connections 2, both taken by connections that sent the preface and then nothing
    (never reading either). A grpcio pick is answered within 15 s with an idle timeout of 0.3
    s (NOTE(idle-timeout): they are closed) and with it off (0: NOTE(make-room), the
    connection longest without a call retires for the newcomer); the closes are counted on
    /metrics and no connection is refused. Before either, every pick was refused at the cap
    for as long as the silent connections stayed."""
    picker = Picker(Router(ReplicaSet(["http://127.0.0.1:9"], interval=0.5),
                           lookup_timeout=LOOKUP_TIMEOUT))
    metrics = MetricsPort("127.0.0.1", 0)
    async with picking(picker, "127.0.0.1", 0, max_connections=2, metrics=metrics,
                       idle_timeout=idle_timeout) as port:
        held = [await connect(port) for _ in range(2)]
        try:
            for reader, _ in held:
                await until(reader, SETTINGS)  # admitted
            assert await served_within(port, 15)
            async with aiohttp.ClientSession() as s, s.get(metrics.url + "/metrics") as r:
                samples = parse_metrics(await r.text())
        finally:
            for _, writer in held:
                writer.close()
    assert samples["kvpool_epp_connections_idle_closed_total"][()] >= 1
    assert sum(samples["kvpool_epp_connections_refused_total"].values()) == 0


def test_the_idle_timeout_flag_and_its_checks():
    """--idle-timeout: 60 s by default, 0 turns it off; a negative or non-finite value is a
    clear error (exit status 2) and the Server refuses it too."""
    assert IDLE_TIMEOUT == 60 and limits(4 << 20)["idle_timeout"] == 60
    assert limits(4 << 20, idle_timeout=0)["idle_timeout"] == 0
    for bad in (-1.0, math.inf, math.nan):
        with pytest.raises(ValueError, match="--idle-timeout"):
            limits(4 << 20, idle_timeout=bad)
        with pytest.raises(ValueError, match="idle_timeout"):
            Server(tally, 1 << 20, idle_timeout=bad)
    replica = ["--replica", "http://127.0.0.1:9"]
    assert main([*replica, "--idle-timeout", "-0.5"]) == 2
    assert main([*replica, "--idle-timeout", "nan"]) == 2
