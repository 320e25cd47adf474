"""The connection-edge table: hostile cases that are not one well-formed HTTP request.

:mod:`stress.http.hostile` covers requests an HTTP client can send; these need raw sockets, many
connections or a signal (issue 12)::

    slowloris_closed            item 5  a head trickled a byte at a time is closed after the
                                        server's header timeout
    over_max_connections_503    item 5  past --max-connections a new connection gets 503 JSON
                                        (code too_many_connections, Retry-After) and is closed
    reset_during_response_start item 9  clients that reset while their stream starts: the
                                        server keeps serving (the caller checks its log has no
                                        traceback)
    sigterm_running_stream      item 7  SIGTERM with a running stream: it ends with an error
                                        event and ``data: [DONE]`` (needs a real process)

Each case is ``async run(target)`` and raises :class:`EdgeCaseFailed` with what it saw. The raw
HTTP helpers are shared with ``tests/server/test_edge.py`` and ``test_shutdown.py``.
"""

from __future__ import annotations

import asyncio
import json
import socket
import struct
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import aiohttp

from stress.http.slowloris import loris_limit, run_slowloris

__all__ = ["EDGE_CASES", "EdgeCase", "EdgeCaseFailed", "EdgeTarget", "check_openai_error",
           "cut_stream_events", "exchange", "open_raw", "read_response", "rst_close",
           "sse_data", "trickled_answer"]

IO_TIMEOUT = 30.0
LONG_STREAM = {"prompt": "hello", "max_tokens": 4000, "ignore_eos": True, "stream": True,
               "temperature": 0}


class EdgeCaseFailed(AssertionError):
    """The server's answer to an edge case was not the one the table asks for."""


def _expect(ok: bool, what: str) -> None:
    if not ok:
        raise EdgeCaseFailed(what)


@dataclass(frozen=True, slots=True)
class EdgeTarget:
    """A server under test and the edge settings it was started with."""

    url: str
    header_timeout: float
    keep_alive_timeout: float
    max_connections: int
    terminate: Callable[[], None] | None = None  # send SIGTERM (a real process only)


@dataclass(frozen=True, slots=True)
class EdgeCase:
    name: str
    item: int  # issue 12 item
    run: Callable[[EdgeTarget], Awaitable[None]]
    needs_process: bool = False  # ends the server: run it last, against its own process


# ---------------------------------------------------------------- raw HTTP
def _port(url: str) -> int:
    return int(url.rstrip("/").rsplit(":", 1)[1])


async def open_raw(url: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.wait_for(asyncio.open_connection("127.0.0.1", _port(url)), IO_TIMEOUT)


async def read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.x response with a Content-Length body (or up to EOF)."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=IO_TIMEOUT)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in
               (line.partition(":") for line in lines[1:] if line)}
    if "content-length" in headers:
        body = await asyncio.wait_for(reader.readexactly(int(headers["content-length"])),
                                      IO_TIMEOUT)
    else:
        body = await asyncio.wait_for(reader.read(), timeout=IO_TIMEOUT)
    return status, headers, body


async def trickled_answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                          byte: bytes = b" ", interval: float = 0.25
                          ) -> tuple[int, dict[str, str], bytes]:
    """One response read while ``byte`` is written every ``interval`` s: a request body that
    keeps coming and never completes (a slow-body client)."""
    async def trickle() -> None:
        while True:
            await asyncio.sleep(interval)
            writer.write(byte)

    task = asyncio.create_task(trickle())
    try:
        return await read_response(reader)
    finally:
        task.cancel()


async def exchange(url: str, raw: bytes) -> tuple[int, dict[str, str], bytes]:
    """Send ``raw`` bytes on a fresh connection and read one response."""
    reader, writer = await open_raw(url)
    try:
        writer.write(raw)
        await writer.drain()
        return await read_response(reader)
    finally:
        writer.close()


def check_openai_error(status: int, body: bytes, want_status: int) -> dict:
    """The ``error`` object of an OpenAI error JSON answer with ``want_status``."""
    _expect(status == want_status, f"status {status} != {want_status}: {body[:200]!r}")
    try:
        err = json.loads(body)["error"]
    except (ValueError, KeyError, TypeError):
        raise EdgeCaseFailed(f"not OpenAI error JSON: {body[:200]!r}") from None
    _expect(isinstance(err, dict) and set(err) == {"message", "type", "param", "code"}
            and bool(err["message"]), f"error object {err!r}")
    want_type = "server_error" if want_status >= 500 else "invalid_request_error"
    _expect(err["type"] == want_type, f"error type {err['type']!r} != {want_type!r}")
    return err


