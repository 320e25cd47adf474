"""UpstreamPool: the HTTP/1.1 client the router proxies requests with (upstream.py's Relay).

One keep-alive connection pool per replica; a request is written in one write, and its answer
parsed by llhttp (httptools) as its bytes arrive, the body passed on as it comes::

    pool.request(base_url, method, target, headers, body, on_data, on_sent) -> Upstream
        no connection (refused, unreachable, connect timeout, TLS refused) -> UpstreamDown
            (``timed_out``, ``why``: connect_errors.py); the router's own socket shortage
            (EMFILE, ...) -> OutOfConnections (connect_errors.py NOTE(local-exhaustion))
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

NOTE(parser): the answer's status line, headers and body framing (Content-Length, chunked,
until the close, none for HEAD / 1xx / 204 / 304) are llhttp's, the parser Node.js and uvicorn
use, through httptools (docs/architecture.md, Router): one parser per answer, fed from
data_received; its callbacks fill the answer in. What llhttp refuses, a switch of protocol
(101) and a version other than HTTP/1.x are UpstreamLost; trailer fields are dropped.

NOTE(transparent): only what the caller passes is sent (the client's end-to-end headers,
relayed.py) plus Host and Content-Length: no User-Agent, Accept or Content-Type of its own.
Body bytes are passed on undecoded (a Content-Encoding stays the replica's).

NOTE(idle): a pooled connection is reused newest first, never after ``keepalive`` idle seconds
(set below the replicas' own keep-alive, so a reused connection is not one being closed), and
never once its replica closed it (connection_lost) or sent bytes unasked. A replica's keep-alive
may be shorter than the router's (vLLM's uvicorn closes idle connections after 5 s): its close
can wait in the socket, unread, when the router picks the connection (the loop reads it after
the pick), so the socket is polled before reuse, as urllib3 does, and one with anything to read
(a FIN, a reset, stray bytes) is closed instead.

NOTE(on-data): ``on_data`` (no argument) is called whenever bytes of the answer arrive, as
they arrive, whether or not the caller reads them yet: the router hears its replica by them
(replicas.py NOTE(liveness)). A connection back in the pool calls nobody. ``on_sent``: once
the request is handed to a socket (before it, a caller giving up sent nothing: upstream.py).

NOTE(connect-timeout): a connect may take ``connect_timeout`` (CONNECT_TIMEOUT, as Envoy's
default). A SYN dropped by a replica whose accept queue is full (a busy server, a loaded box)
or on the way is sent again by the kernel after 1 s, then 3 s: a bound of 1 s cut the first
retry off, so a replica merely slow to accept was taken for down and its request went
elsewhere (its cache hit lost). A connect timed out is ``UpstreamDown`` all the same.

NOTE(unsent): a reused connection that ends, no byte of an answer come, while part of the request
was still unsent (its write never completed: the replica closed it under the write) is tried
again once on a fresh connection to the same replica: without the whole request the replica
cannot have run it. Once the whole request was handed to the socket, an end without an answer
is UpstreamLost, never sent again (upstream.py NOTE(retry): the replica may have taken it).
"""

from __future__ import annotations

import asyncio
import select
import ssl
from collections.abc import Callable, Sequence
from functools import lru_cache
from urllib.parse import urlsplit

import httptools
from multidict import CIMultiDict

from kvpool.router.connect_errors import Shortage, connect_failed
from kvpool.router.idle_pool import IdlePool

__all__ = ["CONNECT_TIMEOUT", "Upstream", "UpstreamLost", "UpstreamPool"]

MAX_HEAD_BYTES = 64 * 1024  # an answer whose head (or trailer) is longer is refused
HIGH_WATER = 256 * 1024  # body bytes buffered from a replica before its socket reads pause
CONNECT_TIMEOUT = 5.0  # seconds (NOTE(connect-timeout))
_NO_BODY_METHODS = frozenset({"GET", "HEAD", "DELETE", "OPTIONS"})


class UpstreamLost(ConnectionError):
    """The connection broke, or the replica's answer is not HTTP/1.1 this client reads."""


