"""On a Messages path (/v1/messages and below) every answer the gateway makes itself is
Anthropic's error JSON, ``{"type": "error", "error": {"type", "message"}}`` with the type the
replica gives the status (kvpool/server/anthropic_errors.py NOTE(anthropic-errors); docs/epp.md,
"Envoy's own answers"): the picker's own refusals (its ImmediateResponse 400, 413, 503 with
Retry-After) and Envoy's local replies (the picker unavailable, 503 with Retry-After; a picked
replica that closes, 503, answers no HTTP, 502, or goes silent, 504 replica_unresponsive; and
every status of the table, from test routes that answer it directly). The same answers on
/v1/chat/completions stay OpenAI's error JSON.

A real Envoy (bench/envoy_proc.py) with the shipped configs (the subset hint wired as
tests/epp/test_epp_envoy_protocol.py wires it, so the test names the replica), the real picker,
real replicas on 127.0.0.1 (tests/router/test_router_hostile_replica.py ``fake_replica``,
tests/epp/test_epp_envoy_gateway_error.py ``failing_replica``), each stopped by pid or context.
"""

from __future__ import annotations

import asyncio
import contextlib
import json

import aiohttp
import pytest

from bench.envoy_proc import Envoy
from kvpool.epp.cli import picking
from kvpool.epp.picker import Picker, endpoint_of
from kvpool.router.proxy import Router
from kvpool.router.replicas import ReplicaSet
from kvpool.server.anthropic_errors import error_kind
from stress.http.servers import ROOT
from tests.epp.test_epp_envoy_gateway_error import ROUTE_TIMEOUT, failing_replica, gateway
from tests.epp.test_epp_envoy_local_reply import error_of
from tests.epp.test_epp_envoy_protocol import FORWARD_HINT, SUBSET_FILTER
from tests.epp.test_epp_subset import HOT
from tests.router.helpers import LOOKUP_TIMEOUT
from tests.router.test_router_hostile_replica import fake_replica

BODY = {"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]}
MESSAGES = ("/v1/messages", "/v1/messages?beta=true", "/v1/messages/count_tokens")
CHAT = "/v1/chat/completions"
STATUSES = (400, 401, 403, 404, 413, 429, 500, 502, 503, 504)
# test routes answering each of STATUSES themselves (Envoy's direct_response: a local reply)
DIRECT = ('              - match: {prefix: "/"}\n', "".join(
    f'              - match: {{path: "{base}/s{n}"}}\n'
    f"                direct_response: {{status: {n}, body: {{inline_string: s{n}}}}}\n"
    for base in ("/v1/messages", "/v1/chat") for n in STATUSES)
    + '              - match: {prefix: "/"}\n')
CONFIGS = [ROOT / "deploy" / "envoy" / name for name in ("envoy.yaml", "envoy-fallback.yaml")]


async def anthropic_of(resp: aiohttp.ClientResponse, status: int) -> str:
    """The message of an Anthropic error answer of ``status`` with the table's type."""
    assert resp.status == status, await resp.text()
    assert resp.headers["Content-Type"] == "application/json"
    said = json.loads(await resp.read())
    assert set(said) == {"type", "error"} and said["type"] == "error", said
    assert said["error"]["type"] == error_kind(status) and set(said["error"]) == {
        "type", "message"}, said
    return said["error"]["message"]


async def refusals(s: aiohttp.ClientSession, url: str) -> None:
    """The picker's own 400, 413 and 503 (Retry-After): Anthropic's on a Messages path (a
    count_tokens body goes on unread, as every body of a path that generates nothing)."""
    for data, headers, status, code in (
            (b"[1]", {}, 400, "invalid_json"),
            (json.dumps({**BODY, "system": "x" * 3000}).encode(), {}, 413, "request_too_large"),
            (json.dumps(BODY).encode(), {"x-subset": "10.0.0.9:80"}, 503, "subset_unknown")):
        headers = {**headers, "content-type": "application/json"}
        for path in MESSAGES[:2] if status == 400 else MESSAGES:
            async with s.post(url + path, data=data, headers=headers) as r:
                await anthropic_of(r, status)
                assert r.headers.get("Retry-After") == ("1" if status == 503 else None)
        async with s.post(url + CHAT, data=data, headers=headers) as r:
            assert (await error_of(r, status))["code"] == code
            assert r.headers.get("Retry-After") == ("1" if status == 503 else None)


async def direct(s: aiohttp.ClientSession, url: str) -> None:
    """Envoy's local reply of each status: the table's type on a Messages path."""
    for n in STATUSES:
        async with s.post(f"{url}/v1/messages/s{n}", json=BODY) as r:
            message = await anthropic_of(r, n)
            assert f"s{n}" in message and "Retry-After" not in r.headers
        async with s.post(f"{url}/v1/chat/s{n}", json=BODY) as r:
            err = await error_of(r, n)
            assert err["code"] == ("replica_unresponsive" if n == 504 else "gateway_error")


@pytest.mark.parametrize("config", CONFIGS, ids=lambda p: p.name)
async def test_the_gateways_own_answers_on_messages_are_anthropic_json(tmp_path, config):
    async with fake_replica("hot", HOT) as rep, aiohttp.ClientSession() as s:
        picker = Picker(Router(ReplicaSet([rep], interval=3600),
                               lookup_timeout=LOOKUP_TIMEOUT, max_body_bytes=2000))
        async with contextlib.AsyncExitStack() as stack:
            port = await stack.enter_async_context(picking(picker, "127.0.0.1", 0))
            envoy = Envoy(port, tmp_path, (SUBSET_FILTER, FORWARD_HINT, DIRECT), config)
            await asyncio.to_thread(envoy.start)
            try:
                await refusals(s, envoy.url)
                await direct(s, envoy.url)
                await stack.aclose()  # the picker stops: Envoy cannot reach it
                for path in MESSAGES:
                    async with s.post(envoy.url + path, json=BODY) as r:
                        assert await anthropic_of(r, 503) == "the endpoint picker is unavailable"
                        assert r.headers["Retry-After"] == "1"
                async with s.post(envoy.url + CHAT, json=BODY) as r:
                    assert (await error_of(r, 503))["code"] == "picker_unavailable"
                    assert r.headers["Retry-After"] == "1"
            finally:
                await asyncio.to_thread(envoy.stop)


async def test_a_failing_replica_on_messages_is_answered_anthropic_json(tmp_path):
    async with contextlib.AsyncExitStack() as stack, aiohttp.ClientSession() as s:
        bad = {mode: await stack.enter_async_context(failing_replica(mode))
               for mode in ("close", "garbage", "silent")}
        _, url = await stack.enter_async_context(
            gateway(stack, list(bad.values()), tmp_path, (ROUTE_TIMEOUT,)))
        for mode, status, said in (("close", 503, "connection termination"),
                                   ("garbage", 502, "protocol error"),
                                   ("silent", 504, "the request may have run there")):
            hint = {"x-subset": endpoint_of(bad[mode])}
            async with s.post(url + MESSAGES[0], json=BODY, headers=hint) as r:
                assert said in await anthropic_of(r, status)
                assert "Retry-After" not in r.headers
            async with s.post(url + CHAT, json=BODY, headers=hint) as r:
                assert said in (await error_of(r, status))["message"]
