"""The HTTPS listener's per-connection gate: the connection cap counts a TLS connection from
its TCP accept, not from the end of its handshake.

NOTE(tls-cap): with ``ssl=`` on ``loop.create_server``, asyncio and uvloop call the app
protocol's ``connection_made`` (GuardedRequestHandler, which asks the ConnectionLimiter) only
once the TLS handshake has finished. A client that opened TCP connections and never finished a
handshake held a file descriptor each, for up to the handshake timeout, that no
--max-connections cap saw: enough of them exhausted the fd limit, and every new client then
failed its handshake with an EOF instead of the cap's 503. So the listener accepts plain TCP
and :class:`TLSGate` takes the connection's slot at accept::

    accept -> TLSGate.connection_made
                 open >= max_connections?  -> close at once, before any TLS byte
                                              (rejected{reason="max_connections"}, the WARNING)
                 else loop.start_tls(server_side, handshake timeout = --header-timeout)
                      fails / times out / peer gone -> slot released, socket closed
                      done -> the slot passes to a GuardedRequestHandler on the TLS transport

Past the cap a 503 cannot be sent: it needs a finished handshake, and finishing handshakes for
the connections we refuse would spend the very descriptors and time the cap protects. So the
client sees its handshake fail at once (EOF, or a reset when its ClientHello was already
unread in our socket), never a hang; docs/architecture.md ("vLLM's serve flags", TLS row).

``start_tls`` hands the app protocol (the gate) decrypted bytes as soon as the handshake ends,
which on asyncio is before ``start_tls`` returns the TLS transport to us (uvloop schedules them
after): a request sent with the client's Finished is kept and replayed to the handler.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from ssl import SSLContext
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvpool.server.connections import ConnectionLimiter

__all__ = ["TLSGate"]

log = logging.getLogger("kvpool.server")


class TLSGate(asyncio.Protocol):
    """One accepted connection of an HTTPS listener until its handshake is done (then the
    handler ``make_handler`` builds owns it). Holds one limiter slot from accept until the
    handshake fails or the handler takes the slot; released exactly once either way."""

    def __init__(self, make_handler: Callable[[], asyncio.Protocol], *,
                 limiter: ConnectionLimiter, context: SSLContext,
                 handshake_timeout: float | None) -> None:
        self.make_handler = make_handler
        self.limiter = limiter
        self.context = context
        self.handshake_timeout = handshake_timeout
        self.early: list[bytes] = []  # decrypted before the handler took over (asyncio)
        self.eof = False
        self.task: asyncio.Task[None] | None = None  # the upgrade; referenced while it runs

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        if not self.limiter.admit():  # counts rejected{reason="max_connections"}, may WARN
            transport.close()
            return
        # no byte until start_tls takes the socket: the ClientHello is the SSL layer's to read
        transport.pause_reading()  # type: ignore[attr-defined]
        self.task = asyncio.get_running_loop().create_task(self.upgrade(transport))

    async def upgrade(self, transport: asyncio.BaseTransport) -> None:
        held = True  # this gate's slot, until released or passed to the handler
        try:
            tls = await asyncio.get_running_loop().start_tls(
                transport, self, self.context, server_side=True,  # type: ignore[arg-type]
                ssl_handshake_timeout=self.handshake_timeout)
            # the peer may have gone between the handshake's end and this step (asyncio then
            # returns None, uvloop a closed transport): nobody to hand over to
            if tls is not None and not tls.is_closing():
                held = False
                self.hand_over(tls)
        except OSError as exc:  # SSLError, reset, EOF, the handshake timeout (aborted)
            log.debug("TLS handshake from %s failed: %s",
                      transport.get_extra_info("peername"), exc)
        finally:
            self.task = None
            if held:
                self.limiter.release()

    def hand_over(self, tls: asyncio.Transport) -> None:
        """The handler takes this gate's slot (released here and re-admitted by its
        connection_made in one step of the loop thread, so no other connection can take it
        between; it releases it on connection_lost) and the TLS transport."""
        self.limiter.release()
        handler = self.make_handler()
        tls.set_protocol(handler)
        handler.connection_made(tls)
        for data in self.early:
            handler.data_received(data)  # type: ignore[attr-defined]
        self.early = []
        if self.eof:
            handler.eof_received()  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        self.early.append(data)

    def eof_received(self) -> None:
        self.eof = True
