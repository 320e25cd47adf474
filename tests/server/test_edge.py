"""The connection edge of a real ``kvpool serve`` process on 127.0.0.1 (issue 12, items 5, 8, 9):
slow and idle connections are closed, the connection cap answers 503 with one WARNING line and
a metric, aiohttp-level 400s and corrupt gzip bodies are OpenAI error JSON, and no client fault
logs a traceback."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import struct

from tests.server.helpers import parse_metrics
from tests.server.test_serve import read_rest, subprocess_server

TRICKLE_LIMIT = 20.0  # seconds a slowloris keeps trickling; the server must close it first


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1])


async def open_raw(url: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    return await asyncio.open_connection("127.0.0.1", port_of(url))


async def read_response(reader: asyncio.StreamReader) -> tuple[int, dict[str, str], bytes]:
    """One HTTP/1.x response with a Content-Length body (or up to EOF)."""
    head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), timeout=30)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split()[1])
    headers = {k.strip().lower(): v.strip() for k, _, v in
               (line.partition(":") for line in lines[1:] if line)}
    if "content-length" in headers:
        body = await asyncio.wait_for(reader.readexactly(int(headers["content-length"])), 30)
    else:
        body = await asyncio.wait_for(reader.read(), timeout=30)
    return status, headers, body


async def exchange(url: str, raw: bytes) -> tuple[int, dict[str, str], bytes]:
    reader, writer = await open_raw(url)
    try:
        writer.write(raw)
        await writer.drain()
        return await read_response(reader)
    finally:
        writer.close()


async def get_metrics(url: str) -> dict[str, dict[tuple, float]]:
    status, _, body = await exchange(url, b"GET /metrics HTTP/1.1\r\nHost: t\r\n"
                                          b"Connection: close\r\n\r\n")
    assert status == 200
    return parse_metrics(body.decode())


def assert_openai_error(status: int, body: bytes, want_status: int) -> dict:
    assert status == want_status, (status, body)
    err = json.loads(body)["error"]
    assert set(err) == {"message", "type", "param", "code"} and err["message"], err
    assert err["type"] == ("server_error" if want_status >= 500 else "invalid_request_error")
    return err


async def stop_and_log(proc, lines: list[str]) -> str:
    proc.send_signal(signal.SIGTERM)
    assert await asyncio.wait_for(proc.wait(), timeout=30) == 0
    return await read_rest(proc, lines)


async def closed_by_server(reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                           trickle: bytes | None, limit: float) -> bool:
    """Send ``trickle`` every 0.25 s (None: stay silent) until the server closes or ``limit``."""
    loop = asyncio.get_running_loop()
    end = loop.time() + limit
    while loop.time() < end:
        try:
            if trickle is not None:
                writer.write(trickle)
                await writer.drain()
            data = await asyncio.wait_for(reader.read(1024), timeout=0.25)
        except asyncio.TimeoutError:
            continue
        except (ConnectionError, OSError):
            return True
        if not data:
            return True
    return False


async def test_slowloris_and_idle_keep_alive_connections_are_closed():
    async with subprocess_server("--header-timeout", "1", "--keep-alive-timeout", "2",
                                 "--log-level", "info") as (proc, url, lines):
        # a slowloris never finishes its head: closed after the header timeout
        loris = [await open_raw(url) for _ in range(3)]
        for _, w in loris:
            w.write(b"GET /health HTTP/1.1\r\nHost: t\r\n")
        results = await asyncio.gather(*(closed_by_server(r, w, b"X-Slow: 1\r\n", TRICKLE_LIMIT)
                                         for r, w in loris))
        assert all(results), "a slowloris connection stayed open"
        # an idle keep-alive connection: served once, then closed after the keep-alive timeout
        reader, writer = await open_raw(url)
        writer.write(b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n")
        status, headers, _ = await read_response(reader)
        assert status == 200 and headers.get("connection", "").lower() != "close"
        assert await closed_by_server(reader, writer, None, TRICKLE_LIMIT)
        # a silent connection that never sends a byte is closed too
        reader, writer = await open_raw(url)
        assert await closed_by_server(reader, writer, None, TRICKLE_LIMIT)
        m = await get_metrics(url)
        rejected = m["kvpool_http_connections_rejected_total"]
        assert rejected[(("reason", "header_timeout"),)] >= 3
        assert m["kvpool_http_connections"][()] >= 1  # the scrape's own connection
        out = await stop_and_log(proc, lines)
        assert "Traceback" not in out, out


async def test_connection_cap_answers_503_logs_once_and_counts():
    cap = 3
    async with subprocess_server("--max-connections", str(cap),
                                 "--log-level", "info") as (proc, url, lines):
        silent = [await open_raw(url) for _ in range(cap)]
        await asyncio.sleep(0.3)  # let the server accept them all before the over-cap ones
        for _ in range(4):  # over the cap: answered at once, not left hanging
            reader, writer = await open_raw(url)
            writer.write(b"GET /health HTTP/1.1\r\nHost: t\r\n\r\n")
            status, headers, body = await read_response(reader)
            err = assert_openai_error(status, body, 503)
            assert err["code"] == "too_many_connections" and headers["retry-after"]
            assert await asyncio.wait_for(reader.read(), timeout=10) == b""  # and closed
            writer.close()
        for _, w in silent:
            w.close()
        m = None
        for _ in range(100):  # the server notices the closes on its next loop turns
            try:
                m = await get_metrics(url)
                break
            except AssertionError:  # still at the cap: 503
                await asyncio.sleep(0.05)
        assert m is not None, "the server did not recover once connections closed"
        assert m["kvpool_http_connections_rejected_total"][(("reason", "max_connections"),)] >= 4
        out = await stop_and_log(proc, lines)
        warnings = [line for line in out.splitlines() if "connection cap reached" in line]
        assert len(warnings) == 1 and "WARNING" in warnings[0], out  # rate-limited: one line
        assert "Traceback" not in out, out


def rst_close(writer: asyncio.StreamWriter) -> None:
    """Close with a TCP reset (SO_LINGER 0), as a client that crashes does."""
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def test_client_faults_get_openai_json_and_no_traceback():
    async with subprocess_server("--log-level", "info") as (proc, url, lines):
        status, _, body = await exchange(url, b"GET /health HTTP/1.1\r\nHost: t\r\nX-Big: "
                                              + b"a" * 20000 + b"\r\n\r\n")
        assert_openai_error(status, body, 400)
        status, _, body = await exchange(url, b"GET /" + b"u" * 20000
                                              + b" HTTP/1.1\r\nHost: t\r\n\r\n")
        assert_openai_error(status, body, 400)
        bad_gzip = b"\x1f\x8b\x08\x00" + b"not really gzip" * 8
        status, _, body = await exchange(
            url, b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json"
                 b"\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(bad_gzip)
                 + bad_gzip)
        err = assert_openai_error(status, body, 400)
        assert err["code"] == "invalid_body" and "gzip" in err["message"]
        # clients that reset the connection while their stream starts
        req = json.dumps({"prompt": "hello", "max_tokens": 4, "stream": True}).encode()
        for _ in range(8):
            reader, writer = await open_raw(url)
            writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: "
                         b"application/json\r\nContent-Length: %d\r\n\r\n" % len(req) + req)
            await writer.drain()
            rst_close(writer)
        status, _, body = await exchange(url, b"GET /health HTTP/1.1\r\nHost: t\r\n"
                                              b"Connection: close\r\n\r\n")
        assert status == 200  # other clients unaffected
        out = await stop_and_log(proc, lines)
        assert "Traceback" not in out and " ERROR " not in out, out
        assert "32 device blocks free" in out, out  # nothing leaked
