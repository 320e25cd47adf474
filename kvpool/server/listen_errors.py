"""A port a server cannot listen on, said in one line that names the address and the flag to
change instead of a traceback: ``kvpool serve`` and ``kvpool router`` raise it as a
ConfigError, which their ``main`` prints on stderr and exits 2 with, as their other startup
errors (a port in use was an OSError traceback from the event loop, exit 1)."""

from __future__ import annotations

import errno
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from kvpool.errors import ConfigError

if TYPE_CHECKING:
    from kvpool.events.publisher import EventPublisher

__all__ = ["listening", "require_own_port"]

# the port is the problem (another process has it, or it needs privileges); else the host is
_PORT_ERRORS = (errno.EADDRINUSE, errno.EACCES)


@contextmanager
def listening(host: str, port: int) -> Iterator[None]:
    """Around the bind of ``host:port``: an OSError becomes a ConfigError naming both."""
    try:
        yield
    except OSError as exc:
        code = exc.errno if isinstance(exc.errno, int) else 0
        why = os.strerror(code) if code > 0 else (exc.strerror or str(exc))
        fix = ("give --port a free port (0: any free)" if code in _PORT_ERRORS
               else "check --host and --port")
        raise ConfigError(f"--port {port}: cannot listen on {host}:{port} ({why}); {fix}"
                          ) from exc


def require_own_port(host: str, port: int, publisher: EventPublisher | None) -> None:
    """A KV events socket bound to the HTTP ``port`` (the HTTP listener could not have it),
    or a publisher dialing this server's own HTTP listener (``host:port``, or a loopback
    address there: it would greet the HTTP server with ZMTP bytes, a "bad request" logged
    five times a second, forever) stops the start here, the publisher closed."""
    if publisher is None or port == 0:
        return
    own = {f"tcp://{h}:{port}" for h in (host, "127.0.0.1", "localhost", "[::1]")}
    if publisher.mode != "bind" and publisher.endpoint in own:
        publisher.close()
        raise ConfigError(f"--kv-events-config: {publisher.endpoint} is this server's own HTTP "
                          "port; give the endpoint the subscriber's address (or tcp://*:PORT "
                          "to bind one)")
    for endpoint in (publisher.endpoint if publisher.mode == "bind" else None,
                     publisher.replay_endpoint):
        if endpoint and endpoint.startswith("tcp://") and endpoint.endswith(f":{port}"):
            publisher.close()
            raise ConfigError(f"--kv-events-config: {endpoint} takes the HTTP port {port}; "
                              "give --port or that endpoint another port")
