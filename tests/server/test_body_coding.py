"""Compressed request bodies on the guarded listener (``kvpool serve`` and ``kvpool router``,
real processes and sockets on 127.0.0.1, stopped by pid): kvpool decodes them off the event
loop and never past ``--max-body-bytes`` (kvpool/server/body_coding.py NOTE(inflate)).

Before, aiohttp inflated them on the loop, and after a 413 its lingering read inflated the rest:
a 1 MB gzip body of 1 GiB held serve's loop 1-2 s (other streams stalled, a router in front
marked the replica down). The bound checked here is the CPU the server spends on one such
body: a count of work done, with a margin of several times either way, not a speed figure.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import socket
import time
import zlib

import aiohttp
import pytest

from kvpool.server.json_body import DEFAULT_MAX_BODY_BYTES
from tests.router.helpers import router, spawn
from tests.server.test_errors import assert_error

BODY = json.dumps({"prompt": "hi", "max_tokens": 1, "temperature": 0}).encode()
BOUND = 1 << 20  # --max-body-bytes of the replica below


@pytest.fixture(scope="module")
def replica():
    srv = spawn("coding", "--max-body-bytes", str(BOUND))
    try:
        yield srv
    finally:
        srv.stop(timeout=20)


def bomb(inflated: int) -> bytes:
    """A gzip body of one JSON string of ``inflated`` spaces (about 1000:1)."""
    z = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    chunk = b" " * (16 << 20)
    parts = [z.compress(b'{"prompt": "')]
    parts += [z.compress(chunk) for _ in range(inflated // len(chunk))]
    return b"".join(parts) + z.compress(b'", "max_tokens": 1}') + z.flush()


def cpu_seconds(pid: int) -> float:
    """User + system CPU of process ``pid`` so far (/proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def post(url: str, payload: bytes, coding: str | None, **headers: str):
    if coding is not None:
        headers["Content-Encoding"] = coding
    async with aiohttp.ClientSession(auto_decompress=False) as s, s.post(
            url + "/v1/completions", data=payload, headers={
                "Content-Type": "application/json", **headers}) as r:
        return r.status, await r.read()


@pytest.mark.parametrize("coding, payload", [
    ("gzip", gzip.compress(BODY)), ("x-gzip", gzip.compress(BODY)),
    ("deflate", zlib.compress(BODY)), ("deflate", zlib.compress(BODY)[2:-4]),  # raw DEFLATE
    ("identity", BODY), (None, BODY)], ids=["gzip", "x-gzip", "zlib", "raw", "identity",
                                             "none"])
async def test_compressed_bodies_are_served_direct_and_through_the_router(replica, coding,
                                                                          payload):
    async with router([replica.url], interval=3600) as (_, url):
        for base in (replica.url, url):
            status, body = await post(base, payload, coding)
            assert status == 200, (base, body)
            assert json.loads(body)["object"] == "text_completion"


@pytest.mark.parametrize("coding, payload, status, code", [
    ("br", BODY, 415, "unsupported_media_type"), ("gzip, gzip", BODY, 415, None),
    ("gzip", b"\x1f\x8b\x08\x00not gzip at all", 400, "invalid_body"),
    ("gzip", gzip.compress(BODY)[:-6], 400, "invalid_body"),
    ("gzip", gzip.compress(BODY[:-1] + b', "pad": "' + b" " * DEFAULT_MAX_BODY_BYTES + b'"}'),
     413, "request_too_large")],
    ids=["br", "twice", "not-gzip", "cut", "past-bound"])
async def test_a_body_that_does_not_decode_is_the_clients_4xx(replica, coding, payload,
                                                            status, code):
    async with router([replica.url], interval=3600) as (_, url):
        for base in (replica.url, url):
            got, body = await post(base, payload, coding)
            err = json.loads(body)
            assert got == status, (base, err)
            if code is not None:
                assert_error(got, err, status, None, code)


async def test_a_gzip_bomb_costs_the_server_little_and_leaves_it_serving(replica):
    payload = bomb(1 << 30)  # ~1 MB on the wire, 1 GiB inflated
    assert len(payload) < BOUND
    pid = replica.proc.pid
    before = cpu_seconds(pid)
    status, body = await post(replica.url, payload, "gzip")
    assert status == 413, body
    assert "decodes to more than" in json.loads(body)["error"]["message"]
    time.sleep(2.5)  # past aiohttp's lingering read (NOTE(linger) in connections.py)
    spent = cpu_seconds(pid) - before
    # inflating 1 GiB on the loop took 1-2 s of CPU; reading 1 MB and inflating 1 MiB, ~0.05
    assert spent < 0.5, spent
    status, body = await post(replica.url, BODY, None)
    assert status == 200, body


@pytest.mark.parametrize("through_router", [False, True])
async def test_a_declared_length_past_the_bound_is_refused_before_the_body(replica,
                                                                           through_router):
    """NOTE(declared) in body_coding.py: a 413 at once, not a 408 once the body timeout (60 s)
    passes for bytes the client never sends."""
    async with router([replica.url], interval=3600) as (_, url):
        port = int((url if through_router else replica.url).rsplit(":", 1)[1])
        first = await asyncio.to_thread(first_answer, port, 5 * DEFAULT_MAX_BODY_BYTES)
    assert first.startswith(b"HTTP/1.1 413"), first[:200]


def first_answer(port: int, declared: int) -> bytes:
    """What the server at ``port`` first sends for a request declaring ``declared`` body
    bytes and sending ten (a socket timeout bounds the wait)."""
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: t\r\nContent-Type: application/json"
            f"\r\nContent-Length: {declared}\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(head + b'{"prompt":')  # and nothing more
        return sock.recv(65536)


def chunked_answer(port: int, coding: str, payload: bytes) -> tuple[int, bytes]:
    """Status and body of a POST whose body is sent chunked under ``Transfer-Encoding:
    coding`` (the connection closes after the answer; the socket timeout bounds the wait)."""
    head = (f"POST /v1/completions HTTP/1.1\r\nHost: t\r\nConnection: close\r\n"
            f"Content-Type: application/json\r\nTransfer-Encoding: {coding}\r\n\r\n").encode()
    with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
        sock.sendall(head + b"%x\r\n%s\r\n0\r\n\r\n" % (len(payload), payload))
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    status_line, _, rest = data.partition(b"\r\n")
    return int(status_line.split()[1]), rest.partition(b"\r\n\r\n")[2]


@pytest.mark.parametrize("coding, payload, status", [
    ("gzip, chunked", gzip.compress(BODY), 501), ("Foo,Chunked", BODY, 501),
    ("chunked", BODY, 200), ("gzip", gzip.compress(BODY), 400)],
    ids=["gzip-chunked", "unknown", "chunked", "not-chunked-last"])
async def test_a_transfer_coding_other_than_chunked_is_501(replica, coding, payload, status):
    """NOTE(transfer-coding) in body_coding.py: aiohttp frames the body by its final chunked
    and handed kvpool the gzip bytes undecoded, a 400 for "invalid UTF-8"; RFC 9112 6.1 asks
    a 501 for a transfer coding the server does not read. Chunked not last: the parser's
    400 (RFC 9112 6.3)."""
    port = int(replica.url.rsplit(":", 1)[1])
    got, body = await asyncio.to_thread(chunked_answer, port, coding, payload)
    assert got == status, body
    if status == 501:
        err = assert_error(got, json.loads(body), 501, None, "not_implemented")
        assert coding in err["message"], err
