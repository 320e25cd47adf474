"""The picker's gRPC transport: ext_proc's one method served over HTTP/2 (RFC 9113) by an
asyncio protocol on the picker's own event loop.

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
answers' headers are HPACK literals that never touch Envoy's dynamic table. gRPC messages
(1-byte flag, 4-byte length, protobuf) are cut from DATA frames; a compressed one ends the call
UNIMPLEMENTED, one larger than ``max_message`` RESOURCE_EXHAUSTED. Flow control: this side
opens its receive windows wide (bodies are bounded by the picker's --max-body-bytes, 413 past
it) and sends within the peer's windows, waiting for its WINDOW_UPDATE when they run out.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Awaitable, Callable

__all__ = ["Connection", "Handler", "Server", "Stream"]

log = logging.getLogger("kvpool.epp")

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = (
    0, 1, 3, 4, 6, 7, 8, 9)
END_STREAM = ACK = 0x1
END_HEADERS, PADDED = 0x4, 0x8
HEADER_TABLE_SIZE, MAX_CONCURRENT, INITIAL_WINDOW, MAX_FRAME = 1, 3, 4, 5
MAX_WINDOW = (1 << 31) - 1
DEFAULT_WINDOW, DEFAULT_FRAME = 65535, 16384
NO_ERROR, PROTOCOL_ERROR, REFUSED_STREAM, CANCEL = 0, 1, 7, 8
STREAMS = 1024  # concurrent streams a connection may open (each one request in flight)
# NOTE(preface-timeout): a connection whose client preface has not come within this many
# seconds is closed: silent connections would otherwise hold a descriptor each for ever (20k
# of them left none for Envoy's own connections)
PREFACE_TIMEOUT = 10.0
OK, INVALID_ARGUMENT, RESOURCE_EXHAUSTED, UNIMPLEMENTED, INTERNAL = 0, 3, 8, 12, 13
_HEADER = struct.Struct(">BHBBI")

# runs one call to its end: reads Stream.messages, answers with Stream.send
Handler = Callable[["Stream"], Awaitable[None]]


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return _HEADER.pack(len(payload) >> 16, len(payload) & 0xFFFF, kind, flags, stream) + payload


def _literal(name: bytes, value: bytes) -> bytes:
    """An HPACK literal header field without indexing, new name (RFC 7541 6.2.2)."""
    return b"\x00" + _length(name) + name + _length(value) + value


def _length(s: bytes) -> bytes:  # an HPACK string length, 7-bit prefix, no Huffman
    n = len(s)
    if n < 127:
        return bytes([n])
    out, n = bytearray([127]), n - 127
    while n >= 128:
        out.append((n & 127) | 128)
        n >>= 7
    return bytes(out + bytes([n]))


RESPONSE_HEADERS = b"\x88" + _literal(b"content-type", b"application/grpc")  # 0x88 :status 200


def trailers(status: int, message: str = "") -> bytes:
    block = _literal(b"grpc-status", str(status).encode())
    if message:  # grpc-message is percent-encoded; these messages are plain ASCII words
        block += _literal(b"grpc-message", message.replace(" ", "%20").encode("ascii"))
    return block


class Stream:
    """One call: the gRPC messages Envoy sent on it (``messages``, None at its end) and
    ``send`` for the answers."""

    __slots__ = ("conn", "id", "pending", "messages", "started", "closed", "window", "task")

    def __init__(self, conn: Connection, stream_id: int, window: int) -> None:
        self.conn, self.id, self.window = conn, stream_id, window
        self.pending = bytearray()  # a message cut across DATA frames
        self.messages: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.started = self.closed = False
        self.task: asyncio.Task | None = None

    def feed(self, data: bytes, end: bool) -> None:
        buf, i = self.pending, 0
        buf += data  # a bytearray: a message of many frames is not copied once per frame
        while len(buf) - i >= 5:
            size = int.from_bytes(buf[i + 1:i + 5], "big")
            if buf[i] != 0 or size > self.conn.max_message:
                self.abort(UNIMPLEMENTED if buf[i] else RESOURCE_EXHAUSTED,
                           "compressed message" if buf[i] else "message too large")
                return
            if len(buf) - i - 5 < size:
                break
            self.messages.put_nowait(bytes(buf[i + 5:i + 5 + size]))
            i += 5 + size
        del buf[:i]
        if end:
            self.messages.put_nowait(None)

    async def send(self, messages: list[bytes], end: bool, status: int = OK,
                   detail: str = "") -> None:
        """Write ``messages`` (serialized) and, with ``end``, the trailers; within the peer's
        flow-control windows."""
        if self.closed:
            return
        out: list[bytes] = []  # one write for all of it when the windows allow (one wake-up)
        if not self.started:
            self.started = True
            out.append(frame(HEADERS, END_HEADERS, self.id, RESPONSE_HEADERS))
        for body in messages:  # the envelope: flag 0 and a 4-byte length, as 5 bytes
            await self.conn.send_data(self, len(body).to_bytes(5, "big") + body, out)
        if self.closed:  # reset by the peer while waiting for a window: nothing more goes out
            return
        if end:
            self.closed = True
            out.append(frame(HEADERS, END_HEADERS | END_STREAM, self.id,
                             trailers(status, detail)))
        self.conn.write(b"".join(out))

    def abort(self, status: int, detail: str) -> None:
        """End the call now with ``status`` (its handler is cancelled)."""
        if self.task is not None:
            self.task.cancel()
        if not self.closed:
            self.closed = True
            head = b"" if self.started else frame(HEADERS, END_HEADERS, self.id, RESPONSE_HEADERS)
            self.conn.write(head + frame(HEADERS, END_HEADERS | END_STREAM, self.id,
                                         trailers(status, detail)))
        self.conn.forget(self)


class Connection(asyncio.Protocol):
    """One HTTP/2 connection from Envoy (RFC 9113 sections 3.4, 4-6)."""

    def __init__(self, handler: Handler, max_message: int, connections: set[Connection],
                 preface_timeout: float = PREFACE_TIMEOUT) -> None:
        self.handler, self.max_message, self.connections = handler, max_message, connections
        self.preface_timeout = preface_timeout
        self.transport: asyncio.Transport | None = None
        self.handshake: asyncio.TimerHandle | None = None  # NOTE(preface-timeout)
        self.buf, self.preface = b"", False
        self.streams: dict[int, Stream] = {}
        self.last_id = 0  # the highest stream id the peer opened (GOAWAY names it)
        self.going_away = False
        self.in_headers = 0  # a header block's stream while CONTINUATION frames follow
        self.peer_window, self.window, self.max_frame = DEFAULT_WINDOW, DEFAULT_WINDOW, \
            DEFAULT_FRAME
        self.received = 0  # bytes taken from our connection window since its last update
        self.opened = asyncio.Event()  # set when the peer's windows grow

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self.connections.add(self)
        self.handshake = asyncio.get_running_loop().call_later(
            self.preface_timeout, self.no_preface)
        settings = struct.pack(">HIHIHI", INITIAL_WINDOW, MAX_WINDOW, MAX_CONCURRENT, STREAMS,
                               HEADER_TABLE_SIZE, 0)
        self.write(frame(SETTINGS, 0, 0, settings) + frame(
            WINDOW_UPDATE, 0, 0, struct.pack(">I", MAX_WINDOW - DEFAULT_WINDOW)))

    def no_preface(self) -> None:
        if not self.preface and self.transport is not None:
            self.transport.abort()  # nothing owed to a peer that never spoke HTTP/2

    def connection_lost(self, exc: Exception | None) -> None:
        self.connections.discard(self)
        if self.handshake is not None:
            self.handshake.cancel()
        for stream in list(self.streams.values()):
            if stream.task is not None:
                stream.task.cancel()
        self.streams.clear()
        self.opened.set()  # senders waiting on a window see the connection gone

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
            if len(buf) < len(PREFACE):
                self.buf = buf
                return
            if not buf.startswith(PREFACE):
                return self.fail(PROTOCOL_ERROR)
            self.preface, i = True, len(PREFACE)
            if self.handshake is not None:
                self.handshake.cancel()
        while len(buf) - i >= 9:
            hi, lo, kind, flags, sid = _HEADER.unpack_from(buf, i)
            size = (hi << 16) | lo
            if size > DEFAULT_FRAME:  # we never raise SETTINGS_MAX_FRAME_SIZE: not buffered
                return self.fail(PROTOCOL_ERROR)
            if len(buf) - i - 9 < size:
                break
            payload = buf[i + 9:i + 9 + size]
            i += 9 + size
            self.on_frame(kind, flags, sid & MAX_WINDOW, payload)
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
            self.streams[sid].closed = True
            self.streams[sid].abort(CANCEL, "")
        elif kind == GOAWAY:
            self.going_away = True
        # PRIORITY, PUSH_PROMISE (never sent to a server) and unknown kinds: ignored (5.5)

    def on_data(self, flags: int, sid: int, payload: bytes) -> None:
        self.received += len(payload)  # padding included: it counts against the window
        if self.received >= MAX_WINDOW // 2:
            self.write(frame(WINDOW_UPDATE, 0, 0, struct.pack(">I", self.received)))
            self.received = 0
        if flags & PADDED:
            if not payload or payload[0] >= len(payload):
                return self.fail(PROTOCOL_ERROR)
            payload = payload[1:len(payload) - payload[0]]
        stream = self.streams.get(sid)
        if stream is not None:  # else a call already ended: its late frames are dropped
            stream.feed(payload, bool(flags & END_STREAM))

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
        if self.going_away or len(self.streams) >= STREAMS:
            self.write(frame(RST_STREAM, 0, sid, struct.pack(">I", REFUSED_STREAM)))
            return
        stream = self.streams[sid] = Stream(self, sid, self.peer_window)
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
        if self.streams.get(stream.id) is stream:
            del self.streams[stream.id]

    def on_settings(self, payload: bytes) -> None:
        for i in range(0, len(payload) - 5, 6):
            key, value = struct.unpack_from(">HI", payload, i)
            if key == INITIAL_WINDOW:
                for stream in self.streams.values():  # 6.9.2: open streams shift too
                    stream.window += value - self.peer_window
                self.peer_window = value
            elif key == MAX_FRAME:
                self.max_frame = value
        self.write(frame(SETTINGS, ACK, 0))
        self.opened.set()

    def on_window_update(self, sid: int, increment: int) -> None:
        if sid == 0:
            self.window += increment
        elif sid in self.streams:
            self.streams[sid].window += increment
        self.opened.set()

    async def send_data(self, stream: Stream, data: bytes, out: list[bytes]) -> None:
        """DATA frames of ``data`` on ``stream`` onto ``out``, never past the peer's windows
        (6.9): ``out`` is written before waiting for them to open."""
        view = memoryview(data)
        while view and not stream.closed:
            n = min(len(view), self.max_frame, self.window, stream.window)
            if n <= 0:
                if self.transport is None or self.transport.is_closing():
                    return  # nobody is left to read it
                self.write(b"".join(out))
                out.clear()
                self.opened.clear()
                await self.opened.wait()
                continue
            out.append(frame(DATA, 0, stream.id, bytes(view[:n])))
            self.window -= n
            stream.window -= n
            view = view[n:]

    def fail(self, code: int) -> None:
        """A connection error (5.4.1): GOAWAY, then the connection closes."""
        self.write(frame(GOAWAY, 0, 0, struct.pack(">II", self.last_id, code)))
        if self.transport is not None:
            self.transport.close()

    def go_away(self) -> None:
        """Graceful shutdown: the peer opens no new stream; open ones finish."""
        self.going_away = True
        self.write(frame(GOAWAY, 0, 0, struct.pack(">II", self.last_id, NO_ERROR)))


class Server:
    """Listens on ``host:port``; each connection's streams run ``handler``."""

    def __init__(self, handler: Handler, max_message: int,
                 preface_timeout: float = PREFACE_TIMEOUT) -> None:
        self.handler, self.max_message = handler, max_message
        self.preface_timeout = preface_timeout  # NOTE(preface-timeout)
        self.connections: set[Connection] = set()
        self.server: asyncio.AbstractServer | None = None

    async def start(self, host: str, port: int) -> int:
        """The bound port."""
        self.server = await asyncio.get_running_loop().create_server(
            lambda: Connection(self.handler, self.max_message, self.connections,
                               self.preface_timeout), host, port)
        return self.server.sockets[0].getsockname()[1]

    async def stop(self, grace: float) -> None:
        """No new connection or stream; streams in flight get ``grace`` seconds to finish."""
        if self.server is None:
            return
        self.server.close()
        for conn in list(self.connections):
            conn.go_away()
        loop = asyncio.get_running_loop()
        deadline = loop.time() + grace
        while any(c.streams for c in self.connections) and loop.time() < deadline:
            await asyncio.sleep(0.05)
        for conn in list(self.connections):
            if conn.transport is not None:
                conn.transport.close()
        await self.server.wait_closed()
        self.server = None
