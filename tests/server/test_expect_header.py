"""An ``Expect`` header other than ``100-continue`` is refused (417) in OpenAI's error JSON.

aiohttp answers it before any middleware runs (its expect handler is called ahead of the
handler chain), so the error middleware never saw it and the client got ``Unknown Expect: ...``
as text/plain (found by tests/server/test_http_fuzz.py). ``100-continue`` still gets its
interim 100 and then the normal answer."""

from __future__ import annotations

import json
import socket

from tests.server.test_errors import assert_error

BODY = b'{"prompt": "hi", "max_tokens": 1}'


def roundtrip(port: int, path: str, expect: str) -> tuple[list[int], dict[str, str], bytes]:
    head = (f"POST {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\nExpect: {expect}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(BODY)}\r\n\r\n")
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head.encode() + BODY)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    statuses, headers = [], {}
    while data.startswith(b"HTTP/1.1 "):
        head_bytes, _, data = data.partition(b"\r\n\r\n")
        lines = head_bytes.decode("latin-1").split("\r\n")
        statuses.append(int(lines[0].split()[1]))
        headers = {k.lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:])}
    return statuses, headers, data


async def test_unknown_expectation_is_openai_json(srv):
    port = int(srv.url.rsplit(":", 1)[1])
    for path in ("/v1/completions", "/v1/no-such-route"):
        for expect in ("weird", "200-ok", "100-continue, x"):
            statuses, headers, body = await _in_thread(port, path, expect)
            assert statuses == [417], (path, expect, statuses, body)
            assert headers["content-type"].startswith("application/json"), (path, headers)
            assert int(headers["content-length"]) == len(body)
            err = assert_error(417, json.loads(body), 417, None, "expectation_failed")
            assert expect in err["message"]


async def test_100_continue_still_served(srv):
    port = int(srv.url.rsplit(":", 1)[1])
    statuses, headers, body = await _in_thread(port, "/v1/completions", "100-Continue")
    assert statuses == [100, 200], (statuses, body)
    assert json.loads(body)["object"] == "text_completion"


async def _in_thread(port: int, path: str, expect: str):
    import asyncio

    return await asyncio.to_thread(roundtrip, port, path, expect)


async def test_the_routers_own_417_is_openai_json_too():
    """The router (its guarded listener, no replica needed: aiohttp answers before routing)
    gave ``Unknown Expect: ...`` as text/plain: its app had no NOTE(expect) hook."""
    from tests.router.helpers import router

    async with router(["http://127.0.0.1:9"], interval=3600) as (_, url):
        port = int(url.rsplit(":", 1)[1])
        statuses, headers, body = await _in_thread(port, "/v1/completions", "weird")
    assert statuses == [417], (statuses, body)
    assert headers["content-type"].startswith("application/json"), headers
    assert_error(417, json.loads(body), 417, None, "expectation_failed")


def final_answer(port: int, head: str) -> tuple[list[int], dict[str, str], bytes]:
    """Send only ``head`` (its body held back, as a client waiting for 100 Continue does) and
    read up to the first final answer: every status line seen, its headers and body. Read by
    Content-Length: after a refusal the server may keep the socket open a moment (its
    lingering read) for a body that never comes; the socket timeout bounds every wait."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(head.encode())
        data, statuses = b"", []
        while True:
            while b"\r\n\r\n" not in data:
                data += sock.recv(65536) or b"<eof>"
            head_bytes, _, data = data.partition(b"\r\n\r\n")
            lines = head_bytes.decode("latin-1").split("\r\n")
            statuses.append(int(lines[0].split()[1]))
            if statuses[-1] >= 200:
                break
        headers = {k.lower(): v.strip() for k, v in (ln.split(":", 1) for ln in lines[1:])}
        while len(data) < int(headers["content-length"]):
            data += sock.recv(65536) or b"<eof>"
    return statuses, headers, data


async def test_100_continue_past_the_bound_is_the_413_with_no_100(make_server):
    """NOTE(expect-bound): aiohttp's default expect handler said 100 Continue before the body
    reader's 413 (NOTE(declared)), so the client uploaded the whole oversize body first.
    Now the 413 is the only answer and says the connection closes; a transfer coding the
    server does not read (NOTE(transfer-coding)) gets its 501 the same way."""
    import asyncio

    bound = 4096
    async with make_server(max_body_bytes=bound) as srv:
        port = int(srv.url.rsplit(":", 1)[1])
        head = ("POST /v1/completions HTTP/1.1\r\nHost: t\r\nExpect: 100-continue\r\n"
                "Content-Type: application/json\r\n{}\r\n\r\n")
        statuses, headers, body = await asyncio.to_thread(
            final_answer, port, head.format(f"Content-Length: {10 * bound}"))
        assert statuses == [413], (statuses, body)
        assert headers["content-type"].startswith("application/json"), headers
        assert headers.get("connection", "").lower() == "close", headers
        err = assert_error(413, json.loads(body), 413, None, "request_too_large")
        assert str(bound) in err["message"], err
        statuses, headers, body = await asyncio.to_thread(
            final_answer, port, head.format("Transfer-Encoding: gzip, chunked"))
        assert statuses == [501], (statuses, body)
        assert_error(501, json.loads(body), 501, None, "not_implemented")
        # a body within the bound still gets its 100, then the body's own answer
        statuses, _, body = await _in_thread(port, "/v1/completions", "100-continue")
        assert statuses == [100, 200], (statuses, body)
