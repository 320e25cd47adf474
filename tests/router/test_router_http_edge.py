"""The router's HTTP edge refuses what serve's does, from the head, before reading or relaying.

A real router (cli.listen, the guarded listener) on 127.0.0.1 in front of a fake replica that
records every request reaching it; raw sockets, as the headers under test are ones aiohttp's
client would not send as written. Every route that reads a body is asked: a generation route,
the Responses API, the passthrough, the admin API (the routes are added in two modules).

- ``Expect: 100-continue`` with a Content-Length past ``--max-body-bytes``: the router's app
  kept aiohttp's default expect handler, which says 100 Continue to everything, so the client
  uploaded its whole oversize body before the 413 (kvpool/server/expect.py
  NOTE(expect-bound)); the 413 is now the only answer.
- ``Transfer-Encoding: gzip, chunked``: aiohttp hands over the bytes still gzipped; a 501
  (body_coding.py NOTE(transfer-coding)), and nothing relayed as if it were plain JSON.
- A declared Content-Length past the bound, no Expect: a 413 at once, on the admin API too
  (it read the body with no bound on the wait: NOTE(declared)).
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json
import logging
import re
import socket

import pytest
from aiohttp import web

from kvpool.router.cli import listen
from kvpool.router.membership import ADMIN_PATH, Membership
from kvpool.router.proxy import Router
from kvpool.router.replicas import ReplicaSet
from tests.router.helpers import apps_served, recording_replica, served
from tests.server.test_errors import assert_error

BOUND = 4096  # the router's --max-body-bytes
TOKEN = "edge-admin-token"
PATHS = ("/v1/completions", "/v1/responses", "/v1/embeddings", ADMIN_PATH)
BODY = b'{"prompt": "hi", "max_tokens": 1, "input": "hi", "url": "http://127.0.0.1:9"}'
HEALTH = b'{"status": "ok", "num_running": 0, "num_waiting": 0}'


def probe(request: web.Request) -> web.Response | None:
    """The fake replica's /health, and a 404 for lookups (hit 0: the request is relayed)."""
    if request.path == "/health":
        return web.Response(body=HEALTH, content_type="application/json")
    if request.path == "/v1/kvpool/lookup":
        return web.json_response({"error": "no lookups here"}, status=404)
    return None


@contextlib.asynccontextmanager
async def edge():
    """The router's port and the list of requests the replica behind it got."""
    got: list[str] = []
    async with apps_served(recording_replica("a", got, None, probe)) as (rep,):
        replicas = ReplicaSet([rep], interval=3600)
        r = Router(replicas, max_body_bytes=BOUND,
                   membership=Membership(replicas, admin_token=TOKEN))
        async with served(r) as url:
            yield int(url.rsplit(":", 1)[1]), got


def head(path: str, framing: str, expect: bool = False) -> bytes:
    return (f"POST {path} HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer {TOKEN}\r\n"
            f"Content-Type: application/json\r\n{framing}\r\n"
            + ("Expect: 100-continue\r\n" if expect else "") + "\r\n").encode()


