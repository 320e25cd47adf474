"""What a connection's calls may hold (NOTE(buffer-cap) in kvpool/epp/h2.py), on 127.0.0.1 with
a raw HTTP/2 peer: the windows the server advertises bound it to ``max_connection_bytes``; a
peer that keeps to them and leaves partial messages on many streams holds at most that (the
server's own count, ``Server.buffered``) and is not cut off, one byte past them ends its
connection with GOAWAY ENHANCE_YOUR_CALM; one call past its own window ends RESOURCE_EXHAUSTED
while its connection serves on; SETTINGS_MAX_CONCURRENT_STREAMS is advertised and enforced."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import struct

from kvpool.epp.calls import (DATA, DEFAULT_FRAME, DEFAULT_WINDOW, END_HEADERS, END_STREAM,
                             ENHANCE_YOUR_CALM, GOAWAY, HEADERS, INITIAL_WINDOW, MAX_CONCURRENT,
                             PING, PREFACE, REFUSED_STREAM, RESOURCE_EXHAUSTED, RST_STREAM,
                             SETTINGS, WINDOW_UPDATE, frame)
from kvpool.epp.h2 import RESET_BURST, STREAMS
from kvpool.epp.listener import WARN_INTERVAL, Server

MAX_MESSAGE = (256 << 10) - 5  # a stream's window: 256 KiB
CAP = 1 << 20  # max_connection_bytes
HELLO = PREFACE + frame(SETTINGS, 0, 0)


async def tally(call) -> None:
    """Holds every message until the call's end, then answers how many came."""
    n = 0
    while await call.messages.get() is not None:
        n += 1
    await call.send([b"%d" % n], True)


@contextlib.asynccontextmanager
async def peer(**kw):
    """A ``tally`` server (or ``handler``'s) and a raw connection to it; yields (server,
    reader, writer)."""
    server = Server(kw.pop("handler", tally), kw.pop("max_message", MAX_MESSAGE),
                    max_connection_bytes=CAP, **kw)
    port = await server.start("127.0.0.1", 0)
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(HELLO)
        yield server, reader, writer
    finally:
        writer.close()
        await server.stop(grace=0.5)


async def read_frame(reader: asyncio.StreamReader) -> tuple[int, int, int, bytes] | None:
    """(kind, flags, stream id, payload) of the server's next frame; None at its close."""
    try:
        head = await asyncio.wait_for(reader.readexactly(9), 5)
    except (asyncio.IncompleteReadError, ConnectionResetError):
        return None
    body = await reader.readexactly(int.from_bytes(head[:3], "big"))
    return head[3], head[4], int.from_bytes(head[5:9], "big"), body


async def windows(reader: asyncio.StreamReader) -> dict[str, int]:
    """The server's SETTINGS (by id) and its connection window once its WINDOW_UPDATE came."""
    seen: dict[str, int] = {}
    while "window" not in seen:
        kind, _, _, body = await read_frame(reader)
        if kind == SETTINGS:
            seen.update({str(k): v for k, v in struct.iter_unpack(">HI", body)})
        elif kind == WINDOW_UPDATE:
            seen["window"] = DEFAULT_WINDOW + int.from_bytes(body, "big")
    return seen


async def until(reader: asyncio.StreamReader, kind: int, sid: int = 0) -> tuple[int, bytes]:
    """Read to the server's first frame of ``kind`` on ``sid``: (flags, payload)."""
    while (got := await read_frame(reader)) is not None:
        if got[0] == kind and got[2] == sid:
            return got[1], got[3]
    raise AssertionError(f"closed before a frame of kind {kind} on stream {sid}")


def opening(sid: int) -> bytes:
    """HEADERS of a call (the server reads no header block) and a message announced as large
    as the server takes: it stays partial."""
    return frame(HEADERS, END_HEADERS, sid, b"\x88") + frame(
        DATA, 0, sid, MAX_MESSAGE.to_bytes(5, "big"))


