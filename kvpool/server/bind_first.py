"""The HTTP port taken before the model loads (``kvpool serve``).

NOTE(bind-first): the listener used to bind after the engine was built, so a port in use was
found only once the weights were loaded and the KV cache allocated (minutes, and GPU memory, for
a real checkpoint). vLLM binds first (its launcher's ``create_server_socket``, "bind the port
before the engine is set up"); so does ``kvpool serve`` now: ``bind_first`` binds every address
``--host`` resolves to, as asyncio's ``create_server`` would (SO_REUSEADDR, IPv6 sockets
IPv6-only), and ``start_listener`` serves on those sockets once the app is ready. As in vLLM the
sockets are bound, not listening, while the model loads: a client then is refused at once
instead of waiting in a backlog nothing accepts from, and a port another server listens on
fails the bind.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Sequence
from typing import TypeVar

from kvpool.server.listen_errors import listening

__all__ = ["Bound", "Listeners", "bind_first", "build_on", "release", "stop_listening"]

Bound = list[socket.socket]  # the sockets bind_first bound, not listening yet
T = TypeVar("T")


def build_on(host: str, port: int, build: Callable[[], T]) -> tuple[Bound, T]:
    """``host:port`` bound, then ``build()`` (the engine: minutes for a real checkpoint) run
    with the port held; the sockets closed if it fails (NOTE(bind-first))."""
    socks = bind_first(host, port)
    try:
        return socks, build()
    except BaseException:
        release(socks)
        raise


def bind_first(host: str, port: int) -> Bound:
    """Sockets bound to every address of ``host:port`` (a ConfigError naming both if one
    cannot be: listen_errors.py)."""
    socks: Bound = []
    with listening(host, port):
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
        try:
            for family, kind, proto, _, addr in dict.fromkeys(infos):
                sock = socket.socket(family, kind, proto)
                socks.append(sock)
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
                sock.bind(addr)
        except BaseException:
            release(socks)
            raise
    return socks


def release(socks: Sequence[socket.socket]) -> None:
    """Close sockets no listener took (the start failed before serving)."""
    for sock in socks:
        sock.close()


def stop_listening(listener: asyncio.AbstractServer | None, socks: Bound) -> None:
    """Close ``listener``, or, when the start failed before one served on ``socks``, them (a
    listener owns its sockets: closing them under it would close an fd it still uses)."""
    if listener is not None:
        listener.close()
    else:
        release(socks)


class Listeners(asyncio.AbstractServer):
    """The servers of a host that resolves to several addresses, closed as one."""

    def __init__(self, servers: Sequence[asyncio.AbstractServer]) -> None:
        self.servers = tuple(servers)

    @property
    def sockets(self) -> tuple:
        return tuple(s for server in self.servers for s in server.sockets)

    def close(self) -> None:
        for server in self.servers:
            server.close()

    def is_serving(self) -> bool:
        return any(server.is_serving() for server in self.servers)

    async def wait_closed(self) -> None:
        for server in self.servers:
            await server.wait_closed()
