"""Slowloris clients: connections that trickle a request head and never finish it.

``python -m stress http --slowloris N`` opens N raw TCP connections to the server at the start
of the load. Each sends ``GET /health HTTP/1.1``, ``Host`` and the start of one header, then one
more byte of that header every ``interval`` seconds, never the blank line that ends a head. A
server with a header-read timeout closes them (kvpool serve: ``--header-timeout``, default
10 s); one without keeps them open and, with enough of them, runs out of file descriptors. Each
connection gives up after ``limit`` seconds (the server's timeout plus a margin) and is then
counted as ``open_past_limit``, a must-be-zero figure of the report.

:func:`wait_closed` is the one loop every raw-connection check here and in the tests uses:
send a trickle (or stay silent) until the server closes the connection or a limit passes.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import urlsplit

from stress.report import percentile

__all__ = ["LorisResult", "SLOWLORIS_MARGIN", "SLOWLORIS_MUST_BE_ZERO", "flag_values",
           "limit_for_serve_args", "loris_limit", "run_slowloris", "slowloris_figures",
           "wait_closed"]

SLOWLORIS_MUST_BE_ZERO = ("slowloris_open_past_limit", "slowloris_connect_errors")
SLOWLORIS_MARGIN = 5.0  # seconds past the server's timeout before a connection counts as open
SLOWLORIS_INTERVAL = 1.0  # seconds between two trickled bytes
LORIS_HEAD = b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slowloris: "
CONNECT_TIMEOUT = 10.0


@dataclass(frozen=True, slots=True)
class LorisResult:
    closed: bool  # the server closed it (or reset it) before the limit
    seconds: float  # from connect to close (or to the limit)
    status: int | None = None  # a response the server sent before closing (e.g. 503 at the cap)
    error: str = ""  # could not connect at all


def loris_limit(header_timeout: float, keep_alive_timeout: float,
                margin: float = SLOWLORIS_MARGIN) -> float:
    """Seconds a slowloris may live: the server's first timer that can close it (aiohttp's
    keep-alive timer also runs while a head arrives), plus ``margin``; 0 means off."""
    timers = [t for t in (header_timeout, keep_alive_timeout) if t > 0]
    return (min(timers) if timers else 0.0) + margin


def flag_values(args: Sequence[str]) -> dict[str, str]:
    """``("--a", "1", "--b=2")`` -> ``{"--a": "1", "--b": "2"}`` (the last one wins)."""
    out: dict[str, str] = {}
    for i, a in enumerate(args):
        if a.startswith("--") and "=" in a:
            k, _, v = a.partition("=")
            out[k] = v
        elif a.startswith("--") and i + 1 < len(args) and not args[i + 1].startswith("--"):
            out[a] = args[i + 1]
    return out


def limit_for_serve_args(serve_args: Sequence[str]) -> float:
    """:func:`loris_limit` for a ``kvpool serve`` started with ``serve_args`` (its default
    timeouts unless they name --header-timeout / --keep-alive-timeout)."""
    from kvpool.server.connections import DEFAULT_HEADER_TIMEOUT, DEFAULT_KEEP_ALIVE_TIMEOUT

    given = flag_values(serve_args)
    return loris_limit(float(given.get("--header-timeout", DEFAULT_HEADER_TIMEOUT)),
                       float(given.get("--keep-alive-timeout", DEFAULT_KEEP_ALIVE_TIMEOUT)))


async def wait_closed(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                      trickle: bytes | None, *, interval: float,
                      limit: float) -> tuple[float | None, bytes]:
    """Send ``trickle`` every ``interval`` s (None: stay silent) until the server closes the
    connection; returns (seconds until it did, or None past ``limit``; the bytes it sent)."""
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    got = b""
    while True:
        left = t0 + limit - loop.time()
        if left <= 0:
            return None, got
        try:
            data = await asyncio.wait_for(reader.read(4096), timeout=min(interval, left))
        except asyncio.TimeoutError:
            if trickle is not None and not writer.is_closing():
                try:
                    writer.write(trickle)
                    await writer.drain()
                except (ConnectionError, OSError):
                    return loop.time() - t0, got
            continue
        except (ConnectionError, OSError):
            return loop.time() - t0, got
        if not data:
            return loop.time() - t0, got
        if len(got) < 4096:  # keep the start of an answer (its status line), not a flood
            got += data


def _status(raw: bytes) -> int | None:
    parts = raw.split(b"\r\n", 1)[0].split()
    return int(parts[1]) if len(parts) >= 2 and parts[1].isdigit() else None


async def one_loris(host: str, port: int, *, interval: float = SLOWLORIS_INTERVAL,
                    limit: float) -> LorisResult:
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port),
                                                CONNECT_TIMEOUT)
    except (OSError, asyncio.TimeoutError) as e:
        return LorisResult(False, 0.0, error=f"connect: {e!r}")
    try:
        try:
            writer.write(LORIS_HEAD)
            await writer.drain()
        except (ConnectionError, OSError):
            return LorisResult(True, loop.time() - t0)
        left = max(0.0, limit - (loop.time() - t0))
        seconds, got = await wait_closed(reader, writer, b"a", interval=interval, limit=left)
        if seconds is None:
            return LorisResult(False, limit, _status(got))
        return LorisResult(True, loop.time() - t0, _status(got))
    finally:
        writer.close()


async def run_slowloris(url: str, n: int, *, limit: float,
                        interval: float = SLOWLORIS_INTERVAL) -> list[LorisResult]:
    """``n`` slowloris connections to ``url`` at once; returns when every one has ended."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    return list(await asyncio.gather(*(one_loris(host, port, interval=interval, limit=limit)
                                       for _ in range(n))))


def slowloris_figures(results: Sequence[LorisResult], limit: float) -> dict[str, object]:
    """Report figures; ``slowloris_open_past_limit`` and ``slowloris_connect_errors`` must
    read 0."""
    closed = [r.seconds for r in results if r.closed]
    statuses: dict[str, int] = {}
    for r in results:
        if r.status is not None:
            statuses[str(r.status)] = statuses.get(str(r.status), 0) + 1
    p50, top = percentile(closed, 50), max(closed, default=None)
    return {
        "slowloris_sent": len(results),
        "slowloris_closed_by_server": len(closed),
        "slowloris_open_past_limit": sum(1 for r in results if not r.closed and not r.error),
        "slowloris_connect_errors": sum(1 for r in results if r.error),
        "slowloris_limit_s": round(limit, 2),
        "slowloris_lifetime_p50_s": None if p50 is None else round(p50, 2),
        "slowloris_lifetime_max_s": None if top is None else round(top, 2),
        "slowloris_answers": statuses,
    }
