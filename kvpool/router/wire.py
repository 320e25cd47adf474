"""UpstreamPool: the HTTP/1.1 client the router proxies requests with (upstream.py's Relay).

One keep-alive connection pool per replica; a request is written in one write, its response
head parsed, and its body read as it arrives::

    pool.request(base_url, method, target, headers, body) -> Upstream (status, headers)
        no connection (refused, unreachable, connect timeout, TLS refused) -> UpstreamDown
        the connection broke, or what came back is not an HTTP/1.1 head  -> UpstreamLost
    async with upstream: await upstream.readany() / upstream.read()
        bytes as they arrive, de-chunked; b"" at the end; UpstreamLost when it broke off
    leaving the block: the connection goes back to the pool when the answer was read whole
        on a keep-alive connection; otherwise (an error, a cancel, a silent replica, an answer
        left unread) it is closed, which cancels the request on the replica

NOTE(why): aiohttp's ClientSession stays the router's client for everything else (health
beats, lookups, KV event info); on the proxied path it cost ~150 us of CPU per request on
the shared 2-core box (its ClientRequest/ClientResponse machinery and a body-writer task per
request on Python < 3.12) against ~15 us for the same request written on a plain asyncio
protocol, and the router's whole CPU per request is ~800 us. What this client needs is small:
the replicas are ``kvpool serve``, answering Content-Length or chunked bodies.

NOTE(transparent): only what the caller passes is sent (the client's end-to-end headers,
relayed.py) plus Host and Content-Length: no User-Agent, Accept or Content-Type of its own.
Body bytes are passed on undecoded (a Content-Encoding stays the replica's).

NOTE(idle): a pooled connection is reused newest first, never after ``keepalive`` idle seconds
(set below the replicas' own keep-alive, so a reused connection is not one being closed), and
never once its replica closed it (connection_lost) or sent bytes unasked.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from collections.abc import Sequence
from urllib.parse import urlsplit

from multidict import CIMultiDict

__all__ = ["Upstream", "UpstreamDown", "UpstreamLost", "UpstreamPool"]

MAX_HEAD_BYTES = 64 * 1024  # a response head (or a chunk-size line) longer than this is refused
HIGH_WATER = 256 * 1024  # body bytes buffered from a replica before its socket reads pause
_NO_BODY_STATUS = frozenset({204, 304})
_NO_BODY_METHODS = frozenset({"GET", "HEAD", "DELETE", "OPTIONS"})


class UpstreamDown(ConnectionError):
    """No connection to the replica (refused, unreachable, timed out): it is down."""


class UpstreamLost(ConnectionError):
    """The connection broke, or the replica's answer is not HTTP/1.1 this client reads."""


