"""The HTTP connection edge: a cap on open connections, a header-read timeout, JSON errors.

aiohttp closes idle keep-alive connections after ``keepalive_timeout`` (it arms that timer when
a connection opens too, and it also fires while a request head is still arriving), but it has
no cap on connections, no separate bound on how long the *first* request head may take, and it
answers its own parser errors (oversized header or URL) in plain text with an ERROR traceback.
This module adds those, without touching aiohttp's internals::

    accept -> GuardedRequestHandler.connection_made
                 open >= max_connections?  -> 503 JSON + close
                                              (rejected{reason="max_connections"})
                 else arm header timer (header_timeout)
              data_received: first "\\r\\n\\r\\n" seen -> disarm the header timer
              header timer fires first             -> close      (rejected{reason="header_timeout"})
              later request heads / idle time      -> aiohttp's keepalive_timeout closes
              send_buffer set? -> SO_SNDBUF on the accepted socket (NOTE(sndbuf))
    HTTPS: accept -> TLSGate (tls_gate.py) takes the slot, closes past the cap, does the
           handshake, then hands the slot and the TLS transport to the handler above
              handle_error: client faults -> OpenAI error JSON, one INFO line, no traceback;
                            client gone (ConnectionError) -> nothing to answer, no log

``ConnectionLimiter`` owns the counters (``kvpool_http_connections``,
``kvpool_http_connections_rejected_total{reason}``) and the rate-limited WARNING.
Everything here runs on the event loop thread only.
"""

from __future__ import annotations

import asyncio
import json
import logging
import resource
import socket
import time
from collections.abc import Callable, Sequence
from ssl import SSLContext
from typing import Any

from aiohttp import web
from aiohttp.web_protocol import RequestHandler

from kvpool.server.bind_first import Listeners
from kvpool.server.json_body import DEFAULT_BODY_TIMEOUT
from kvpool.server.middleware import error_body, error_type, http_error_code
from kvpool.server.tls_gate import TLSGate
from kvpool.throttle import Throttle

__all__ = ["DEFAULT_HEADER_TIMEOUT", "DEFAULT_KEEP_ALIVE_TIMEOUT",
           "DEFAULT_STREAM_WRITE_TIMEOUT", "MIN_SEND_BUFFER", "bounded_write",
           "ConnectionLimiter", "GuardedRequestHandler", "add_client_timeout_args",
           "default_max_connections",
           "set_send_buffer", "start_listener"]

log = logging.getLogger("kvpool.server")

DEFAULT_HEADER_TIMEOUT = 10.0  # seconds for a new connection to send its first request head
DEFAULT_KEEP_ALIVE_TIMEOUT = 15.0  # seconds an idle keep-alive connection stays open
# seconds one SSE write may wait for a client to read (the server's handlers and the router)
DEFAULT_STREAM_WRITE_TIMEOUT = 30.0
FD_RESERVE = 64  # fds kept free for model files, logs, the listener, redis, the copy worker
WARN_INTERVAL = 10.0  # seconds between two "connection cap reached" WARNING lines
CAP_REACHED = ("connection cap reached: %(open)d open (--max-connections %(cap)d); refused "
               "%(n)d new connection(s) (503; over HTTPS closed before the handshake) since "
               "the last report")
HEAD_END = b"\r\n\r\n"
MIN_SEND_BUFFER = 4096  # bytes: below a page Linux rounds up anyway (SOCK_MIN_SNDBUF)
REJECT_LINGER = 0.5  # seconds a refused connection stays half-closed (bounded fd cost)

_REJECT_BODY = json.dumps(error_body(
    "too many open connections; retry later", "server_error", None,
    "too_many_connections")).encode()
# Written straight to the transport: the connection never reaches aiohttp's parser.
REJECT_RESPONSE = (b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                   b"Retry-After: 1\r\nConnection: close\r\nContent-Length: "
                   + str(len(_REJECT_BODY)).encode() + b"\r\n\r\n" + _REJECT_BODY)