async def test_partial_messages_on_many_streams_hold_at_most_the_cap():
    """The peer reads the windows, then on 40 streams announces a message and dribbles its
    body in 4 KiB frames, round robin, exactly up to the connection's window: the server
    holds CAP bytes (its own count), answers a PING (still open), and 1 byte more is GOAWAY
    ENHANCE_YOUR_CALM, the connection closed and nothing held. Before NOTE(buffer-cap) the
    windows were 2**31-1: such peers were held without bound. The window is at its least (one
    largest call), where no room is kept by ending calls (NOTE(window-room): the next test)."""
    async with peer(max_message=CAP - 5) as (server, reader, writer):
        seen = await windows(reader)
        assert seen[str(INITIAL_WINDOW)] == CAP
        assert seen["window"] == CAP
        assert seen[str(MAX_CONCURRENT)] == STREAMS
        left = CAP
        for sid in range(1, 81, 2):
            writer.write(opening(sid))
            left -= 5
        while left:
            for sid in range(1, 81, 2):
                n = min(4096, left)
                writer.write(frame(DATA, 0, sid, bytes(n)))
                left -= n
                if not left:
                    break
            await writer.drain()
            await asyncio.sleep(0)  # the server reads in between
            assert server.buffered <= CAP
        writer.write(frame(PING, 0, 0, b"stillok!"))
        assert (await until(reader, PING))[1] == b"stillok!"
        assert server.buffered == CAP
        writer.write(frame(DATA, 0, 1, b"x"))
        _, body = await until(reader, GOAWAY)
        assert int.from_bytes(body[4:8], "big") == ENHANCE_YOUR_CALM
        assert await read_frame(reader) is None  # closed
        assert server.buffered == 0