class _Conn(asyncio.Protocol):
    """One connection's bytes as they arrive; ``more`` waits for the next ones."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.waiter: asyncio.Future | None = None
        self.lost = False
        self.paused = False
        self.idle_since = 0.0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if len(self.buf) > HIGH_WATER and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()
        self._wake()

    def eof_received(self) -> bool:
        self.lost = True  # the replica closed its side: nothing more will come
        self._wake()
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = True
        self._wake()

    def _wake(self) -> None:
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)

    async def more(self) -> None:
        """Wait until bytes arrive or the connection ends (UpstreamLost if it had already)."""
        if self.lost:
            raise UpstreamLost("the replica closed the connection")
        if self.paused and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()
        self.waiter = self.loop.create_future()
        try:
            await self.waiter
        finally:
            self.waiter = None

    def take(self, n: int) -> bytes:
        out = bytes(self.buf[:n])
        del self.buf[:n]
        return out

    def close(self) -> None:
        self.lost = True
        if self.transport is not None:
            self.transport.close()


class Upstream:
    """A replica's answer: ``status``, ``headers``, then its body (module docstring)."""

    def __init__(self, pool: UpstreamPool, base: str, conn: _Conn, status: int,
                 headers: CIMultiDict, keep_alive: bool, framing: str, left: int) -> None:
        self.pool, self.base, self.conn = pool, base, conn
        self.status = status
        self.headers = headers
        self.keep_alive = keep_alive
        self.framing = framing  # "length", "chunked", "close" (until the end) or "none"
        self.left = left  # body bytes left: of the whole body, or of the current chunk
        self.done = framing == "none" or (framing == "length" and left == 0)
        self.crlf = False  # chunked: a chunk's data ended, its CRLF comes next
        self.trailers = False  # chunked: the last chunk came, trailer lines until a blank

    async def __aenter__(self) -> Upstream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        c = self.conn
        if exc_info[0] is None and self.done and self.keep_alive and not c.lost and not c.buf:
            self.pool.put(self.base, c)
        else:
            c.close()

    async def read(self) -> bytes:
        parts = []
        while chunk := await self.readany():
            parts.append(chunk)
        return b"".join(parts)

    async def readany(self) -> bytes:
        """The body bytes there are now (waiting for some); b"" at the end of the body."""
        while True:
            out = self._decode()
            if out or self.done:
                return out
            await self.conn.more()

    def _decode(self) -> bytes:
        c = self.conn
        if self.done:
            return b""
        if self.framing == "chunked":
            return self._dechunk()
        if self.framing == "close":
            if c.lost and not c.buf:
                self.done = True
            return c.take(len(c.buf))
        out = c.take(min(len(c.buf), self.left))
        self.left -= len(out)
        self.done = self.left == 0
        return out

    def _dechunk(self) -> bytes:
        """What of the chunked body is buffered, de-chunked (RFC 9112 section 7.1)."""
        c, out = self.conn, bytearray()
        while not self.done:
            if self.left:
                if not c.buf:
                    break
                piece = c.take(min(len(c.buf), self.left))
                out += piece
                self.left -= len(piece)
                self.crlf = self.left == 0
                continue
            line = _line(c)
            if line is None:
                break
            self._chunk_line(line)
        return bytes(out)

    def _chunk_line(self, line: bytes) -> None:
        if self.crlf:  # the CRLF that ends a chunk's data
            if line:
                raise UpstreamLost("a chunk's data ran past its size")
            self.crlf = False
        elif self.trailers:  # trailer fields (dropped) until the blank line
            self.done = not line
        else:
            try:
                size = int(line.split(b";", 1)[0], 16)
            except ValueError:
                raise UpstreamLost("a chunk size is not hexadecimal") from None
            if size < 0:
                raise UpstreamLost("a chunk size is negative")
            self.trailers = size == 0
            self.left = size


def _line(c: _Conn) -> bytes | None:
    """The next CRLF-ended line of ``c``'s buffer, taken; None while it is incomplete."""
    at = c.buf.find(b"\r\n")
    if at < 0:
        if len(c.buf) > MAX_HEAD_BYTES:
            raise UpstreamLost("a line of the answer is too long")
        return None
    line = c.take(at)
    del c.buf[:2]
    return line


def _parse_head(head: bytes) -> tuple[str, int, CIMultiDict]:
    """(HTTP version, status, headers) of a response head (without its blank line)."""
    lines = head.decode("latin-1").split("\r\n")
    version, _, rest = lines[0].partition(" ")
    try:
        status = int(rest[:3])
    except ValueError:
        status = 0
    if not version.startswith("HTTP/1.") or not 100 <= status <= 999:
        raise UpstreamLost(f"not an HTTP/1.1 answer: {lines[0][:80]!r}")
    headers: CIMultiDict = CIMultiDict()
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name != name.strip():
            raise UpstreamLost(f"a malformed header line: {line[:80]!r}")
        headers.add(name, value.strip(" \t"))
    return version, status, headers


def _framing(method: str, status: int, headers: CIMultiDict) -> tuple[str, int]:
    """How the body ends (Upstream.framing) and its length when it has one."""
    if method == "HEAD" or status in _NO_BODY_STATUS:
        return "none", 0
    if "chunked" in headers.get("Transfer-Encoding", "").lower():
        return "chunked", 0
    length = headers.get("Content-Length")
    if length is None:
        return "close", 0
    if not length.isdigit():
        raise UpstreamLost(f"a malformed Content-Length: {length[:40]!r}")
    return "length", int(length)