def answers(port: int, sent: bytes) -> tuple[list[int], dict[str, str], bytes]:
    """Send ``sent`` and read up to the first final answer: every status line seen, its
    headers and its body (by Content-Length: a refusing server may linger for a body that
    never comes). The socket timeout bounds every wait: a server waiting for the body the
    client holds back fails the test with a timeout."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(sent)
        data, statuses = b"", []
        while not statuses or statuses[-1] < 200:
            while b"\r\n\r\n" not in data:
                data += sock.recv(65536) or b"<eof>"
            head_bytes, _, data = data.partition(b"\r\n\r\n")
            lines = head_bytes.decode("latin-1").split("\r\n")
            statuses.append(int(lines[0].split()[1]))
        headers = {k.lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:])}
        while len(data) < int(headers.get("content-length", 0)):  # relayed: maybe chunked
            data += sock.recv(65536) or b"<eof>"
    return statuses, headers, data


def chunked(payload: bytes) -> bytes:
    return b"%x\r\n%s\r\n0\r\n\r\n" % (len(payload), payload)


async def ask(port: int, sent: bytes) -> tuple[list[int], dict[str, str], bytes]:
    return await asyncio.to_thread(answers, port, sent)


async def test_100_continue_past_the_bound_is_the_413_alone():
    """The body is held back, as curl holds it until 100 Continue: the 413 (or the 501 for
    a transfer coding not read here) must come without it."""
    async with edge() as (port, got):
        for path in PATHS:
            statuses, headers, body = await ask(
                port, head(path, f"Content-Length: {10 * BOUND}", expect=True))
            assert statuses == [413], (path, statuses, body)
            assert headers.get("connection", "").lower() == "close", (path, headers)
            err = assert_error(413, json.loads(body), 413, None, "request_too_large")
            assert str(BOUND) in err["message"], (path, err)
            statuses, _, body = await ask(
                port, head(path, "Transfer-Encoding: gzip, chunked", expect=True))
            assert statuses == [501], (path, statuses, body)
            assert_error(501, json.loads(body), 501, None, "not_implemented")
        # a body within the bound still gets its 100, then its answer
        statuses, _, body = await ask(port, head(
            "/v1/completions", f"Content-Length: {len(BODY)}", expect=True) + BODY)
        assert statuses == [100, 200], (statuses, body)
    assert got == ["a POST /v1/completions"], got


@pytest.mark.parametrize("coding, status", [("gzip, chunked", 501), ("chunked", 200)])
async def test_a_transfer_coding_before_chunked_is_a_501_not_relayed(coding, status):
    """The gzip bytes were read as plain: a 400 (invalid UTF-8) on a generation route, and
    relayed to the replica as they came on the passthrough; the admin API's 400 said
    "not JSON". Plain chunked is read and relayed (the admin API adds the replica)."""
    payload = gzip.compress(BODY) if "gzip" in coding else BODY
    async with edge() as (port, got):
        for path in PATHS:
            statuses, _, body = await ask(
                port, head(path, f"Transfer-Encoding: {coding}") + chunked(payload))
            assert statuses[-1] == (201 if status == 200 and path == ADMIN_PATH else status), \
                (path, statuses, body)
            if status == 501:
                err = assert_error(501, json.loads(body), 501, None, "not_implemented")
                assert coding in err["message"], (path, err)
    relayed = [f"a POST {p}" for p in PATHS if p != ADMIN_PATH]
    assert got == ([] if status == 501 else relayed), got


async def test_a_declared_length_past_the_bound_is_a_413_before_the_body():
    """No Expect, ten bytes of a body declared ten times the bound: the 413 at once on every
    route (the admin API waited for the rest, unbounded)."""
    async with edge() as (port, got):
        for path in PATHS:
            statuses, _, body = await ask(
                port, head(path, f"Content-Length: {10 * BOUND}") + b'{"prompt":')
            assert statuses == [413], (path, statuses, body)
            assert_error(413, json.loads(body), 413, None, "request_too_large")
    assert got == [], got


async def test_refusals_past_the_cap_are_all_said_by_the_cleanup(caplog):
    """Past --max-connections the router refuses with a 503 and one WARNING at once; the
    refusals after it are said when the router stops, not dropped (NOTE(said-counts))."""
    caplog.set_level(logging.WARNING, logger="kvpool.server")
    replicas = ReplicaSet(["http://127.0.0.1:9"], interval=3600)
    runner, server = await listen(Router(replicas), "127.0.0.1", 0, max_connections=2)
    port = server.sockets[0].getsockname()[1]
    held = [await asyncio.open_connection("127.0.0.1", port) for _ in range(2)]
    try:
        for _ in range(3):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            head = await asyncio.wait_for(reader.read(), 5)
            assert head.startswith(b"HTTP/1.1 503"), head
            writer.close()
    finally:
        for _, writer in held:
            writer.close()
        server.close()
        await runner.cleanup()
    said = [int(re.search(r"refused (\d+) new", r.getMessage()).group(1))
            for r in caplog.records if "connection cap reached" in r.getMessage()]
    assert said == [1, 2], said