def default_max_connections(reserve: int = FD_RESERVE) -> int:
    """RLIMIT_NOFILE's soft limit minus ``reserve`` (at least 16): past the fd limit accept()
    fails with EMFILE and *every* client is locked out; below it we can still answer 503."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        soft = 65536
    return max(16, int(soft) - reserve)



async def bounded_write(request: web.Request, resp: web.StreamResponse, data: bytes,
                        timeout: float) -> None:
    """One stream write, bounded: a client that stopped reading for ``timeout`` seconds loses
    its connection (the server's SSE and the router's relay: handlers.py NOTE(slow-reader)).
    NOTE(write-cancel): ``asyncio.timeout``, not ``wait_for``: on Python 3.11 wait_for returns
    the write's result when the handler is cancelled in the step the write finished (CPython
    gh-86296), and that cancel was aiohttp's for a client gone: the handler read on for
    nobody (the router's in-flight count and upstream held, the replica's request running)
    until its next write failed."""
    try:
        async with asyncio.timeout(timeout):
            await resp.write(data)
    except TimeoutError:
        log.warning("stream client stopped reading for %.1fs; closing its connection", timeout)
        if request.transport is not None:
            request.transport.abort()  # drop the unread buffer; a close would wait for it
        # NOTE(exit): the exit aiohttp itself takes for a client that disconnected
        # (handler_cancellation): no 500 attempt on a dead socket, no traceback logged.
        raise asyncio.CancelledError("stream write timed out") from None

class ConnectionLimiter:
    """Open-connection count, cap and rejection counters.

    Invariant: ``0 <= open <= max_connections`` and ``open`` equals admitted minus released
    connections; ``rejected[reason]`` only grows.
    """

    def __init__(self, max_connections: int, *, warn_interval: float = WARN_INTERVAL,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if max_connections < 1:
            raise ValueError(f"max_connections={max_connections!r}: use a positive count")
        self.max_connections = max_connections
        self.open = 0  # owned by the event loop thread
        self.rejected: dict[str, int] = {"max_connections": 0, "header_timeout": 0}
        self._warn = Throttle(warn_interval, clock)
        # NOTE(said-counts) in kvpool/throttle.py: the refusals after the last WARNING are said
        # an interval later or at the app's cleanup (``flush_at_cleanup``), never left unsaid
        self._said = self._warn.tally("", log, CAP_REACHED)

    def admit(self) -> bool:
        """Count a new connection in, or count it rejected (False) when the cap is reached."""
        if self.open >= self.max_connections:
            self.reject("max_connections")
            return False
        self.open += 1
        return True

    def release(self) -> None:
        if self.open <= 0:
            raise RuntimeError("ConnectionLimiter.release without a matching admit")
        self.open -= 1

    def reject(self, reason: str) -> None:
        self.rejected[reason] = self.rejected.get(reason, 0) + 1
        if reason != "max_connections":
            return  # slow clients are counted, not logged: an attacker must not fill the log
        self._said.add(open=self.open, cap=self.max_connections)

    def flush_at_cleanup(self, app: web.Application) -> None:
        """Say the refusals not yet said when ``app`` (not yet set up) is cleaned up."""
        async def say(_: web.Application) -> None:
            self._said.flush()
        app.on_cleanup.append(say)

    def check_invariants(self) -> None:
        assert 0 <= self.open <= self.max_connections, (self.open, self.max_connections)
        assert all(v >= 0 for v in self.rejected.values()), self.rejected

    def families(self) -> list[tuple[str, str, str, tuple[str, ...], list]]:
        """For KVPoolMetrics.add_source."""
        return [
            ("kvpool_http_connections", "gauge", "Open HTTP connections.", (),
             [((), float(self.open))]),
            ("kvpool_http_connections_rejected_total", "counter",
             "HTTP connections the server refused or closed early, by reason.", ("reason",),
             [((r,), float(n)) for r, n in sorted(self.rejected.items())]),
        ]


class GuardedRequestHandler(RequestHandler):
    """aiohttp's per-connection protocol with the cap, the header timeout and JSON errors;
    request bodies as they came, a compressed one decoded by the reader off the loop
    (``bodies_encoded``: NOTE(inflate) in body_coding.py)."""

    bodies_encoded = True

    def __init__(self, manager: web.Server, *, limiter: ConnectionLimiter,
                 header_timeout: float, send_buffer: int | None = None,
                 **kwargs: Any) -> None:
        super().__init__(manager, auto_decompress=False, **kwargs)
        self._guard_send_buffer = send_buffer
        self._guard_limiter = limiter
        self._guard_header_timeout = header_timeout
        self._guard_admitted = False
        self._guard_head_seen = False
        self._guard_tail = b""  # the last bytes seen, so a head end split across reads counts
        self._guard_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if not self._guard_limiter.admit():
            # NOTE(cap): answer before aiohttp sees the socket, so it never counts or parses it
            # and half-close, then close a moment later: closing a socket with the client's
            # request still unread sends a TCP reset that can destroy the 503 in flight
            tr: Any = transport
            tr.write(REJECT_RESPONSE)
            if tr.can_write_eof():
                tr.write_eof()
            asyncio.get_running_loop().call_later(REJECT_LINGER, tr.close)
            return
        self._guard_admitted = True
        if self._guard_send_buffer is not None:
            set_send_buffer(transport, self._guard_send_buffer)
        super().connection_made(transport)
        if self._guard_header_timeout > 0:
            self._guard_timer = asyncio.get_running_loop().call_later(
                self._guard_header_timeout, self._guard_head_late)

    def data_received(self, data: bytes) -> None:
        if not self._guard_admitted:
            return
        if not self._guard_head_seen:
            seen = self._guard_tail + data
            if HEAD_END in seen:
                self._guard_head_seen = True
                self._guard_cancel_timer()
            else:
                self._guard_tail = seen[-(len(HEAD_END) - 1):]
        super().data_received(data)

    def connection_lost(self, exc: BaseException | None) -> None:
        if not self._guard_admitted:
            return
        self._guard_admitted = False
        self._guard_cancel_timer()
        self._guard_limiter.release()
        super().connection_lost(exc)

    def _guard_cancel_timer(self) -> None:
        if self._guard_timer is not None:
            self._guard_timer.cancel()
            self._guard_timer = None

    def _guard_head_late(self) -> None:
        self._guard_timer = None
        if self._guard_admitted and not self._guard_head_seen:
            self._guard_limiter.reject("header_timeout")
            self.force_close()

    def log_exception(self, *args: Any, **kw: Any) -> None:
        """aiohttp's request loop logs ``Unhandled exception`` with a traceback for a client
        gone mid-response and, after our 400, again for the unreadable body it drains."""
        exc = kw.get("exc_info")
        if isinstance(exc, ConnectionError):
            log.debug("client disconnected: %s", exc)
            return
        if isinstance(exc, web.RequestPayloadError):
            log.info("unreadable request body from %s: %s", self._guard_peer(),
                     " ".join(str(exc).split()))
            return
        super().log_exception(*args, **kw)

    def _guard_peer(self) -> str:
        peer = self.transport.get_extra_info("peername") if self.transport is not None else None
        return f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else "?"

    def handle_error(self, request: Any, status: int = 500, exc: BaseException | None = None,
                     message: str | None = None) -> web.StreamResponse:
        """Errors that never reached the app's middleware: parser 400s, a client gone while its
        response started. Client faults are one INFO line and OpenAI JSON; never a traceback."""
        if isinstance(exc, ConnectionError):
            # NOTE(reset): re-raised, aiohttp's request loop drops the connection quietly
            raise exc
        if status >= 500:
            log.error("unhandled error in the HTTP layer (%s)", type(exc).__name__,
                      exc_info=exc)
            text = "internal server error"
        else:
            text = (message or (str(exc) if exc is not None else "") or "bad request").strip()
            log.info("bad request from %s: %d %s", request.remote, status, text[:200])
        if request.writer.output_size > 0:
            raise ConnectionError("a response was already started; closing the connection")
        resp = web.json_response(error_body(text, error_type(status), None,
                                            http_error_code(status)), status=status)
        resp.force_close()
        return resp


def set_send_buffer(transport: asyncio.BaseTransport, size: int) -> None:
    """NOTE(sndbuf): Linux autotunes a socket's send buffer up to net.ipv4.tcp_wmem's max
    (~4 MB), kernel memory a client pins by never reading, and enough to swallow a whole SSE
    stream, so the stream write timeout never fires. A fixed SO_SNDBUF turns the autotuning
    off (Linux doubles the value for its bookkeeping)."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, size)


