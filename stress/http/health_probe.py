"""A dedicated /health sampler for the HTTP stress mode (issue 12 item 3: /health must not stall
while big prompts, slow readers and the normal load arrive).

It runs in its own thread with its own event loop and a raw keep-alive connection, so what it
measures is the server's answer time, not the queueing inside the harness's busy loop (the
harness's 32+ clients share one loop; a sample waiting behind them would blame the server for
the client's own delay). One GET every ``interval`` seconds; a request that fails or passes
``timeout`` counts as a failure and its elapsed time is still a sample (a stall must show in
p99/max, not vanish from them).
"""

from __future__ import annotations

import asyncio
import threading
import time
from urllib.parse import urlsplit

from stress.report import percentile

__all__ = ["HealthProbe"]


class HealthProbe:
    """``start()``, the run, ``stop()``, then ``figures()``; every sample is one GET /health."""

    def __init__(self, url: str, *, interval: float = 0.05, timeout: float = 10.0,
                 p99_bound_ms: float = 50.0) -> None:
        parts = urlsplit(url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self.interval = interval
        self.timeout = timeout
        self.p99_bound_ms = p99_bound_ms
        self.samples: list[tuple[float, float]] = []  # (seconds since start, latency s)
        self.failures = 0
        self.failure_details: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0

    def start(self) -> None:
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True,
                                        name="stress-health-probe")
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(self.timeout + 5)

    async def _run(self) -> None:
        conn: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        request = (f"GET /health HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n\r\n").encode()
        next_at = time.monotonic()
        while not self._stop.is_set():
            t0 = time.monotonic()
            try:
                if conn is None:  # connecting is part of what a client waits for
                    conn = await asyncio.wait_for(
                        asyncio.open_connection(self.host, self.port), self.timeout)
                await asyncio.wait_for(self._one(conn, request), self.timeout)
            except (OSError, asyncio.TimeoutError, ValueError, asyncio.IncompleteReadError) as e:
                self.failures += 1
                if len(self.failure_details) < 5:
                    self.failure_details.append(f"{type(e).__name__}: {e}"[:160])
                if conn is not None:
                    conn[1].close()
                conn = None
            self.samples.append((t0 - self._t0, time.monotonic() - t0))
            next_at = max(next_at + self.interval, time.monotonic())
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))
        if conn is not None:
            conn[1].close()

    @staticmethod
    async def _one(conn: tuple[asyncio.StreamReader, asyncio.StreamWriter],
                   request: bytes) -> None:
        reader, writer = conn
        writer.write(request)
        await writer.drain()
        status = await reader.readline()
        if not status.startswith(b"HTTP/1.1 200"):
            raise ValueError(f"/health answered {status[:60]!r}")
        length = 0
        while (line := await reader.readline()) not in (b"\r\n", b""):
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value)
        await reader.readexactly(length)

    # ---------------------------------------------------------------- figures
    def figures(self) -> dict[str, object]:
        lat = [s for _, s in self.samples]

        def ms(v: float | None) -> float | None:
            return None if v is None else round(v * 1000, 2)

        p99 = ms(percentile(lat, 99))
        worst = sorted(self.samples, key=lambda s: s[1], reverse=True)[:5]
        return {
            "health_samples": len(lat),
            "health_p50_ms": ms(percentile(lat, 50)),
            "health_p99_ms": p99,
            "health_max_ms": ms(max(lat, default=None)),
            "health_worst_at_s": [(round(t, 2), ms(v)) for t, v in worst],
            "health_failures": self.failures,
            "health_failure_details": self.failure_details,
            # None (no sample at all) fails the must-be-zero check too
            "health_p99_over_bound": None if p99 is None else int(p99 > self.p99_bound_ms),
        }
