"""One gRPC call of the picker's transport on the wire (kvpool.epp.h2 serves the connection).

The HTTP/2 frame layout (RFC 9113 section 4), the few HPACK literals the answers need (RFC 7541
6.2.2: never indexed, so Envoy's dynamic table is never touched) and ``Stream``: the gRPC
messages (1-byte flag, 4-byte length, protobuf) cut from a call's DATA frames, and its answers
written within the peer's flow-control windows. A compressed message ends the call
UNIMPLEMENTED, one announced larger than the server's ``max_message`` RESOURCE_EXHAUSTED, both
before any of its body is kept.

A call's received bytes count against its connection's buffer until the call ends (``held``,
NOTE(buffer-cap) in kvpool/epp/h2.py): the picker keeps a request's body until it decides. A
call that goes on into its answer lets go of each message once handled (``release``); the
answer bytes its handler holds back count against the process's budget apart (``keep``).
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvpool.epp.h2 import Connection

__all__ = ["STATUS_NAMES", "Handler", "Stream", "frame", "trailers"]

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
DATA, HEADERS, RST_STREAM, SETTINGS, PING, GOAWAY, WINDOW_UPDATE, CONTINUATION = (
    0, 1, 3, 4, 6, 7, 8, 9)
END_STREAM = ACK = 0x1
END_HEADERS, PADDED = 0x4, 0x8
HEADER_TABLE_SIZE, MAX_CONCURRENT, INITIAL_WINDOW, MAX_FRAME = 1, 3, 4, 5
MAX_WINDOW = (1 << 31) - 1
DEFAULT_WINDOW, DEFAULT_FRAME = 65535, 16384
NO_ERROR, PROTOCOL_ERROR, REFUSED_STREAM, CANCEL, ENHANCE_YOUR_CALM = 0, 1, 7, 8, 11
FLOW_CONTROL_ERROR, FRAME_SIZE_ERROR = 3, 6
MAX_FRAME_LIMIT = (1 << 24) - 1  # SETTINGS_MAX_FRAME_SIZE: DEFAULT_FRAME up to this (6.5.2)
OK, INVALID_ARGUMENT, DEADLINE_EXCEEDED, RESOURCE_EXHAUSTED = 0, 3, 4, 8
UNIMPLEMENTED, INTERNAL = 12, 13
# the gRPC statuses a call of the picker can end with besides OK (Server.failed counts them)
STATUS_NAMES = {INVALID_ARGUMENT: "INVALID_ARGUMENT", DEADLINE_EXCEEDED: "DEADLINE_EXCEEDED",
                RESOURCE_EXHAUSTED: "RESOURCE_EXHAUSTED", UNIMPLEMENTED: "UNIMPLEMENTED",
                INTERNAL: "INTERNAL"}
ENVELOPE = 5  # a gRPC message's flag byte and 4-byte length
_HEADER = struct.Struct(">BHBBI")

# runs one call to its end: reads Stream.messages, answers with Stream.send
Handler = Callable[["Stream"], Awaitable[None]]


def frame(kind: int, flags: int, stream: int, payload: bytes = b"") -> bytes:
    return _HEADER.pack(len(payload) >> 16, len(payload) & 0xFFFF, kind, flags, stream) + payload


def frame_header(buf: bytes, at: int) -> tuple[int, int, int, int]:
    """(payload size, kind, flags, stream id) of the frame header at ``buf[at:at + 9]``."""
    hi, lo, kind, flags, sid = _HEADER.unpack_from(buf, at)
    return (hi << 16) | lo, kind, flags, sid & MAX_WINDOW


def goaway(last_id: int, code: int) -> bytes:
    return frame(GOAWAY, 0, 0, struct.pack(">II", last_id, code))


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

    __slots__ = ("conn", "id", "pending", "messages", "started", "closed", "window", "task",
                 "held", "kept", "heard")

    def __init__(self, conn: Connection, stream_id: int, window: int) -> None:
        self.conn, self.id, self.window = conn, stream_id, window
        self.pending = bytearray()  # a message cut across DATA frames
        self.messages: asyncio.Queue[bytes | None] = asyncio.Queue()
        self.started = self.closed = False
        self.heard = False  # its first message (or its end) came (NOTE(first-message))
        self.task: asyncio.Task | None = None
        self.held = 0  # DATA bytes received on this call so far (NOTE(buffer-cap))
        self.kept = 0  # answer bytes its handler holds back (NOTE(answer-budget) in listener.py)

    def feed(self, data: bytes, end: bool) -> None:
        buf, i = self.pending, 0
        buf += data  # a bytearray: a message of many frames is not copied once per frame
        while len(buf) - i >= ENVELOPE:
            size = int.from_bytes(buf[i + 1:i + ENVELOPE], "big")
            if buf[i] != 0 or size > self.conn.server.max_message:
                self.abort(UNIMPLEMENTED if buf[i] else RESOURCE_EXHAUSTED,
                           "compressed message" if buf[i] else "message too large")
                return
            if len(buf) - i - ENVELOPE < size:
                break
            self.messages.put_nowait(bytes(buf[i + ENVELOPE:i + ENVELOPE + size]))
            i += ENVELOPE + size
        del buf[:i]
        if end:
            self.messages.put_nowait(None)
        if (i or end) and not self.heard:  # NOTE(first-message) in kvpool/epp/silence.py
            self.heard = True
            self.conn.silent.done(self.id)

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
            await self.send_data(len(body).to_bytes(ENVELOPE, "big") + body, out)
        if self.closed:  # reset by the peer while waiting for a window: nothing more goes out
            return
        if end:
            self.closed = True
            self.conn.server.ended(status)
            out.append(frame(HEADERS, END_HEADERS | END_STREAM, self.id,
                             trailers(status, detail)))
        self.conn.write(b"".join(out))

    async def send_data(self, data: bytes, out: list[bytes]) -> None:
        """DATA frames of ``data`` onto ``out``, never past the peer's windows, its
        connection's and this call's (RFC 9113 6.9): ``out`` is written before waiting for
        them to open."""
        conn, view = self.conn, memoryview(data)
        while view and not self.closed:
            n = min(len(view), conn.max_frame, conn.window, self.window)
            if n <= 0:
                if conn.transport is None or conn.transport.is_closing():
                    return  # nobody is left to read it
                conn.write(b"".join(out))
                out.clear()
                conn.opened.clear()
                await conn.opened.wait()
                continue
            out.append(frame(DATA, 0, self.id, bytes(view[:n])))
            conn.window -= n
            self.window -= n
            view = view[n:]

    def release(self, n: int) -> None:
        """Let go of ``n`` bytes of messages the handler is done with before the call ends (a
        call that follows its answer, service.py NOTE(answer-phase)): the call's and its
        connection's windows open by them again (NOTE(buffer-cap) in h2.py)."""
        n = min(n, self.held)
        if n <= 0 or self.closed:
            return
        self.held -= n
        self.conn.buffered -= n
        self.conn.server.let_go(n)
        self.conn.give_back(n)
        self.conn.write(frame(WINDOW_UPDATE, 0, self.id, struct.pack(">I", n)))

    def keep(self, n: int) -> bool:
        """Count ``n`` more answer bytes the handler holds back against the process's budget
        (not the windows: no message of the peer's); False, nothing counted, when the budget
        has no room (NOTE(answer-budget) in listener.py) or the call has ended."""
        if self.closed or self.conn.streams.get(self.id) is not self \
                or not self.conn.server.keep(n):
            return False
        self.kept += n
        return True

    def unkeep(self, n: int) -> None:
        """Let go of ``n`` answer bytes ``keep`` counted (all of them when the call ends)."""
        n = min(n, self.kept)
        if n > 0:
            self.kept -= n
            self.conn.server.unkeep(n)

    def abort(self, status: int, detail: str) -> None:
        """End the call now with ``status`` (its handler is cancelled, its bytes let go)."""
        if self.task is not None:
            self.task.cancel()
        if not self.closed:
            self.closed = True
            self.conn.server.ended(status)
            head = b"" if self.started else frame(HEADERS, END_HEADERS, self.id, RESPONSE_HEADERS)
            self.conn.write(head + frame(HEADERS, END_HEADERS | END_STREAM, self.id,
                                         trailers(status, detail)))
        self.conn.forget(self)
