"""Tenants over HTTP (issue "Serving never lies", item 6): the block quota keys on a trusted
identity (here ``--tenant-header X-Tenant-Id``), so rotating ``cache_salt`` does not buy a
fresh quota, and another tenant's small request completes while a hog holds its limit.
Real AsyncEngine (tiny model) behind the real app on 127.0.0.1."""

from __future__ import annotations

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from kvpool.server.app import build_app
from tests.configs import SERVE_LIMITS, engine_config
from tests.server.conftest import SHUTDOWN_TIMEOUT
from tests.server.helpers import wait_free

QUOTA = 8  # blocks of 16 tokens per tenant


def body(max_tokens: int, salt: str | None = None, stream: bool = False) -> dict:
    b = {"model": "kvpool-tiny", "prompt": [5, 6, 7, 8], "max_tokens": max_tokens,
         "ignore_eos": True, "stream": stream, "temperature": 0}
    if salt is not None:
        b["cache_salt"] = salt
    return b


async def _start(engine_options: dict | None = None, **options) -> tuple[TestServer, object]:
    from kvpool.runtime.engine.async_engine import AsyncEngine

    engine = AsyncEngine(engine_config("serve", **{**SERVE_LIMITS, "max_tokens_limit": 512,
                                                   **(engine_options or {})}))
    app = build_app(engine, engine_shutdown_timeout=SHUTDOWN_TIMEOUT,
                    tenant_block_quota=QUOTA, **options)
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server(shutdown_timeout=SHUTDOWN_TIMEOUT)
    return server, engine


async def _hold_quota(http: aiohttp.ClientSession, url: str, model: str, headers: dict):
    """A streamed request of 4 + 124 tokens = 8 blocks: the whole quota, held while it streams."""
    big = {**body(QUOTA * 16 - 4, "s0", stream=True), "model": model}
    hold = await http.post(url, json=big, headers=headers)
    assert hold.status == 200
    assert (await hold.content.readline()).startswith(b"data: ")
    return hold


async def _assert_over_quota(http: aiohttp.ClientSession, url: str, model: str,
                             headers: dict, salt: str | None) -> None:
    async with http.post(url, json={**body(4, salt), "model": model}, headers=headers) as r:
        assert r.status == 429, await r.text()
        err = (await r.json())["error"]
        assert err["code"] == "tenant_quota_exceeded"
        assert set(err) >= {"message", "type", "param", "code"}


@pytest.mark.asyncio
async def test_rotating_cache_salt_does_not_bypass_the_tenant_quota():
    server, engine = await _start(tenant_header="X-Tenant-Id")
    url = f"http://127.0.0.1:{server.port}/v1/completions"
    model = engine.model_name
    hog = {"X-Tenant-Id": "hog"}
    try:
        baseline = engine.num_free_blocks()
        async with aiohttp.ClientSession() as http:
            hold = await _hold_quota(http, url, model, hog)
            for salt in ("s1", "s2", None):  # fresh salts: still the same tenant
                await _assert_over_quota(http, url, model, hog, salt)
            async with http.post(url, json={**body(4, "s0"), "model": model},
                                 headers={"X-Tenant-Id": "other"}) as r:
                assert r.status == 200, await r.text()
                out = await r.json()
                assert out["usage"]["completion_tokens"] == 4
            hold.close()  # the hog gives up: its reservation and blocks come back
        await wait_free(_Srv(engine), baseline)
        assert engine.num_free_blocks() == baseline
    finally:
        await server.close()


class _Srv:  # what wait_free reads
    def __init__(self, engine) -> None:
        self.engine = engine

    def free(self) -> int:
        return self.engine.num_free_blocks()


@pytest.mark.asyncio
async def test_a_bearer_token_is_no_identity_without_an_api_key():
    """No --api-key and no tenant header: every client is the anonymous tenant, so rotating an
    unchecked bearer token does not mint a fresh tenant with a fresh quota."""
    server, engine = await _start()
    url = f"http://127.0.0.1:{server.port}/v1/completions"
    model = engine.model_name
    try:
        baseline = engine.num_free_blocks()
        async with aiohttp.ClientSession() as http:
            hold = await _hold_quota(http, url, model, {"Authorization": "Bearer first"})
            for token in ("second", "third"):
                await _assert_over_quota(http, url, model,
                                         {"Authorization": f"Bearer {token}"}, None)
            hold.close()
        await wait_free(_Srv(engine), baseline)
        assert engine.num_free_blocks() == baseline
    finally:
        await server.close()


@pytest.mark.asyncio
async def test_child_requests_reserve_what_their_groups_hold_at_once():
    """NOTE(apart): n=3 past --max-num-seqs 2 runs as two children (2 forks, then 1), one at
    a time: 4 + 2 x 1 blocks of a 64-token prompt + 8 tokens at most, under a quota of 8.
    Charged n x one sequence's (3 x 5 = 15), it was refused; what exceeds the quota as forks
    (max_tokens 40: 4 + 2 x 3 = 10) is refused as children too."""
    server, engine = await _start({"max_num_seqs": 2}, tenant_header="X-Tenant-Id")
    url = f"http://127.0.0.1:{server.port}/v1/completions"
    req = {**body(8), "model": engine.model_name, "prompt": list(range(5, 69))}
    try:
        async with aiohttp.ClientSession() as http:
            async with http.post(url, json={**req, "n": 3}, headers={"X-Tenant-Id": "a"}) as r:
                assert r.status == 200, await r.text()
                assert len((await r.json())["choices"]) == 3
            async with http.post(url, json={**req, "n": 3, "max_tokens": 40},
                                 headers={"X-Tenant-Id": "a"}) as r:
                err = (await r.json())["error"]
                assert (r.status, err["code"]) == (400, "tenant_quota_exceeded"), err
                assert "may need 10 KV blocks" in err["message"], err
    finally:
        await server.close()


@pytest.mark.asyncio
async def test_child_requests_reserve_at_most_the_pool():
    """A quota as large as the pool: n=2 of 4 + 100 tokens cannot run as forks (2 x 7
    blocks of 8) and runs as children, which together can never hold more than the pool;
    charged 14 blocks, it was refused though its tenant may hold the whole pool."""
    server, engine = await _start({"num_device_blocks": QUOTA, "num_host_blocks": 0},
                                  tenant_header="X-Tenant-Id")
    url = f"http://127.0.0.1:{server.port}/v1/completions"
    try:
        async with aiohttp.ClientSession() as http:
            async with http.post(url, json={**body(100), "model": engine.model_name, "n": 2},
                                 headers={"X-Tenant-Id": "a"}) as r:
                assert r.status == 200, await r.text()
                assert len((await r.json())["choices"]) == 2
    finally:
        await server.close()
