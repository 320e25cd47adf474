"""The servers the HTTP mode (and the tests) run against, always on 127.0.0.1.

- :class:`SpawnedServer`: ``python -m kvpool.server.serve --host 127.0.0.1 --port 0 ...`` in a
  subprocess (its own interpreter and GIL: the load generator does not steal the server's CPU
  time slices); the port is read from the ready line; stopped with SIGTERM (graceful drain),
  killed only if it does not exit in time.
- :class:`InProcessServer`: the real app on an aiohttp AppRunner in a background thread with its
  own event loop, for tests and fault injection (the engine object is reachable: its
  fault plan, its block manager). It listens through
  ``kvpool.server.connections.start_listener``, as ``kvpool serve`` does, so the harness and
  the hostile tables exercise the guarded edge (connection cap, header and keep-alive
  timeouts, JSON for aiohttp's own 400s), not a bare ``web.TCPSite``.

Both expose ``url`` and are context managers; every start has a timeout, every stop is bounded.
"""

from __future__ import annotations

import asyncio
import collections
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from aiohttp import web

from kvpool.runtime.engine.config import EngineConfig
from kvpool.server.app import METRICS_KEY
from kvpool.server.connections import DEFAULT_HEADER_TIMEOUT, DEFAULT_KEEP_ALIVE_TIMEOUT, \
    ConnectionLimiter, default_max_connections, start_listener

__all__ = ["InProcessServer", "SpawnedServer", "ROOT"]

ROOT = Path(__file__).resolve().parents[2]  # the repository: the spawned server runs its code
READY_PREFIX = "kvpool serve: listening on http://"
LOOPBACK = "127.0.0.1"


