"""The Redis tier's connection pool: kvpool's buffered connections, also under TLS.

``BlockingConnectionPool.from_url`` lets the URL's scheme pick the connection class:
``rediss://`` sets redis-py's plain ``SSLConnection`` over any ``connection_class`` passed in,
so a TLS tier lost the large read buffer (``READ_BUFFER``). :func:`pool_from_url` parses the
URL itself and swaps each scheme's class for its buffered twin, keeping every URL option
(password, db, ``ssl_ca_certs`` and the other query options).
"""

from __future__ import annotations

import functools
from typing import Any
from urllib.parse import urlparse

import redis.asyncio as aioredis
from redis.asyncio.connection import Connection, SSLConnection, parse_url
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from redis.driver_info import DriverInfo
from redis.exceptions import InvalidResponse

READ_BUFFER = 4 << 20  # StreamReader limit of a connection (bytes buffered before pausing)


class CheckedHandshake:
    """A connection whose handshake fails with ``InvalidResponse`` when the server answers it
    in RESP of the wrong shape.

    NOTE(handshake-reply): redis-py reads HELLO's reply as a map (``.get``); a server that
    answers every command ``+OK``, ``:7`` or an array (a port taken by another service, a
    proxy) made it raise a bare AttributeError. That escaped the tier's calls: ``kvpool
    serve`` exited at its warm-up, and the health check's task died with its breaker half
    open, so the tier never came back once Redis did. Only the handshake's errors of a reply's
    type are turned into "not Redis" (the ``protocol`` kind, as for bytes that are no RESP):
    nothing else runs in it, and a TypeError or AttributeError anywhere else stays a bug."""

    async def on_connect_check_health(self, check_health: bool = True) -> None:
        try:
            await super().on_connect_check_health(check_health)
        except (AttributeError, TypeError) as exc:  # redis-py disconnects it either way
            raise InvalidResponse(f"the handshake's reply is no Redis reply ({exc})") from exc


class BufferedConnection(CheckedHandshake, Connection):
    """A redis.asyncio connection whose StreamReader buffers up to ``READ_BUFFER`` bytes.

    NOTE(read-buffer): at asyncio's 64 KiB default a 1 MiB value pauses and resumes the
    socket a dozen times."""

    def _connection_arguments(self):  # redis-py's hook for asyncio.open_connection's kwargs
        return {**super()._connection_arguments(), "limit": READ_BUFFER}


class BufferedTLSConnection(BufferedConnection, SSLConnection):
    """The same buffer under TLS (``rediss://``): SSLConnection adds ``ssl=`` to the same
    arguments, BufferedConnection the ``limit``."""


_BUFFERED = {Connection: BufferedConnection, SSLConnection: BufferedTLSConnection}


def pool_from_url(url: str, *, max_connections: int, connect_timeout: float
                  ) -> aioredis.BlockingConnectionPool:
    """A blocking pool of buffered connections to ``url`` with the tier's fault settings.

    NOTE(pool): a blocking pool waits for a free connection inside the call's deadline
    instead of raising "Too many connections" (which would trip the breaker under load).
    socket_timeout=None: the per-call asyncio deadline is the bound, sized per call. No
    retries (the caller's answer to a failure, recompute, is already cheap)."""
    options: dict[str, Any] = dict(parse_url(url))
    cls = options.pop("connection_class", Connection)
    kwargs: dict[str, Any] = dict(
        max_connections=max_connections, timeout=None,
        socket_connect_timeout=connect_timeout, socket_timeout=None,
        retry=Retry(NoBackoff(), 0), retry_on_timeout=False, retry_on_error=[],
        health_check_interval=0, driver_info=driver_info())
    kwargs.update(options)  # as from_url: the URL's own options win
    return aioredis.BlockingConnectionPool(connection_class=_BUFFERED.get(cls, cls), **kwargs)


def where(url: str) -> str:
    """``scheme://host:port`` of ``url`` for log lines (every seed node of a cluster or
    sentinel URL, and the service): never its password or options."""
    p = urlparse(url)
    hosts = p.netloc.rpartition("@")[2]
    if "+" in p.scheme:
        return f"{p.scheme}://{hosts}{p.path if 'sentinel' in p.scheme else ''}"
    try:
        port = p.port
    except ValueError:
        port = None
    host = p.hostname or p.path or "?"
    return f"{p.scheme}://{host}" + (f":{port}" if port else "")


@functools.cache
def driver_info() -> DriverInfo:
    """One DriverInfo (CLIENT SETINFO's name and version) for every connection of the process.

    NOTE(connect-cost): without one, redis-py builds a DriverInfo in each Connection's
    __init__, and that looks redis's version up in the installed package metadata (a scan of
    sys.path, 0.3-0.8 ms here) on the event loop: a fetch that opens 16 pooled connections at
    once stalled the loop ~8 ms in one iteration. Resolved once, the lookup is paid once."""
    return DriverInfo()
