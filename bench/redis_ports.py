"""Ports on 127.0.0.1 for the servers bench/redis_servers.py starts, and who answers on one.

``free_port()`` names a port free now (and lets it go); ``reserve_port()`` holds one until its
server listens (NOTE(port-hold)); ``dead_port()`` one nothing may listen on (NOTE(dead-port));
``ping()`` says a Redis answers on a port, ``server_pid()``
which process it is (``PortTaken`` when it is another's).
"""

from __future__ import annotations

import re
import socket
import ssl
from collections.abc import Iterator
from contextlib import contextmanager


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# NOTE(port-hold): free_port() lets its port go at once, so the six picks of one cluster could
# name one port twice (33 groups of 6 in 20,000 here) and another process could pick it before
# the node bound it. That node's redis-server then failed to bind and exited, but its start()
# saw a PONG (the other server's) and the cluster was built without it: one master never got
# a replica, and the failover test's kill waited 30 s on "replicas ... at offsets [] of 0",
# the failure CI once showed (tests/remote/test_failover.py forces such a collision). So a
# harness-picked port is held until its server listens: a socket bound with SO_REUSEADDR that
# never listens keeps bind(0) anywhere from handing the port out, yet redis-server (which sets
# SO_REUSEADDR) still binds and listens there; and start() accepts only an answer that names
# its own process (INFO server's process_id), else PortTaken, and a cluster node moves on to
# another held port.
def reserve_port(cluster: bool = False) -> tuple[int, list[socket.socket]]:
    """A free port held for a server about to start (NOTE(port-hold)), with its cluster bus
    port (port + 10000) for a cluster node: the port, and the sockets to close once the
    server listens (``RedisServer(port, held=...)`` does)."""
    for _ in range(100):
        held = [_hold(0)]
        port = held[0].getsockname()[1]
        try:
            if cluster:
                held.append(_hold(port + 10000))  # OverflowError past 65535
            return port, held
        except (OSError, OverflowError):
            for s in held:
                s.close()
    raise RuntimeError("no free port pair for a cluster node")


def _hold(port: int) -> socket.socket:
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        s.bind(("127.0.0.1", port))
    except OSError:
        s.close()
        raise
    return s


# NOTE(dead-port): a test of "nothing listens there" (a refused connect, a replica whose master
# is gone) drew its port with free_port(), which lets it go at once: another xdist worker's
# server could bind it before the connect, and the test talked to a live stranger. A socket
# bound without SO_REUSEADDR that never listens holds it for the test's life: a connect there
# is refused (ECONNREFUSED, as at a closed port), bind(0) anywhere never hands it out, and an
# explicit bind fails even with SO_REUSEADDR (unlike reserve_port's, whose server binds after).
@contextmanager
def dead_port() -> Iterator[int]:
    """A port on 127.0.0.1 that refuses connections while the block runs (NOTE(dead-port))."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield s.getsockname()[1]


class PortTaken(RuntimeError):
    """Another process's server answers on the port a ``RedisServer`` was to listen on."""


def ping(port: int, timeout: float = 0.2, ca: str | None = None) -> bool:
    """A raw RESP PING (no client library, so no retry or pool gets in the way); over TLS
    trusting ``ca`` when given. An error reply (NOAUTH) is an answer too."""
    try:
        with _connect(port, timeout, ca) as s:
            s.sendall(b"*1\r\n$4\r\nPING\r\n")
            return s.recv(16).startswith((b"+PONG", b"-NOAUTH"))
    except OSError:
        return False


def _connect(port: int, timeout: float, ca: str | None) -> socket.socket:
    """A connection to the port, over TLS trusting ``ca`` when given."""
    raw = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s = raw if ca is None else ssl.create_default_context(cafile=ca).wrap_socket(
            raw, server_hostname="127.0.0.1")
    except OSError:
        raw.close()
        raise
    s.settimeout(timeout)
    return s


def server_pid(port: int, ca: str | None = None, password: str | None = None,
               timeout: float = 1.0) -> int | None:
    """The process id the server on ``port`` reports (INFO server, raw RESP as ``ping``, after
    AUTH when a password is given); None when nothing says one in time."""
    cmds = ([["AUTH", password]] if password else []) + [["INFO", "server"]]
    payload = b"".join(f"*{len(c)}\r\n".encode() + b"".join(
        f"${len(a.encode())}\r\n{a}\r\n".encode() for a in c) for c in cmds)
    said, found = b"", None
    try:
        with _connect(port, timeout, ca) as s:
            s.sendall(payload)
            while found is None and (chunk := s.recv(4096)):
                said += chunk
                found = re.search(rb"process_id:(\d+)\r\n", said)
    except OSError:  # refused, reset or timed out
        pass
    return int(found.group(1)) if found else None