class _Conn(asyncio.Protocol):
    """One connection; the answer being read on it, filled in by its parser (NOTE(parser))."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.waiter: asyncio.Future | None = None
        self.lost = False  # the replica closed its side, or the connection ended
        self.stray = False  # bytes came unasked or after the answer: never reused (NOTE(idle))
        self.busy = False  # a request was written and its answer is not whole yet
        self.paused = False
        self.writing = False  # request bytes wait in the transport's buffer (NOTE(unsent))
        self.idle_since = 0.0
        self.on_data: Callable[[], None] | None = None  # NOTE(on-data)
        self.start("GET")
        self.busy = False  # until a request is written: what comes before is unasked

    def start(self, method: str) -> None:
        """Ready for the answer to a request about to be written."""
        self.parser = httptools.HttpResponseParser(self)
        self.head_only = method == "HEAD"  # its answer's head says a length, no body follows
        self.busy = True
        self.status, self.headers, self.keep_alive = 0, CIMultiDict(), False
        self.head_done = self.complete = False
        self.body: list[bytes] = []
        self.buffered = self.head_bytes = self.fields_bytes = 0
        self.error: UpstreamLost | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        # told (pause_writing / resume_writing) whenever a write is not whole in the socket
        transport.set_write_buffer_limits(high=0)  # type: ignore[attr-defined]

    def pause_writing(self) -> None:
        self.writing = True

    def resume_writing(self) -> None:
        self.writing = False

    def data_received(self, data: bytes) -> None:
        if self.on_data is not None:
            self.on_data()
        if not self.busy or self.error is not None:
            self.stray = True  # unasked, or past an answer already refused
            return
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            self.error = UpstreamLost("the replica switched protocols")
        except httptools.HttpParserError as exc:
            if not self.busy:  # the answer was whole: what followed it was not asked for
                self.stray = True
            elif isinstance(exc.__context__, UpstreamLost):  # raised by a callback below
                self.error = exc.__context__
            else:
                self.error = UpstreamLost(f"not an HTTP/1.1 answer: {exc}")
        if not self.head_done:  # a head not whole yet: all that came is head
            self.head_bytes += len(data)
            if self.head_bytes > MAX_HEAD_BYTES and self.error is None:
                self.error = UpstreamLost("the answer's head is too large")
        if self.buffered > HIGH_WATER and not self.paused and self.transport is not None:
            self.paused = True
            self.transport.pause_reading()
        self._wake()

    def on_message_begin(self) -> None:
        if not self.busy:
            raise UpstreamLost("a second answer to one request")

    def on_header(self, name: bytes, value: bytes) -> None:
        self.fields_bytes += len(name) + len(value)  # (a whole head can come in one read)
        if self.fields_bytes > MAX_HEAD_BYTES:
            raise UpstreamLost("the answer's head (or its trailer) is too large")
        if not self.head_done:  # trailer fields (after a chunked body) are dropped
            self.headers.add(name.decode("latin-1"), value.decode("latin-1").rstrip(" \t"))

    def on_headers_complete(self) -> None:
        p = self.parser
        status = p.get_status_code()
        if status == 101 or not p.get_http_version().startswith("1."):
            raise UpstreamLost(f"not an HTTP/1.1 answer: HTTP/{p.get_http_version()} {status}")
        if status < 200:  # 1xx interim answers (never asked for: no Expect is sent) skipped
            self.headers = CIMultiDict()
            return
        self.status, self.keep_alive, self.head_done = status, p.should_keep_alive(), True
        if self.head_only:
            self.on_message_complete()

    def on_body(self, body: bytes) -> None:
        if self.complete:  # bytes after the head of an answer to HEAD
            self.stray = True
        else:
            self.body.append(body)
            self.buffered += len(body)

    def on_message_complete(self) -> None:
        if self.head_done:  # (not the end of a 1xx interim answer)
            self.complete, self.busy = True, False

    def eof_received(self) -> bool:
        self._ended()  # the replica closed its side: nothing more will come
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        self._ended()

    def _ended(self) -> None:
        self.lost = True
        if self.busy and self.head_done and _ends_at_close(self.headers):
            self.complete, self.busy = True, False
        self._wake()

    def _wake(self) -> None:
        w = self.waiter
        if w is not None and not w.done():
            w.set_result(None)

    async def more(self) -> None:
        """Wait until bytes arrive or the connection ends; UpstreamLost if it broke."""
        if self.error is not None:
            raise self.error
        if self.lost:
            raise UpstreamLost("the replica closed the connection")
        self.waiter = self.loop.create_future()
        try:
            await self.waiter
        finally:
            self.waiter = None

    def take(self) -> bytes:
        """The body bytes buffered, taken (reads resume if they were paused)."""
        out = b"".join(self.body)
        self.body.clear()
        self.buffered = 0
        if self.paused and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()
        return out

    def unsent(self) -> bool:
        """Whether the connection ended with no byte of the answer come and part of the
        request never sent (NOTE(unsent))."""
        return self.lost and self.writing and self.head_bytes == 0 and self.error is None

    def quiet(self) -> bool:
        """Whether the idle socket has nothing to read: no close, reset or stray bytes waiting
        that the loop has not read yet (NOTE(idle))."""
        sock = self.transport.get_extra_info("socket") if self.transport is not None else None
        if sock is None:
            return True
        poller = select.poll()  # (select.select cannot watch descriptors past 1023)
        poller.register(sock.fileno(), select.POLLIN)
        return not poller.poll(0)

    def reusable(self) -> bool:
        return (self.complete and self.keep_alive and not self.lost and not self.stray
                and not self.body)

    def close(self) -> None:
        self.lost = True
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        self.lost = True
        if self.transport is not None:
            self.transport.abort()


def _ends_at_close(headers: CIMultiDict) -> bool:
    """Whether an answer's body is delimited by the close: neither a length nor chunked
    (RFC 9112 section 6.3); otherwise a close before its end broke it off."""
    return ("Content-Length" not in headers
            and "chunked" not in headers.get("Transfer-Encoding", "").lower())


class Upstream:
    """A replica's answer: ``status``, ``headers``, then its body (module docstring)."""

    def __init__(self, pool: UpstreamPool, base: str, conn: _Conn) -> None:
        self.pool, self.base, self.conn = pool, base, conn
        self.status, self.headers = conn.status, conn.headers

    async def __aenter__(self) -> Upstream:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if exc_info[0] is None and self.conn.reusable():
            self.pool.idle.put(self.base, self.conn)
        else:
            self.conn.close()

    async def read(self) -> bytes:
        parts = []
        while chunk := await self.readany():
            parts.append(chunk)
        return b"".join(parts)

    async def readany(self) -> bytes:
        """The body bytes there are now (waiting for some); b"" at the end of the body."""
        c = self.conn
        while True:
            if c.body:
                return c.take()
            if c.complete:
                return b""
            await c.more()