def _request_bytes(method: str, target: str, host: str, headers: Sequence[tuple[str, str]],
                   body: bytes) -> bytes:
    fields = "".join([f"{k}: {v}\r\n" for k, v in headers])
    if fields.count("\n") != len(headers) or fields.count("\r") != len(headers) \
            or "\r" in target or "\n" in target:  # a CR or LF inside would split a header
        raise ValueError("a header or the request target holds a line break")
    length = f"Content-Length: {len(body)}\r\n" if body or method not in _NO_BODY_METHODS \
        else ""
    head = f"{method} {target} HTTP/1.1\r\nHost: {host}\r\n{length}{fields}\r\n"
    return head.encode("utf-8", "surrogateescape") + body


class UpstreamPool:
    """Keep-alive connections per replica base URL (module docstring)."""

    def __init__(self, *, connect_timeout: float, keepalive: float) -> None:
        self.connect_timeout = connect_timeout
        self.keepalive = keepalive  # seconds an idle connection may be reused (NOTE(idle))
        self.idle: dict[str, deque[_Conn]] = {}
        self._targets: dict[str, tuple[str, int, str, bool]] = {}
        self._tls: ssl.SSLContext | None = None

    def _target(self, base: str) -> tuple[str, int, str, bool]:
        """(host, port, Host header, TLS) of a replica base URL."""
        found = self._targets.get(base)
        if found is None:
            parts = urlsplit(base)
            tls = parts.scheme == "https"
            host = parts.hostname or ""
            found = (host, parts.port or (443 if tls else 80), parts.netloc.rpartition("@")[2],
                     tls)
            self._targets[base] = found
        return found

    async def request(self, base: str, method: str, target: str,
                      headers: Sequence[tuple[str, str]], body: bytes) -> Upstream:
        host, port, host_header, tls = self._target(base)
        data = _request_bytes(method, target, host_header, headers, body)
        conn = self._reuse(base) or await self._connect(host, port, tls)
        try:
            assert conn.transport is not None
            conn.transport.write(data)
            version, status, got = await self._head(conn)
            framing, left = _framing(method, status, got)
        except BaseException:
            conn.close()  # a cancel or a timeout here ends the request on the replica too
            raise
        keep = (version == "HTTP/1.1" and framing != "close"
                and "close" not in got.get("Connection", "").lower())
        return Upstream(self, base, conn, status, got, keep, framing, left)

    @staticmethod
    async def _head(conn: _Conn) -> tuple[str, int, CIMultiDict]:
        while True:
            at = conn.buf.find(b"\r\n\r\n")
            if at < 0:
                if len(conn.buf) > MAX_HEAD_BYTES:
                    raise UpstreamLost("the answer's head is too large")
                await conn.more()
                continue
            version, status, headers = _parse_head(conn.take(at))
            del conn.buf[:4]
            if status >= 200 or status == 101:
                return version, status, headers
            # 1xx interim answers (never asked for: no Expect is sent) are skipped

    def _reuse(self, base: str) -> _Conn | None:
        q = self.idle.get(base)
        if not q:
            return None
        now = asyncio.get_running_loop().time()
        while q:
            c = q.pop()  # the newest first (NOTE(idle))
            if not c.lost and not c.buf and now - c.idle_since < self.keepalive:
                return c
            c.close()
        return None

    async def _connect(self, host: str, port: int, tls: bool) -> _Conn:
        loop = asyncio.get_running_loop()
        if tls and self._tls is None:
            self._tls = ssl.create_default_context()
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, conn = await loop.create_connection(
                    lambda: _Conn(loop), host, port, ssl=self._tls if tls else None,
                    server_hostname=host if tls else None)
        except (OSError, TimeoutError) as exc:
            raise UpstreamDown(f"cannot connect to {host}:{port}: {exc!r}") from exc
        return conn

    def put(self, base: str, conn: _Conn) -> None:
        conn.idle_since = conn.loop.time()
        self.idle.setdefault(base, deque()).append(conn)

    def close(self) -> None:
        for q in self.idle.values():
            for c in q:
                c.close()
        self.idle.clear()