def rst_close(writer: asyncio.StreamWriter) -> None:
    """Close with a TCP reset (SO_LINGER 0), as a client that crashes does."""
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def health(url: str) -> int:
    status, _, _ = await exchange(url, b"GET /health HTTP/1.1\r\nHost: t\r\n"
                                       b"Connection: close\r\n\r\n")
    return status


def sse_data(raw: bytes) -> list[str]:
    """The ``data:`` payloads of a server-sent-event body, in order."""
    return [line[len("data: "):] for line in raw.decode().splitlines()
            if line.startswith("data: ")]


def cut_stream_events(raw: bytes) -> dict:
    """The tail of a stream the server cut: an OpenAI error event, then ``[DONE]``; returns
    the error object."""
    data = sse_data(raw)
    _expect(len(data) >= 2 and data[-1] == "[DONE]", f"no [DONE] at the end: {raw[-300:]!r}")
    try:
        err = json.loads(data[-2])["error"]
    except (ValueError, KeyError, TypeError):
        raise EdgeCaseFailed(f"no error event before [DONE]: {data[-2][:200]!r}") from None
    _expect(err.get("type") == "server_error" and bool(err.get("message")), f"error {err!r}")
    return err


# ---------------------------------------------------------------- the cases
async def slowloris_closed(t: EdgeTarget) -> None:
    limit = loris_limit(t.header_timeout, t.keep_alive_timeout)
    results = await run_slowloris(t.url, 3, limit=limit, interval=0.25)
    open_ = [r for r in results if not r.closed]
    _expect(not open_, f"{len(open_)} of 3 slowloris connections open after {limit:.1f}s")


async def over_max_connections_503(t: EdgeTarget, attempts: int = 1) -> None:
    held = [await open_raw(t.url) for _ in range(t.max_connections)]
    try:
        await asyncio.sleep(0.3)  # let the server accept them all before the over-cap ones
        for _ in range(attempts):  # each answered at once, not left hanging
            reader, writer = await open_raw(t.url)
            try:
                writer.write(b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n")
                status, headers, body = await read_response(reader)
                err = check_openai_error(status, body, 503)
                _expect(err["code"] == "too_many_connections"
                        and bool(headers.get("retry-after")), f"over the cap: {err!r}")
                rest = await asyncio.wait_for(reader.read(), timeout=IO_TIMEOUT)
                _expect(rest == b"", "the refused connection was not closed")
            finally:
                writer.close()
    finally:
        for _, w in held:
            w.close()
    _expect(await serving_again(t.url), "the server did not serve again once the held "
                                         "connections closed")


async def serving_again(url: str, tries: int = 200) -> bool:
    """/health answers 200 within ``tries`` polls: the server notices closed connections on
    its next loop turns, and until then a capped server may still answer 503."""
    for _ in range(tries):
        try:
            if await health(url) == 200:
                return True
        except (ConnectionError, OSError, asyncio.IncompleteReadError):
            pass
        await asyncio.sleep(0.05)
    return False


async def reset_during_response_start(t: EdgeTarget) -> None:
    req = json.dumps({"prompt": "hello", "max_tokens": 4, "stream": True}).encode()
    for _ in range(8):
        reader, writer = await open_raw(t.url)
        writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: "
                     b"application/json\r\nContent-Length: %d\r\n\r\n" % len(req) + req)
        await writer.drain()
        rst_close(writer)
    _expect(await serving_again(t.url), "the server stopped serving after client resets")


async def sigterm_running_stream(t: EdgeTarget) -> None:
    _expect(t.terminate is not None, "sigterm_running_stream needs a server process")
    async with aiohttp.ClientSession() as s:
        async with s.post(t.url + "/v1/completions", json=LONG_STREAM) as resp:
            _expect(resp.status == 200, f"stream status {resp.status}")
            first = await asyncio.wait_for(resp.content.readline(), IO_TIMEOUT)
            _expect(first.startswith(b"data: {"), f"first line {first[:100]!r}")
            t.terminate()  # type: ignore[misc]
            rest = await asyncio.wait_for(resp.read(), timeout=IO_TIMEOUT)
    cut_stream_events(rest)


EDGE_CASES: list[EdgeCase] = [
    EdgeCase("slowloris_closed", 5, slowloris_closed),
    EdgeCase("over_max_connections_503", 5, over_max_connections_503),
    EdgeCase("reset_during_response_start", 9, reset_during_response_start),
    EdgeCase("sigterm_running_stream", 7, sigterm_running_stream, needs_process=True),
]