@lru_cache(maxsize=4096)  # bounded: replicas come and go (idle_pool.py NOTE(sweep))
def _target(base: str) -> tuple[str, int, str, bool]:
    """(host, port, Host header, TLS) of a replica base URL."""
    parts = urlsplit(base)
    tls, host = parts.scheme == "https", parts.hostname or ""
    return host, parts.port or (443 if tls else 80), parts.netloc.rpartition("@")[2], tls


def _request_bytes(method: str, target: str, host: str, headers: Sequence[tuple[str, str]],
                   body: bytes) -> bytes:
    fields = "".join([f"{k}: {v}\r\n" for k, v in headers])
    if fields.count("\n") != len(headers) or fields.count("\r") != len(headers) \
            or "\r" in target or "\n" in target:  # a CR or LF inside would split a header
        raise ValueError("a header or the request target holds a line break")
    length = f"Content-Length: {len(body)}\r\n" if body or method not in _NO_BODY_METHODS else ""
    head = f"{method} {target} HTTP/1.1\r\nHost: {host}\r\n{length}{fields}\r\n"
    return head.encode("utf-8", "surrogateescape") + body


class UpstreamPool:
    """Keep-alive connections per replica base URL (module docstring)."""

    def __init__(self, *, connect_timeout: float, keepalive: float) -> None:
        self.connect_timeout = connect_timeout
        self.idle = IdlePool(keepalive)  # the pooled connections (idle_pool.py NOTE(sweep))
        self._tls: ssl.SSLContext | None = None  # the system's CAs, made when first needed
        self.shortage = Shortage("request(s)")  # connect_errors.py NOTE(local-exhaustion)

    async def request(self, base: str, method: str, target: str,
                      headers: Sequence[tuple[str, str]], body: bytes,
                      on_data: Callable[[], None] | None = None,
                      on_sent: Callable[[], None] = lambda: None,
                      tls: ssl.SSLContext | None = None) -> Upstream:
        host, port, host_header, https = _target(base)
        if https and tls is None:  # the system's CAs (replica_tls.py NOTE(replica-ca))
            tls = self._tls = self._tls or ssl.create_default_context()
        data = _request_bytes(method, target, host_header, headers, body)
        calls = (on_data, on_sent)
        conn = self.idle.take(base)
        if conn is not None:
            try:
                return await self._send(base, conn, method, data, calls)
            except UpstreamLost:
                if not conn.unsent():  # NOTE(unsent): the replica may have the request
                    raise
                conn.abort()  # the rest of the request is dropped, never sent after all
        conn = await self._connect(host, port, tls if https else None)
        return await self._send(base, conn, method, data, calls)

    async def _send(self, base: str, conn: _Conn, method: str, data: bytes,
                    calls: tuple[Callable[[], None] | None, Callable[[], None]]) -> Upstream:
        """``data`` written on ``conn``; its answer's head read (``calls``: NOTE(on-data))."""
        try:
            assert conn.transport is not None
            conn.start(method)
            conn.on_data = calls[0]
            conn.transport.write(data)
            calls[1]()
            while not conn.head_done:
                await conn.more()
        except BaseException:
            conn.close()  # a cancel or a timeout here ends the request on the replica too
            raise
        return Upstream(self, base, conn)

    async def _connect(self, host: str, port: int, tls: ssl.SSLContext | None) -> _Conn:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, conn = await loop.create_connection(
                    lambda: _Conn(loop), host, port, ssl=tls,
                    server_hostname=host if tls is not None else None)
        except (OSError, TimeoutError) as exc:
            raise connect_failed(exc, host, port, tls is not None, self.connect_timeout,
                                 self.shortage) from exc
        return conn

    def close(self) -> None:
        self.idle.close()