class SpawnedServer:
    """``kvpool serve`` in a subprocess on a free loopback port."""

    def __init__(self, serve_args: list[str], *, startup_timeout: float = 90.0,
                 env: dict[str, str] | None = None) -> None:
        self.serve_args = list(serve_args)
        self.startup_timeout = startup_timeout
        self.env = env
        self.proc: subprocess.Popen | None = None
        self.url: str | None = None
        self.lines: collections.deque[str] = collections.deque(maxlen=400)
        self._ready = threading.Event()
        self._reader: threading.Thread | None = None
        self.returncode: int | None = None

    def start(self) -> str:
        env = dict(os.environ if self.env is None else self.env)
        env["PYTHONPATH"] = str(ROOT) + (os.pathsep + env["PYTHONPATH"]
                                         if env.get("PYTHONPATH") else "")
        env.setdefault("PYTHONUNBUFFERED", "1")
        cmd = [sys.executable, "-m", "kvpool.server.serve", "--host", LOOPBACK, "--port", "0",
               *self.serve_args]
        self.proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, bufsize=1)
        self._reader = threading.Thread(target=self._read, daemon=True, name="stress-serve-log")
        self._reader.start()
        if not self._ready.wait(self.startup_timeout) or self.url is None:
            tail = "\n".join(list(self.lines)[-20:])
            self.stop(timeout=5)
            raise RuntimeError(f"kvpool serve did not start within {self.startup_timeout}s:\n"
                               f"{tail}")
        return self.url

    def _read(self) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            line = line.rstrip("\n")
            self.lines.append(line)
            if line.startswith(READY_PREFIX) and self.url is None:
                hostport = line[len(READY_PREFIX):].split()[0]
                host, _, port = hostport.rpartition(":")
                if host == LOOPBACK:  # never talk to anything but loopback
                    self.url = f"http://{LOOPBACK}:{int(port)}"
                self._ready.set()
        self._ready.set()  # the process ended (startup failure): wake the waiter

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM (graceful: drain, abort the rest, engine shutdown), then SIGKILL."""
        proc = self.proc
        if proc is None:
            return None
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        if self._reader is not None:
            self._reader.join(5)
        self.returncode = proc.returncode
        return self.returncode

    def tail(self, n: int = 20) -> str:
        return "\n".join(list(self.lines)[-n:])

    def __enter__(self) -> SpawnedServer:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()


class InProcessServer:
    """The real engine and app, served from a background thread's event loop."""

    def __init__(self, config: EngineConfig, *, api_key: str | None = None,
                 max_body_bytes: int = 1 << 20, tenant_block_quota: int | None = None,
                 invariant_check_interval: int = 0, faults: Any = None,
                 shutdown_timeout: float = 10.0, startup_timeout: float = 90.0,
                 header_timeout: float = DEFAULT_HEADER_TIMEOUT,
                 keep_alive_timeout: float = DEFAULT_KEEP_ALIVE_TIMEOUT,
                 max_connections: int | None = None,
                 stream_write_timeout: float | None = None) -> None:
        self.config = config
        self.app_kwargs = dict(api_key=api_key, max_body_bytes=max_body_bytes,
                               tenant_block_quota=tenant_block_quota,
                               engine_shutdown_timeout=shutdown_timeout)
        if stream_write_timeout is not None:  # else build_app's default
            self.app_kwargs["stream_write_timeout"] = stream_write_timeout
        self.invariant_check_interval = invariant_check_interval
        self.faults = faults  # a FaultPlan for the engine (None: no faults)
        self.shutdown_timeout = shutdown_timeout
        self.startup_timeout = startup_timeout
        self.header_timeout = header_timeout
        self.keep_alive_timeout = keep_alive_timeout
        # counters owned by the server's loop thread: read them through run_on_loop
        self.limiter = ConnectionLimiter(max_connections or default_max_connections())
        self.engine: Any = None
        self.app: web.Application | None = None
        self.url: str | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> str:
        self._thread = threading.Thread(target=self._main, daemon=True, name="stress-server")
        self._thread.start()
        if not self._ready.wait(self.startup_timeout):
            raise RuntimeError(f"in-process server did not start within {self.startup_timeout}s")
        if self._error is not None:
            raise RuntimeError(f"in-process server failed to start: {self._error!r}")
        return self.url  # type: ignore[return-value]

    def _main(self) -> None:
        try:
            asyncio.run(self._serve())
        except BaseException as e:  # noqa: BLE001 - reported to start()
            self._error = e
            self._ready.set()

    async def _serve(self) -> None:
        from kvpool.runtime.engine.async_engine import AsyncEngine
        from kvpool.server.app import build_app

        self.loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self.engine = AsyncEngine(self.config, faults=self.faults)
        self.engine.invariant_check_interval = self.invariant_check_interval
        self.app = build_app(self.engine, **self.app_kwargs)
        self.app[METRICS_KEY].add_source(self.limiter.families)
        runner = web.AppRunner(self.app, handler_cancellation=True,
                               shutdown_timeout=self.shutdown_timeout, access_log=None)
        await runner.setup()
        listener: asyncio.AbstractServer | None = None
        try:
            listener = await start_listener(
                runner, LOOPBACK, 0, limiter=self.limiter, header_timeout=self.header_timeout,
                keep_alive_timeout=self.keep_alive_timeout)
            port = listener.sockets[0].getsockname()[1]
            self.url = f"http://{LOOPBACK}:{port}"
            self._ready.set()
            await self._stop.wait()
        finally:
            if listener is not None:
                listener.close()  # NOTE(order): start_listener's contract: before cleanup
            await runner.cleanup()  # drain, abort the rest, engine.shutdown

    def stop(self, timeout: float = 60.0) -> None:
        if self.loop is not None and self._stop is not None and not self.loop.is_closed():
            try:
                self.loop.call_soon_threadsafe(self._stop.set)
            except RuntimeError:  # the loop already ended
                pass
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise RuntimeError(f"in-process server did not stop within {timeout}s")

    def run_on_loop(self, fn: Any, timeout: float = 30.0) -> Any:
        """Run ``fn()`` on the server's loop thread (safe access to loop-owned state)."""
        assert self.loop is not None
        async def call() -> Any:
            return fn()
        return asyncio.run_coroutine_threadsafe(call(), self.loop).result(timeout)

    def __enter__(self) -> InProcessServer:
        self.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()
