"""A real redis-server on 127.0.0.1 for tests and benchmarks, started and stopped by pid.

``RedisServer(port)`` runs ``/usr/bin/redis-server`` with no persistence and an LRU memory
bound (the production shape). ``kill()`` (SIGKILL), ``pause()``/``resume()`` (SIGSTOP/SIGCONT)
and ``start()`` again on the same port drive the fault tests. ``policy``, ``password``,
``tls`` (``tls_certs.TlsFiles``: the port speaks TLS only) and ``extra_args`` shape the
misconfigured servers of the diagnosis tests.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import ssl
import subprocess
import tempfile
import time

REDIS_SERVER = shutil.which("redis-server") or "/usr/bin/redis-server"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_cluster_port() -> int:
    """A free port whose cluster bus port (port + 10000) is free too (and exists)."""
    for _ in range(100):
        port = free_port()
        if port + 10000 > 65535:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port pair for a cluster node")


def ping(port: int, timeout: float = 0.2, ca: str | None = None) -> bool:
    """A raw RESP PING (no client library, so no retry or pool gets in the way); over TLS
    trusting ``ca`` when given. An error reply (NOAUTH) is an answer too."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as raw:
            s = raw if ca is None else ssl.create_default_context(cafile=ca).wrap_socket(
                raw, server_hostname="127.0.0.1")
            s.settimeout(timeout)
            s.sendall(b"*1\r\n$4\r\nPING\r\n")
            return s.recv(16).startswith((b"+PONG", b"-NOAUTH"))
    except OSError:
        return False


class RedisServer:
    def __init__(self, port: int | None = None, maxmemory: str = "256mb",
                 policy: str = "allkeys-lru", password: str | None = None, tls=None,
                 extra_args: tuple[str, ...] = ()) -> None:
        self.port = port or free_port()
        self.maxmemory = maxmemory
        self.policy = policy
        self.password = password
        self.tls = tls
        self.extra_args = tuple(extra_args)
        auth = f":{password}@" if password else ""
        self.url = (f"redis://{auth}127.0.0.1:{self.port}/0" if tls is None else
                    f"rediss://{auth}127.0.0.1:{self.port}/0?ssl_ca_certs={tls.ca}")
        self.proc: subprocess.Popen | None = None
        self._dir = tempfile.mkdtemp(prefix="kvpool-redis-")

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    def start(self, wait_s: float = 10.0) -> None:
        assert self.proc is None, "already running"
        self.proc = subprocess.Popen(
            [REDIS_SERVER, "--save", "", "--appendonly", "no", "--maxmemory", self.maxmemory,
             "--maxmemory-policy", self.policy, *self._listen_args(),
             "--bind", "127.0.0.1", "--dir", self._dir, "--daemonize", "no",
             "--loglevel", "warning", *self.extra_args],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + wait_s
        ca = None if self.tls is None else str(self.tls.ca)
        while not ping(self.port, ca=ca):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"redis-server did not answer PING on port {self.port}")
            time.sleep(0.02)

    def _listen_args(self) -> list[str]:
        out = ["--requirepass", self.password] if self.password else []
        if self.tls is None:
            return out + ["--port", str(self.port)]
        t = self.tls
        return out + ["--port", "0", "--tls-port", str(self.port), "--tls-cert-file", str(t.cert),
                      "--tls-key-file", str(t.key), "--tls-ca-cert-file", str(t.ca),
                      "--tls-auth-clients", "no"]

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
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.proc = None
        shutil.rmtree(self._dir, ignore_errors=True)
