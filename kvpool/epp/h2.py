"""The picker's gRPC transport: ext_proc's one method served over HTTP/2 (RFC 9113) by an
asyncio protocol on the picker's own event loop. This module is one connection; calls.py is one
call on it (its frames and messages), listener.py the listening socket (docs/epp.md).

NOTE(why): with grpc.aio every stream start and every message read or written is a completion
handed from grpc's threads to a poller thread and then to the event loop; on a shared 2-core
box those hand-offs put ~0.7 ms on every request's path before Envoy may send it upstream
(docs/benchmarks.md, bench.epp_breakdown). Here Envoy's frames are read, decided and answered in
the loop's own callbacks: no thread is woken per message.

NOTE(not-h2): the h2 library (python-hyper) was tried as the state machine under the same
asyncio protocol: its per-frame work (events, HPACK decoding of every request header block,
header validation) put +0.8 ms p50 on the picker path (bench.epp_breakdown, same rounds:
+3.16 against +2.35 ms here), more than grpc.aio cost. This side needs no header value, so it
skips what h2 cannot: the tests drive it with grpcio's own client and a real Envoy.

What it serves: every stream is a call of ``ExternalProcessor/Process`` (the port serves
nothing else, as the Inference Extension's picker port does). Request header blocks are skipped
unread (HPACK state lives only in a decoder, and this side never needs a header's value); the
answers' headers are HPACK literals that never touch Envoy's dynamic table. Answers are sent
within the peer's windows, waiting for its WINDOW_UPDATE when they run out.

NOTE(buffer-cap): what a connection's calls hold is bounded by flow control. A call's DATA bytes
stay counted (``Stream.held``, ``Connection.buffered``) until the call ends, since the picker
keeps a request's body until it decides. Each stream's window (SETTINGS_INITIAL_WINDOW_SIZE) is
the largest message plus its envelope and is never opened further; the connection's window is
``max_connection_bytes``, opened again only by what ended calls let go. A peer that keeps to its
windows therefore waits rather than growing the picker, and when the connection's window is
nearly used up its oldest holders end so other calls get room (NOTE(window-room) in room.py);
one that sends past a stream's window has that call ended RESOURCE_EXHAUSTED, past the
connection's window the connection ends (GOAWAY ENHANCE_YOUR_CALM). A call that goes on into
its answer lets go of each message once handled (``Stream.release``: both windows open again by
it). What all connections hold together is bounded by the server (NOTE(held-budget) in
listener.py). At most STREAMS calls are open per connection (SETTINGS_MAX_CONCURRENT_STREAMS;
more are refused with RST_STREAM REFUSED_STREAM), and at most the server's ``max_open_streams``
on all connections together (NOTE(stream-cap) in listener.py).

NOTE(rapid-reset): a peer that opens calls and resets them at once (CVE-2023-44487) makes
the picker start and cancel a call per pair of frames while never being over any cap. Each
connection may reset RESET_BURST open calls at once and RESET_RATE a second after that; past
it the connection is closed (GOAWAY ENHANCE_YOUR_CALM, counted with the server's cuts). Envoy
resets an ext_proc call only when its request goes away before the picker's decision
(milliseconds), far below that; a call already answered (one that follows its answer, whose
client may leave at any time) is not counted: resetting it cost its peer a whole request.

NOTE(close-timeout): a connection closed by this side (an error, a refusal, the server's stop)
first writes what is queued (its GOAWAY); a peer that does not read it within
``close_timeout`` seconds is cut off (abort), so no close waits on a peer for ever.

NOTE(idle-timeout): a connection with no call open for the server's ``idle_timeout`` seconds
(counted from its start or from its last call's end) is closed gracefully: GOAWAY NO_ERROR
naming the last stream it opened, no new call taken (each refused with RST_STREAM
REFUSED_STREAM, safe to retry), then after ``close_timeout`` seconds (an orderly peer closes
its side first) the bounded close above. Only calls count as activity, as with gRPC's
max_connection_idle and Go's http2 IdleTimeout: a peer that sent one PING a period would
otherwise hold its connection slot for ever without a call. A connection with a call open is
never closed by it, however long the call. One timer per connection, armed once per idle
period: when it fires early (a call came and went meanwhile) it is armed again for what is
left of the period from ``idle_since``; a call's end only stamps ``idle_since``.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from typing import TYPE_CHECKING

from kvpool.epp.calls import (ACK, CANCEL, CONTINUATION, DATA, DEFAULT_FRAME, DEFAULT_WINDOW,
                              END_HEADERS, END_STREAM, ENHANCE_YOUR_CALM, GOAWAY,
                              HEADER_TABLE_SIZE, HEADERS, INITIAL_WINDOW, INTERNAL,
                              FLOW_CONTROL_ERROR, FRAME_SIZE_ERROR, MAX_CONCURRENT,
                              MAX_FRAME, MAX_FRAME_LIMIT, MAX_WINDOW, NO_ERROR, PADDED, PING,
                              PREFACE, PROTOCOL_ERROR, REFUSED_STREAM, RESOURCE_EXHAUSTED,
                              RST_STREAM, SETTINGS, WINDOW_UPDATE, Handler, Stream, frame,
                              frame_header, goaway)
from kvpool.epp.preface import mismatch, sniff
from kvpool.epp.silence import SilentCalls

if TYPE_CHECKING:
    from kvpool.epp.listener import Server

__all__ = ["STREAMS", "Connection"]

log = logging.getLogger("kvpool.epp")

STREAMS = 1024  # concurrent streams a connection may open (each one request in flight)
RESET_BURST, RESET_RATE = 1000, 100.0  # open calls a peer may reset at once, then a second


class Connection(asyncio.Protocol):
    """One HTTP/2 connection from Envoy (RFC 9113 sections 3.4, 4-6); its limits are its
    ``server``'s (listener.py)."""

    def __init__(self, handler: Handler, server: Server) -> None:
        self.handler, self.server = handler, server
        self.transport: asyncio.Transport | None = None
        self.handshake: asyncio.TimerHandle | None = None  # NOTE(preface-timeout)
        self.closer: asyncio.TimerHandle | None = None  # NOTE(close-timeout)
        self.idler: asyncio.TimerHandle | None = None  # NOTE(idle-timeout)
        self.idle_since = 0.0  # the loop's time the last call ended (or the connection began)
        self.buf, self.preface = b"", False
        self.streams: dict[int, Stream] = {}
        self.silent = SilentCalls(self, server.first_message_timeout)  # NOTE(first-message)
        self.last_id = 0  # the highest stream id the peer opened (GOAWAY names it)
        self.going_away = False
        self.in_headers = 0  # a header block's stream while CONTINUATION frames follow
        self.peer_window, self.window, self.max_frame = DEFAULT_WINDOW, DEFAULT_WINDOW, \
            DEFAULT_FRAME
        self.buffered = 0  # DATA bytes the open calls hold (NOTE(buffer-cap))
        self.owed = 0  # bytes let go and not yet given back to the peer's connection window
        self.opened = asyncio.Event()  # set when the peer's windows grow
        self.reset_room = float(RESET_BURST)  # resets the peer may still send (NOTE(rapid-reset))
        self.reset_at = server.clock()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        if not self.server.admit(self):  # over the connection cap (listener.py)
            self.write(frame(SETTINGS, 0, 0) + goaway(0, ENHANCE_YOUR_CALM))
            return self.close()
        self.handshake = asyncio.get_running_loop().call_later(
            self.server.preface_timeout, self.no_preface)
        self.idle_since = asyncio.get_running_loop().time()
        self.wait_idle(self.server.idle_timeout)
        settings = struct.pack(">HIHIHI", INITIAL_WINDOW, self.server.stream_window,
                               MAX_CONCURRENT, STREAMS, HEADER_TABLE_SIZE, 0)
        grow = self.server.max_connection_bytes - DEFAULT_WINDOW  # NOTE(buffer-cap)
        self.write(frame(SETTINGS, 0, 0, settings) + (frame(
            WINDOW_UPDATE, 0, 0, struct.pack(">I", grow)) if grow > 0 else b""))

    def no_preface(self) -> None:
        if not self.preface and self.transport is not None:
            self.server.refuse_preface("preface_timeout")
            self.transport.abort()  # nothing owed to a peer that never spoke HTTP/2

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.release(self)
        for timer in (self.handshake, self.closer, self.idler):
            if timer is not None:
                timer.cancel()
        self.drop_streams()
        self.opened.set()  # senders waiting on a window see the connection gone

    def drop_streams(self) -> None:
        """Every call ends now (its handler cancelled) and lets go of what it held."""
        for stream in list(self.streams.values()):
            if stream.task is not None:
                stream.task.cancel()
            stream.unkeep(stream.kept)  # NOTE(answer-budget) in listener.py
        self.server.close_streams(len(self.streams))
        self.streams.clear()
        self.silent.clear()  # its timer too
        self.server.let_go(self.buffered)
        self.buffered = 0

    # NOTE(backpressure): asyncio calls these at its write buffer's high-water mark and again
    # once it drained: a peer that sends (PINGs, SETTINGS: each one answered) but does not
    # read its answers is not read either, so what is queued for it stays bounded
    def pause_writing(self) -> None:
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def data_received(self, data: bytes) -> None:
        buf, i = self.buf + data if self.buf else data, 0
        if not self.preface:
            if mismatch(buf):  # NOTE(plaintext-h2c) in preface.py: said, counted, closed
                self.server.refuse_preface(sniff(buf))
                return self.fail(PROTOCOL_ERROR)
            if len(buf) < len(PREFACE):
                self.buf = buf
                return
            self.preface, i = True, len(PREFACE)
            if self.handshake is not None:
                self.handshake.cancel()
        while len(buf) - i >= 9:
            size, kind, flags, sid = frame_header(buf, i)
            if size > DEFAULT_FRAME:  # we never raise SETTINGS_MAX_FRAME_SIZE: not buffered
                return self.fail(PROTOCOL_ERROR)
            if len(buf) - i - 9 < size:
                break
            payload = buf[i + 9:i + 9 + size]
            i += 9 + size
            self.on_frame(kind, flags, sid, payload)
            if self.transport is None or self.transport.is_closing():
                return
        self.buf = buf[i:]

    def on_frame(self, kind: int, flags: int, sid: int, payload: bytes) -> None:
        if self.in_headers and kind != CONTINUATION:
            return self.fail(PROTOCOL_ERROR)  # a header block is never interleaved
        if kind == DATA:
            self.on_data(flags, sid, payload)
        elif kind in (HEADERS, CONTINUATION):
            self.on_headers(kind, flags, sid)
        elif kind == SETTINGS and not flags & ACK:
            self.on_settings(payload)
        elif kind == WINDOW_UPDATE and len(payload) == 4:
            self.on_window_update(sid, int.from_bytes(payload, "big") & MAX_WINDOW)
        elif kind == PING and not flags & ACK:
            self.write(frame(PING, ACK, 0, payload))
        elif kind == RST_STREAM and sid in self.streams:
            stream = self.streams[sid]
            stream.closed = True
            stream.abort(CANCEL, "")
            if not stream.started:  # NOTE(rapid-reset): an answered call costs a decision
                self.on_reset()
        elif kind == GOAWAY:
            self.going_away = True
        # PRIORITY, PUSH_PROMISE (never sent to a server) and unknown kinds: ignored (5.5)

    def on_data(self, flags: int, sid: int, payload: bytes) -> None:
        """DATA, counted against the windows (padding too, 6.9.1; NOTE(buffer-cap))."""
        n = len(payload)
        if self.buffered + self.owed + n > self.server.max_connection_bytes:
            return self.fail(ENHANCE_YOUR_CALM)  # past the connection's window
        stream = self.streams.get(sid)
        if stream is None:  # a call already ended: its late frames are dropped
            return self.give_back(n)
        if stream.held + n > self.server.stream_window:
            stream.abort(RESOURCE_EXHAUSTED, "call past its flow-control window")
            return self.give_back(n)  # the call let go of what it held, and this was not kept
        if not self.server.hold(self, n):  # past the process's budget (listener.py)
            return  # this connection held the most: it was cut (NOTE(held-budget))
        stream.held += n
        self.buffered += n
        if flags & PADDED:
            if not payload or payload[0] >= n:
                return self.fail(PROTOCOL_ERROR)
            payload = payload[1:n - payload[0]]
        stream.feed(payload, bool(flags & END_STREAM))
        self.server.room.keep(self)  # NOTE(window-room) in room.py

    def on_reset(self) -> None:
        """The peer reset an open call: one from its budget, or the connection closes
        (NOTE(rapid-reset))."""
        now = self.server.clock()
        self.reset_room = min(float(RESET_BURST),
                              self.reset_room + (now - self.reset_at) * RESET_RATE) - 1
        self.reset_at = now
        if self.reset_room < 0:
            self.server.cut_largest(self, f"resetting calls past {RESET_BURST} at once and "
                                    f"{RESET_RATE:g} a second")

    def give_back(self, n: int, now: bool = False) -> None:
        """``n`` bytes let go: the peer's connection window opens again by them, in one
        WINDOW_UPDATE per quarter of it, or at once ``now`` (NOTE(window-room) in room.py)."""
        self.owed += n
        if self.owed and (now or self.owed >= self.server.max_connection_bytes // 4):
            self.write(frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", self.owed)))
            self.owed = 0

    def on_headers(self, kind: int, flags: int, sid: int) -> None:
        """A header block: a new stream's opening or a request's trailers, read no further
        than its flags (the module docstring)."""
        if kind == CONTINUATION and sid != self.in_headers:
            return self.fail(PROTOCOL_ERROR)
        self.in_headers = 0 if flags & END_HEADERS else sid
        if kind == HEADERS and sid > self.last_id:
            self.open(sid)
        stream = self.streams.get(sid)
        if kind == HEADERS and flags & END_STREAM and stream is not None:
            stream.feed(b"", True)

    def open(self, sid: int) -> None:
        self.last_id = sid
        if not self.server.open_stream(self):  # going away, or a cap (listener.py)
            self.write(frame(RST_STREAM, 0, sid, struct.pack(">I", REFUSED_STREAM)))
            return
        stream = self.streams[sid] = Stream(self, sid, self.peer_window)
        self.silent.opened(sid)  # NOTE(first-message) in silence.py
        stream.task = asyncio.get_running_loop().create_task(self.run(stream))

    async def run(self, stream: Stream) -> None:
        try:
            await self.handler(stream)
        except asyncio.CancelledError:
            pass
        except Exception:  # a bug: this call fails, the connection and the others go on
            log.exception("kvpool epp: stream %d failed", stream.id)
            await stream.send([], True, INTERNAL, "picker error")
        finally:
            self.forget(stream)

    def forget(self, stream: Stream) -> None:
        """``stream``'s call ended: it leaves the connection with what it held."""
        if self.streams.get(stream.id) is stream:
            del self.streams[stream.id]
            self.silent.done(stream.id)
            self.server.close_streams(1)
            self.buffered -= stream.held
            self.server.let_go(stream.held)
            self.give_back(stream.held)
            stream.held = 0
            stream.unkeep(stream.kept)
            if not self.streams:  # NOTE(idle-timeout): the idle period starts again
                self.idle_since = asyncio.get_running_loop().time()
                if self.idler is None:
                    self.wait_idle(self.server.idle_timeout)

    def wait_idle(self, delay: float) -> None:
        """Check for idleness in ``delay`` seconds; never when the idle timeout is off."""
        if self.server.idle_timeout > 0:
            self.idler = asyncio.get_running_loop().call_later(delay, self.on_idle)

    def on_idle(self) -> None:
        """The idle timer fired: a connection without a call for the whole idle timeout gets
        GOAWAY NO_ERROR and is closed; with a call open the timer waits for its end
        (NOTE(idle-timeout))."""
        self.idler = None
        if self.streams or self.transport is None or self.transport.is_closing():
            return  # forget() arms it again once the last call ends
        loop = asyncio.get_running_loop()
        left = self.idle_since + self.server.idle_timeout - loop.time()
        if left > 0:
            return self.wait_idle(left)
        self.server.retire(self)

    def on_settings(self, payload: bytes) -> None:
        """NOTE(settings-range): values RFC 9113 6.5.2 rules out are connection errors, as
        the RFC asks. Taken as it was, SETTINGS_MAX_FRAME_SIZE 0 made every answer on the
        connection wait forever, holding its call and the bytes it had read."""
        if len(payload) % 6:
            return self.fail(FRAME_SIZE_ERROR)
        for i in range(0, len(payload), 6):
            key, value = struct.unpack_from(">HI", payload, i)
            if key == INITIAL_WINDOW:
                if value > MAX_WINDOW:
                    return self.fail(FLOW_CONTROL_ERROR)
                for stream in self.streams.values():  # 6.9.2: open streams shift too
                    stream.window += value - self.peer_window
                self.peer_window = value
            elif key == MAX_FRAME:
                if not DEFAULT_FRAME <= value <= MAX_FRAME_LIMIT:
                    return self.fail(PROTOCOL_ERROR)
                self.max_frame = value
        self.write(frame(SETTINGS, ACK, 0))
        self.opened.set()

    def on_window_update(self, sid: int, increment: int) -> None:
        """6.9.1: a window opened past 2**31-1 is a flow-control error, and an increment of
        0 on the connection a protocol error (NOTE(settings-range))."""
        if sid == 0:
            if not increment:
                return self.fail(PROTOCOL_ERROR)
            self.window += increment
            if self.window > MAX_WINDOW:
                return self.fail(FLOW_CONTROL_ERROR)
        elif sid in self.streams:
            stream = self.streams[sid]
            stream.window += increment
            if stream.window > MAX_WINDOW:
                return self.fail(FLOW_CONTROL_ERROR)
        self.opened.set()

    def fail(self, code: int) -> None:
        """A connection error (5.4.1): GOAWAY, every call dropped, then the connection
        closes (NOTE(close-timeout))."""
        self.write(goaway(self.last_id, code))
        self.drop_streams()
        self.close()

    def close(self) -> None:
        """Close once what is queued is written, or abort after ``close_timeout`` seconds
        (NOTE(close-timeout))."""
        if self.transport is None or self.transport.is_closing():
            return
        self.transport.close()
        self.closer = asyncio.get_running_loop().call_later(
            self.server.close_timeout, self.transport.abort)

    def go_away(self, close_after: float | None = None) -> None:
        """Graceful shutdown: the peer opens no new stream; open ones finish. With
        ``close_after`` (a close for want of a call, NOTE(idle-timeout)): closed that many
        seconds later."""
        self.going_away = True
        self.write(goaway(self.last_id, NO_ERROR))
        if close_after is not None:
            if self.idler is not None:
                self.idler.cancel()
            self.idler = asyncio.get_running_loop().call_later(close_after, self.close)
