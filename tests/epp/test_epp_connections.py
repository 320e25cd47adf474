"""The picker's listening socket on 127.0.0.1 (kvpool/epp/listener.py): past the connection cap
a new connection is closed at once with one throttled WARNING while those open are served
(NOTE(connection-cap))."""

from __future__ import annotations

import asyncio
import logging

from kvpool.epp.calls import ENHANCE_YOUR_CALM, GOAWAY, PING, PREFACE, SETTINGS, frame
from kvpool.epp.listener import Server
from tests.epp.test_epp_buffers import read_frame, tally, until

HELLO = PREFACE + frame(SETTINGS, 0, 0)


async def connect(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(HELLO)
    return reader, writer


async def test_past_the_connection_cap_new_connections_are_closed_at_once(caplog):
    """Cap 3: three connections are served; five more each get GOAWAY ENHANCE_YOUR_CALM and
    are closed, with one WARNING for them all; the three still answer a PING; once one
    leaves, a new connection is served. Before NOTE(connection-cap) there was no cap."""
    caplog.set_level(logging.WARNING, logger="kvpool.epp")
    server = Server(tally, 1 << 20, max_connections=3)
    port = await server.start("127.0.0.1", 0)
    held = [await connect(port) for _ in range(3)]
    try:
        for reader, _ in held:
            await until(reader, SETTINGS)  # each was admitted (the server spoke first)
        for _ in range(5):
            reader, writer = await connect(port)
            _, body = await until(reader, GOAWAY)
            assert int.from_bytes(body[4:8], "big") == ENHANCE_YOUR_CALM
            assert await read_frame(reader) is None  # closed
            writer.close()
        assert len(server.connections) == 3 and server.refused == 5
        warned = [r for r in caplog.records if r.name == "kvpool.epp"]
        assert len(warned) == 1 and "connection cap" in warned[0].getMessage(), warned
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
