"""bench/redis_ports.py NOTE(dead-port): a port ``dead_port()`` holds refuses connections, is
never drawn by bind(0) elsewhere, and no server can bind it, for as long as it is held; then
it is free again. Real sockets on 127.0.0.1."""

from __future__ import annotations

import errno
import socket

import pytest

from bench.redis_ports import dead_port


def _draw(reuse: bool) -> int:
    """bind(0) as free_port() does, or as a server's listener (SO_REUSEADDR) would."""
    with socket.socket() as s:
        if reuse:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_held_dead_port_refuses_and_is_not_handed_out():
    with dead_port() as port:
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", port), timeout=2.0).close()
        assert port not in {_draw(reuse=i % 2 == 1) for i in range(400)}
        with socket.socket() as s:  # a server told this very port cannot have it either
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            with pytest.raises(OSError) as taken:
                s.bind(("127.0.0.1", port))
            assert taken.value.errno == errno.EADDRINUSE
    with socket.socket() as s:  # let go at the end of the block
        s.bind(("127.0.0.1", port))