# NOTE(linger): after answering a request whose body it did not read whole (a 408 for a body
# trickled past --body-timeout, a 413), aiohttp reads and drops what still comes for this
# long, then closes. Its default, 10 s, let a client trickling bodies hold each connection
# 10 s past its 408; 2 s still lets a client at line rate finish sending and read the answer.
LINGER = 2.0


async def start_listener(runner: web.AppRunner, host: str, port: int, *,
                         limiter: ConnectionLimiter,
                         header_timeout: float = DEFAULT_HEADER_TIMEOUT,
                         keep_alive_timeout: float = DEFAULT_KEEP_ALIVE_TIMEOUT,
                         access_log: logging.Logger | None = None,
                         backlog: int = 1024, send_buffer: int | None = None,
                         ssl: SSLContext | None = None,
                         socks: Sequence[socket.socket] = ()) -> asyncio.AbstractServer:
    """Listen on ``host:port`` with guarded handlers for ``runner``'s app (after setup), or on
    ``socks`` when given (bound before the model loaded: bind_first.py NOTE(bind-first)).

    Replaces ``web.TCPSite``: the caller closes the returned server before
    ``runner.cleanup()``. ``keep_alive_timeout`` <= 0 keeps aiohttp's idle timer off.
    ``send_buffer``: SO_SNDBUF bytes for each accepted socket (None: the OS's autotuning).
    ``ssl``: serve HTTPS (tls.py): each connection counts against the cap from its accept,
    its TLS handshake bounded by ``header_timeout`` too (asyncio's 60 s when that is off), in
    tls_gate.py (NOTE(tls-cap))."""
    if send_buffer is not None and send_buffer < MIN_SEND_BUFFER:
        raise ValueError(f"send_buffer={send_buffer!r}: use bytes >= {MIN_SEND_BUFFER} "
                         "(or None for the OS's default)")
    server = runner.server
    if server is None:
        raise RuntimeError("call runner.setup() before start_listener")
    loop = asyncio.get_running_loop()
    kwargs: dict[str, Any] = {"loop": loop, "keepalive_timeout": keep_alive_timeout,
                              "lingering_time": LINGER, "access_log": access_log}

    def factory() -> GuardedRequestHandler:
        return GuardedRequestHandler(server, limiter=limiter, header_timeout=header_timeout,
                                     send_buffer=send_buffer, **kwargs)

    def gate() -> TLSGate:  # NOTE(tls-cap): the slot is taken at accept, before the handshake
        return TLSGate(factory, limiter=limiter, context=ssl,
                       handshake_timeout=header_timeout if header_timeout > 0 else None)

    protocol = factory if ssl is None else gate
    if not socks:
        return await loop.create_server(protocol, host, port, backlog=backlog)
    servers = [await loop.create_server(protocol, sock=s, backlog=backlog) for s in socks]
    return servers[0] if len(servers) == 1 else Listeners(servers)


def add_client_timeout_args(p: Any) -> None:
    """``--header-timeout`` and ``--body-timeout`` on ``p`` (an argparse parser or group):
    kvpool serve's and kvpool router's, one definition."""
    p.add_argument("--header-timeout", type=float, default=DEFAULT_HEADER_TIMEOUT,
                   metavar="SECONDS", help="close a new connection that has not sent a "
                   "complete request head within SECONDS (0: off)")
    p.add_argument("--body-timeout", type=float, default=DEFAULT_BODY_TIMEOUT,
                   metavar="SECONDS", help="answer 408 and close a connection whose request "
                   "body has not fully arrived within SECONDS of its handler's start (a "
                   "client trickling it holds nothing longer; raise it for large bodies over "
                   "slow links; 0: off)")
