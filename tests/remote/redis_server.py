"""A real redis-server on 127.0.0.1 for tests and benchmarks, started and stopped by pid.

``RedisServer(port)`` runs ``/usr/bin/redis-server`` with no persistence and an LRU memory
bound (the production shape). ``kill()`` (SIGKILL), ``pause()``/``resume()`` (SIGSTOP/SIGCONT)
and ``start()`` again on the same port drive the fault tests.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def ping(port: int, timeout: float = 0.2) -> bool:
    """A raw RESP PING (no client library, so no retry or pool gets in the way)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.settimeout(timeout)
            s.sendall(b"*1\r\n$4\r\nPING\r\n")
            return s.recv(16).startswith(b"+PONG")
    except OSError:
        return False


class RedisServer:
    def __init__(self, port: int | None = None, maxmemory: str = "256mb") -> None:
        self.port = port or free_port()
        self.maxmemory = maxmemory
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen | None = None
        self._dir = tempfile.mkdtemp(prefix="kvpool-redis-")

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def start(self, wait_s: float = 10.0) -> None:
        assert self.proc is None, "already running"
        self.proc = subprocess.Popen(
            [REDIS_SERVER, "--save", "", "--appendonly", "no", "--maxmemory", self.maxmemory,
             "--maxmemory-policy", "allkeys-lru", "--port", str(self.port),
             "--bind", "127.0.0.1", "--dir", self._dir, "--daemonize", "no",
             "--loglevel", "warning"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + wait_s
        while not ping(self.port):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"redis-server did not answer PING on port {self.port}")
            time.sleep(0.02)

    def kill(self) -> None:
        """SIGKILL and reap (a crash: no shutdown, the data is gone)."""
        if self.proc is not None:
            os.kill(self.proc.pid, signal.SIGCONT)  # a stopped process must die too
            self.proc.kill()
            self.proc.wait(10)
            self.proc = None

    def pause(self) -> None:
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self) -> None:
        os.kill(self.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        if self.proc is not None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
            self.proc = None
        shutil.rmtree(self._dir, ignore_errors=True)
