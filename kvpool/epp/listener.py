"""The picker's listening socket: its connections (kvpool.epp.h2) and the limits they share
(docs/epp.md).

Limits, each a constructor parameter (``kvpool epp`` flags in cli.py)::

    max_message            the largest gRPC message (its 5-byte length read, never its body,
                           past it: RESOURCE_EXHAUSTED)
    max_connection_bytes   DATA bytes one connection's open calls may hold: its flow-control
                           window (NOTE(buffer-cap) in h2.py); each stream's window is one
                           largest message, so this is at least that
    preface_timeout        seconds for a new connection's client preface (NOTE(preface-timeout))

NOTE(preface-timeout): a connection whose client preface has not come within
``preface_timeout`` seconds is closed: silent connections would otherwise hold a descriptor
each for ever (20k of them left none for Envoy's own connections).
"""

from __future__ import annotations

import asyncio

from kvpool.epp.calls import DEFAULT_WINDOW, ENVELOPE, MAX_WINDOW, Handler
from kvpool.epp.h2 import Connection

__all__ = ["DEFAULT_CONNECTION_BYTES", "PREFACE_TIMEOUT", "Server"]

PREFACE_TIMEOUT = 10.0  # NOTE(preface-timeout)
DEFAULT_CONNECTION_BYTES = 64 << 20  # NOTE(buffer-cap)


class Server:
    """Listens on ``host:port``; each connection's streams run ``handler``."""

    def __init__(self, handler: Handler, max_message: int, *,
                 max_connection_bytes: int = DEFAULT_CONNECTION_BYTES,
                 preface_timeout: float = PREFACE_TIMEOUT) -> None:
        # a stream's window: one largest message, never below HTTP/2's default (a peer may
        # send that much before it reads our SETTINGS)
        self.stream_window = max(max_message + ENVELOPE, DEFAULT_WINDOW)
        if not self.stream_window <= max_connection_bytes <= MAX_WINDOW:
            raise ValueError(f"max_connection_bytes={max_connection_bytes}: use at least "
                             f"{self.stream_window} (a largest message of {max_message} "
                             f"bytes and its envelope) and at most {MAX_WINDOW}")
        self.handler, self.max_message = handler, max_message
        self.max_connection_bytes = max_connection_bytes
        self.preface_timeout = preface_timeout
        self.connections: set[Connection] = set()
        self.server: asyncio.AbstractServer | None = None

    @property
    def buffered(self) -> int:
        """DATA bytes all open calls hold (NOTE(buffer-cap))."""
        return sum(c.buffered for c in self.connections)

    async def start(self, host: str, port: int) -> int:
        """The bound port."""
        self.server = await asyncio.get_running_loop().create_server(
            lambda: Connection(self.handler, self), host, port)
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