async def test_a_call_is_answered_while_older_calls_hold_partial_bodies_filling_the_window(
        caplog):
    """NOTE(window-room) in kvpool/epp/room.py: calls 1 to 15 each announce a largest message
    and leave 128 KiB of it, filling the connection's window between them (slow clients'
    uploads on Envoy's one connection); the peer keeps to its windows. Call 17 waits for
    window and is answered: the oldest holder, call 1, was ended RESOURCE_EXHAUSTED
    ("connection window full") and its bytes given back, counted, one WARNING; calls 3 to 15
    stay open. Before, no window came back until a call ended: call 17's first message could
    not be sent (here the read for the window timed out) and --first-message-timeout ended it."""
    caplog.set_level(logging.WARNING, logger="kvpool.epp")
    async with peer() as (server, reader, writer):
        window, part = (await windows(reader))["window"], bytes(CAP // 8 - 5)
        for sid in range(1, 17, 2):
            writer.write(opening(sid) + b"".join(frame(DATA, 0, sid, part[i:i + DEFAULT_FRAME])
                                                 for i in range(0, len(part), DEFAULT_FRAME)))
        window, hi, ended = window - CAP, b"\x00\x00\x00\x00\x02hi", {}
        while window < len(hi):
            kind, flags, sid, body = await read_frame(reader)
            window += int.from_bytes(body, "big") if (kind, sid) == (WINDOW_UPDATE, 0) else 0
            if kind == HEADERS and flags & END_STREAM:
                ended[sid] = body
        assert list(ended) == [1] and b"grpc-status\x01" + str(RESOURCE_EXHAUSTED).encode() \
            in ended[1] and b"connection%20window%20full" in ended[1], ended
        writer.write(frame(HEADERS, END_HEADERS, 17, b"\x88") + frame(DATA, END_STREAM, 17, hi))
        _, answer = await until(reader, DATA, 17)
        assert answer == b"\x00\x00\x00\x00\x011"
        conn = next(iter(server.connections))
        assert sorted(conn.streams) == list(range(3, 17, 2)) and server.room.ended == 1
        assert server.buffered == 7 * (CAP // 8)
    warned = [r.getMessage() for r in caplog.records if "window was full" in r.getMessage()]
    assert len(warned) == 1 and "ended 1 call(s)" in warned[0], warned


async def granted(reader: asyncio.StreamReader) -> int | None:
    """What the server's next frame gives the connection's window (None: a PING's answer)."""
    kind, _, sid, body = await read_frame(reader)
    return None if kind == PING else int.from_bytes(body, "big") if (
        kind, sid) == (WINDOW_UPDATE, 0) else 0


async def crowd(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, sids: range,
                window: int) -> int:
    """Calls ``sids`` each leave CAP // 8 of a largest message, each sent once the connection's
    window has room (the oldest holders ended for it: NOTE(window-room)); then a PING is
    answered, so every frame was read. The window left."""
    part = bytes(CAP // 8 - 5)
    for sid in sids:
        while window < CAP // 8:
            window += await granted(reader)
        writer.write(opening(sid) + b"".join(frame(DATA, 0, sid, part[i:i + DEFAULT_FRAME])
                                             for i in range(0, len(part), DEFAULT_FRAME)))
        window -= CAP // 8
    writer.write(frame(PING, 0, 0, b"crowded!"))
    while (more := await granted(reader)) is not None:
        window += more
    return window


async def test_calls_crowded_out_after_a_warning_are_said_at_the_stop(caplog):
    """NOTE(window-room): 11 calls of CAP // 8 each end the oldest few, one frame at a time:
    the WARNING says the first; past the interval (the server's clock, moved) 6 more calls end
    more, the WARNING says the rest of the first burst and the first of these; the stop says
    the rest. The counts said add up to those ended. Before, the last burst's rest was never
    said (the outside probe: 27 calls ended, "ended 1 call(s)" logged)."""
    caplog.set_level(logging.WARNING, logger="kvpool.epp")
    now = [0.0]
    async with peer(clock=lambda: now[0]) as (server, reader, writer):
        window = await crowd(reader, writer, range(1, 23, 2), (await windows(reader))["window"])
        first = server.room.ended
        assert said(caplog) == [1] and first >= 2, (said(caplog), first)
        now[0] += WARN_INTERVAL
        await crowd(reader, writer, range(23, 35, 2), window)
        assert said(caplog) == [1, first] and server.room.ended >= first + 2, said(caplog)
    assert sum(said(caplog)) == server.room.ended and len(said(caplog)) == 3, said(caplog)


async def test_calls_crowded_out_after_a_warning_are_said_an_interval_later(caplog):
    """NOTE(window-room): with no later crowding and no stop, the calls ended after a WARNING
    are said when its interval is over (here 0.2 s). Before, never."""
    caplog.set_level(logging.WARNING, logger="kvpool.epp")
    async with peer() as (server, reader, writer):
        server.warnings.interval = 0.2
        await crowd(reader, writer, range(1, 23, 2), (await windows(reader))["window"])
        assert server.room.ended >= 2
        for _ in range(500):  # 5 s at most
            if sum(said(caplog)) == server.room.ended:
                break
            await asyncio.sleep(0.01)
        assert sum(said(caplog)) == server.room.ended, (said(caplog), server.room.ended)


def said(caplog, words: str = "window was full") -> list[int]:
    """The counts the throttled WARNINGs with ``words`` said (NOTE(said-counts) in
    kvpool/throttle.py), the crowded-out ones (NOTE(window-room)) by default."""
    return [int(re.search(r"(?:closed|refused|ended) (\d+)", r.getMessage())[1])
            for r in caplog.records if words in r.getMessage()]


async def test_a_silent_call_on_a_full_window_is_not_blamed_on_a_client_alone(caplog):
    """At the least window (no room kept: NOTE(window-room)) call 1 holds all of it; call 3,
    which could send nothing, ends at --first-message-timeout and the WARNING says the window
    was full. Before, it said only that a client was holding calls open (Envoy's own call, in
    the outside probe's run)."""
    caplog.set_level(logging.WARNING, logger="kvpool.epp")
    async with peer(max_message=CAP - 5, first_message_timeout=0.1) as (_, reader, writer):
        await windows(reader)
        part = bytes(CAP - 5)
        writer.write(opening(1) + b"".join(frame(DATA, 0, 1, part[i:i + DEFAULT_FRAME])
                                           for i in range(0, len(part), DEFAULT_FRAME)))
        writer.write(frame(HEADERS, END_HEADERS, 3, b"\x88") + frame(PING, 0, 0, b"stillok!"))
        await until(reader, PING)  # all of it read: call 1 was no silent call
        flags, block = await until(reader, HEADERS, 3)
        if not flags & END_STREAM:
            flags, block = await until(reader, HEADERS, 3)
        assert b"grpc-status\x014" in block, block  # DEADLINE_EXCEEDED
    warned = [r.getMessage() for r in caplog.records if "first-message" in r.getMessage()]
    assert len(warned) == 1 and "filled its connection's window (0 bytes left" in warned[0], warned


async def test_one_call_past_its_window_ends_resource_exhausted_and_others_go_on():
    """Stream 1 sends whole 16 KiB messages (each held by the call) past its window, ignoring
    it: that call ends with grpc-status 8 and its bytes are let go; stream 3 on the same
    connection is answered. Before NOTE(buffer-cap) a call's messages were held without bound."""
    async with peer() as (server, reader, writer):
        await windows(reader)
        message = (DEFAULT_FRAME - 5).to_bytes(5, "big") + bytes(DEFAULT_FRAME - 5)
        writer.write(frame(HEADERS, END_HEADERS, 1, b"\x88")
                     + frame(DATA, 0, 1, message) * (MAX_MESSAGE // DEFAULT_FRAME + 2))
        flags, block = await until(reader, HEADERS, 1)
        if not flags & END_STREAM:  # the response headers; the trailers follow
            flags, block = await until(reader, HEADERS, 1)
        assert flags & END_STREAM and b"grpc-status\x01" + str(RESOURCE_EXHAUSTED).encode() \
            in block, block
        assert server.buffered == 0
        writer.write(frame(HEADERS, END_HEADERS, 3, b"\x88")
                     + frame(DATA, END_STREAM, 3, b"\x00\x00\x00\x00\x02hi"))
        _, answer = await until(reader, DATA, 3)
        assert answer == b"\x00\x00\x00\x00\x011"


async def test_max_concurrent_streams_is_advertised_and_enforced():
    """SETTINGS_MAX_CONCURRENT_STREAMS is STREAMS; with that many calls open (each waiting for
    its body), the next stream is refused with RST_STREAM REFUSED_STREAM, counted under
    "max_concurrent_streams" (kvpool_epp_streams_refused_total; before, only refusals at the
    process's cap were counted), and once one call ends a new one is taken."""
    async with peer() as (server, reader, writer):
        assert (await windows(reader))[str(MAX_CONCURRENT)] == STREAMS
        writer.write(b"".join(frame(HEADERS, END_HEADERS, 2 * i + 1, b"\x88")
                              for i in range(STREAMS + 1)))
        _, code = await until(reader, RST_STREAM, 2 * STREAMS + 1)
        assert int.from_bytes(code, "big") == REFUSED_STREAM
        assert sum(len(c.streams) for c in server.connections) == STREAMS
        assert server.streams_refused == {"max_open_streams": 0, "max_concurrent_streams": 1,
                                          "going_away": 0}
        writer.write(frame(DATA, END_STREAM, 1, b""))  # call 1 ends: answered "0"
        await until(reader, DATA, 1)
        sid = 2 * STREAMS + 3
        writer.write(frame(HEADERS, END_HEADERS | END_STREAM, sid, b"\x88"))
        _, answer = await until(reader, DATA, sid)
        assert answer == b"\x00\x00\x00\x00\x010"


async def answering(call) -> None:
    """Answers each message at once and lets go of it (a call in its answer phase,
    kvpool/epp/service.py NOTE(answer-phase)); at the end, how many came."""
    n = 0
    while (m := await call.messages.get()) is not None:
        n += 1
        await call.send([b"ok"], False)
        call.release(len(m) + 5)
    await call.send([b"%d" % n], True)


async def test_a_call_that_lets_go_of_its_messages_takes_more_than_its_window():
    """Three windows' worth of 16 KiB messages on one call whose handler releases each: the
    server opens the stream's window again by each (WINDOW_UPDATE), the peer keeps to it and
    the call ends OK with all of them, holding nothing. Before Stream.release a call held
    every byte to its end: a streamed answer through the picker stopped at one window."""
    async with peer(handler=answering) as (server, reader, writer):
        await windows(reader)
        size = DEFAULT_FRAME - 5
        message = frame(DATA, 0, 1, size.to_bytes(5, "big") + bytes(size))
        total, window = 3 * (MAX_MESSAGE // DEFAULT_FRAME), MAX_MESSAGE + 5
        writer.write(frame(HEADERS, END_HEADERS, 1, b"\x88"))
        for _ in range(total):
            while window < DEFAULT_FRAME:
                window += int.from_bytes((await until(reader, WINDOW_UPDATE, 1))[1], "big")
            writer.write(message)
            window -= DEFAULT_FRAME
            assert server.buffered <= MAX_MESSAGE + 5
        writer.write(frame(DATA, END_STREAM, 1, b""))
        last = b""
        while (got := await read_frame(reader)) is not None and not (
                got[0] == HEADERS and got[1] & END_STREAM):
            last = got[3] if got[0] == DATA else last
        assert got is not None and b"grpc-status\x010" in got[3], got  # OK
        assert last.endswith(b"%d" % total) and server.buffered == 0, last


async def test_resetting_answered_calls_is_no_rapid_reset():
    """More answered calls than the rapid-reset burst are reset at once (clients leaving
    mid-answer): the connection serves on. Before, each counted as a rapid reset and the
    connection, with every other call on it, was cut (GOAWAY ENHANCE_YOUR_CALM)."""
    async with peer(handler=answering) as (server, reader, writer):
        await windows(reader)
        sids = range(1, 2 * (RESET_BURST + 10), 2)
        writer.write(b"".join(frame(HEADERS, END_HEADERS, sid, b"\x88")
                              + frame(DATA, 0, sid, b"\x00\x00\x00\x00\x01x") for sid in sids))
        await until(reader, DATA, sids[-1])  # the last call answered: all were
        writer.write(b"".join(frame(RST_STREAM, 0, sid, struct.pack(">I", 8)) for sid in sids))
        writer.write(frame(PING, 0, 0, b"stillok!"))
        flags, body = await until(reader, PING)
        assert body == b"stillok!" and not server.cut, server.cut
