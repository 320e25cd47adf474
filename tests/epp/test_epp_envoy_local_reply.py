"""Envoy's own answers through the shipped deploy/envoy/envoy.yaml carry OpenAI error JSON
(docs/epp.md, "Envoy's own answers": its ``local_reply_config``), while the picker's own
answers (ImmediateResponse 400, 413, 503, JSON already) and a replica's answers pass unchanged.
Before, Envoy answered a picker it could not reach with 503 and an empty body.

A real Envoy (bench/envoy_proc.py) in front of a real aiohttp replica on 127.0.0.1
(tests/router/test_router_hostile_replica.py ``fake_replica``) and the picker, all stopped by
pid or context; the subset hint wired as tests/epp/test_epp_envoy_protocol.py wires it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json

import aiohttp

from bench.envoy_proc import Envoy
from kvpool.epp.cli import picking
from kvpool.epp.picker import Picker
from kvpool.router.proxy import Router
from kvpool.router.replicas import ReplicaSet
from tests.epp.test_epp_envoy_protocol import BODY, FORWARD_HINT, SUBSET_FILTER
from tests.epp.test_epp_subset import HOT
from tests.router.helpers import LOOKUP_TIMEOUT
from tests.router.test_router_hostile_replica import fake_replica


async def error_of(resp: aiohttp.ClientResponse, status: int) -> dict:
    assert resp.status == status, await resp.text()
    assert resp.headers["Content-Type"] == "application/json"
    err = json.loads(await resp.read())["error"]
    assert set(err) == {"message", "type", "param", "code"}, err
    return err


async def raw_exchange(port: int, head: bytes) -> tuple[int, bytes, bytes]:
    """``head`` sent as is: (status, header block, body) of the answer."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(head)
        answer = await reader.read(65536)
    finally:
        writer.close()
    block, _, body = answer.partition(b"\r\n\r\n")
    return int(block.split()[1]), block.lower(), body


async def picker_answers(s: aiohttp.ClientSession, url: str) -> None:
    """The picker's and the replica's answers come through as they were sent."""
    async with s.post(url + "/v1/completions", json=BODY) as r:
        assert r.status == 200 and (await r.json())["served_by"] == "hot"
    async with s.get(url + "/nothing") as r:  # the replica's own 404, plain text
        assert (r.status, await r.read()) == (404, b"404: Not Found")
        assert r.headers["Content-Type"].startswith("text/plain")
    for data, headers, status, code in (
            (b"[1]", {}, 400, "invalid_json"),
            (json.dumps({**BODY, "prompt": "x" * 3000}).encode(), {}, 413,
             "request_too_large"),
            (json.dumps(BODY).encode(), {"x-subset": "10.0.0.9:80"}, 503, "subset_unknown")):
        async with s.post(url + "/v1/completions", data=data, headers=headers) as r:
            err = await error_of(r, status)
            assert err["code"] == code, err  # the picker's, not a mapper's
            assert (await r.read()).startswith(b'{"error": {"message": ')  # its spacing


async def test_envoys_own_answers_are_openai_json_and_the_pickers_are_untouched(tmp_path):
    async with fake_replica("hot", HOT) as rep, aiohttp.ClientSession() as s:
        picker = Picker(Router(ReplicaSet([rep], interval=3600),
                               lookup_timeout=LOOKUP_TIMEOUT, max_body_bytes=2000))
        async with contextlib.AsyncExitStack() as stack:
            port = await stack.enter_async_context(picking(picker, "127.0.0.1", 0))
            envoy = Envoy(port, tmp_path, (SUBSET_FILTER, FORWARD_HINT))
            await asyncio.to_thread(envoy.start)
            try:
                await picker_answers(s, envoy.url)
                # Envoy's own 400 (a request head its codec refuses): JSON, a client error
                status, _, body = await raw_exchange(
                    envoy.port, b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: x\r\n\r\n")
                err = json.loads(body)["error"]
                assert status == 400 and err["type"] == "invalid_request_error", body
                await stack.aclose()  # the picker stops: Envoy cannot reach it
                async with s.post(envoy.url + "/v1/completions", json=BODY) as r:
                    err = await error_of(r, 503)
                    assert r.headers["Retry-After"] == "1"
                assert err == {"message": "the endpoint picker is unavailable",
                               "type": "server_error", "param": None,
                               "code": "picker_unavailable"}
            finally:
                await asyncio.to_thread(envoy.stop)
