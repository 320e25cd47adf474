"""The picker's listening socket: its connections (kvpool.epp.h2) and the limits they share.

NOTE(preface-timeout): a connection whose client preface has not come within
``preface_timeout`` seconds is closed: silent connections would otherwise hold a descriptor
each for ever (20k of them left none for Envoy's own connections).
"""

from __future__ import annotations

import asyncio

from kvpool.epp.calls import Handler
from kvpool.epp.h2 import Connection

__all__ = ["PREFACE_TIMEOUT", "Server"]

PREFACE_TIMEOUT = 10.0  # NOTE(preface-timeout)


class Server:
    """Listens on ``host:port``; each connection's streams run ``handler``."""

    def __init__(self, handler: Handler, max_message: int,
                 preface_timeout: float = PREFACE_TIMEOUT) -> None:
        self.handler, self.max_message = handler, max_message
        self.preface_timeout = preface_timeout
        self.connections: set[Connection] = set()
        self.server: asyncio.AbstractServer | None = None

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
