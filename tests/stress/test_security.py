"""Security: tenant isolation of the prefix cache, the per-tenant block quota, the API key
check, request bounds, and the hostile-input table (real servers on 127.0.0.1)."""

from __future__ import annotations

import argparse
import asyncio
import hmac
import json
import time

import aiohttp
import pytest

from kvpool.runtime.engine.async_engine import AsyncEngine, collect
from kvpool.runtime.engine.config import EngineConfig
from kvpool.runtime.model import SamplingParams
from kvpool.server import serve
from kvpool.server.app import DEFAULT_MAX_BODY_BYTES, GATE_KEY
from kvpool.server.quota import TenantBlockQuota
from stress.http.hostile import hostile_cases
from stress.http.metrics import MetricsScrape
from tests.stress.conftest import assert_clean, stress_config

SYSTEM = "You are a careful assistant for tenant data. " * 3  # 138 chars: 8 full blocks
NORMAL = {"prompt": "hello there", "max_tokens": 4, "temperature": 0}


async def post(url: str, body: dict | None = None, *, data: bytes | None = None,
               headers: dict | None = None, method: str = "POST") -> tuple[int, dict]:
    async with aiohttp.ClientSession() as s:
        async with s.request(method, url, json=body if data is None else None, data=data,
                             headers=headers) as r:
            raw = await r.read()
            try:
                return r.status, json.loads(raw)
            except ValueError:
                return r.status, {"raw": raw[:200]}


async def metrics(base: str) -> MetricsScrape:
    async with aiohttp.ClientSession() as s, s.get(base + "/metrics") as r:
        return MetricsScrape.parse(await r.text())


# ---------------------------------------------------------------- tenant isolation
async def test_same_prompt_two_salts_share_no_block():
    engine = AsyncEngine(stress_config())
    engine.invariant_check_interval = 1
    await engine.start()
    long = SamplingParams(max_tokens=48, temperature=0, ignore_eos=True)
    try:
        a1 = engine.generate("a1", SYSTEM, long, cache_salt="tenant-a")
        first = await anext(a1)  # a1's prompt is computed and registered
        assert not first.finished
        a2 = engine.generate("a2", SYSTEM, long, cache_salt="tenant-a")
        b1 = engine.generate("b1", SYSTEM, long, cache_salt="tenant-b")
        u1 = engine.generate("u1", SYSTEM, long)  # no salt: the shared tenant
        await asyncio.gather(anext(a2), anext(b1), anext(u1))  # all running now
        mgr, sched = engine.core.manager, engine.core.scheduler
        with mgr.batch():  # a quiescent view of the tables (the step thread waits)
            blocks = {rid: {b for s in sched.seq_ids(rid) if mgr.has_seq(s)
                            for b in mgr.get_block_table(s)} for rid in ("a1", "a2", "b1", "u1")}
        assert blocks["a1"] & blocks["a2"], "control: the same tenant shares its prefix"
        for x, y in (("a1", "b1"), ("a2", "b1"), ("a1", "u1"), ("b1", "u1")):
            assert not blocks[x] & blocks[y], f"{x} and {y} share blocks across tenants"
        outs = {rid: await collect(s) for rid, s in (("a1", a1), ("a2", a2), ("b1", b1),
                                                       ("u1", u1))}
        assert outs["a2"].num_cached_tokens > 0
        assert outs["b1"].num_cached_tokens == 0 and outs["u1"].num_cached_tokens == 0
        # the same tokens come out: isolation changes caching, never results
        assert len({o.outputs[0].token_ids for o in outs.values()}) == 1
    finally:
        await engine.shutdown()
    assert_clean(engine)


async def test_prefix_hit_not_observable_across_tenants(make_server):
    with make_server() as srv:
        url = srv.url + "/v1/completions"
        body = {"prompt": SYSTEM + "question one", "max_tokens": 2, "temperature": 0}
        for _ in range(2):  # tenant a warms the cache and hits it
            status, resp = await post(url, {**body, "cache_salt": "tenant-a"})
            assert status == 200
        assert resp["usage"]["prompt_tokens_details"]["cached_tokens"] > 0
        before = (await metrics(srv.url)).get("kvpool_prefix_cache_hits_total")
        for salt in ("tenant-b", "tenant-c", None):
            b = {**body, "cache_salt": salt} if salt else body
            status, resp = await post(url, b)
            assert status == 200
            assert resp["usage"]["prompt_tokens_details"]["cached_tokens"] == 0, salt
        after = (await metrics(srv.url)).get("kvpool_prefix_cache_hits_total")
        assert after == before, "another tenant's request hit tenant a's cached blocks"


# ---------------------------------------------------------------- quota
def test_quota_accounting_unit():
    q = TenantBlockQuota(10)
    assert q.try_reserve("a", 6) and not q.try_reserve("a", 5) and q.try_reserve("b", 10)
    q.release("a", 6)
    assert q.reserved("a") == 0 and q.reserved("b") == 10
    with pytest.raises(AssertionError):
        q.release("a", 1)
    with pytest.raises(ValueError):
        TenantBlockQuota(0)


async def test_tenant_block_quota_caps_one_tenant(make_server):
    quota = 10
    with make_server(tenant_block_quota=quota, num_device_blocks=64) as srv:
        url = srv.url + "/v1/completions"
        # 21 + 43 = 64 tokens = 4 blocks reserved each: two fit in 10, the third must wait
        body = {"prompt": "x" * 20, "max_tokens": 43, "temperature": 0, "ignore_eos": True,
                "cache_salt": "greedy-tenant"}
        peak = 0
        done = asyncio.Event()

        async def watch():
            nonlocal peak
            while not done.is_set():  # only this tenant runs: used blocks are all its own
                peak = max(peak, srv.engine.core.manager.stats().device.num_used)
                await asyncio.sleep(0.002)

        watcher = asyncio.create_task(watch())
        flood = [post(url, {**body, "prompt": f"{i}" + "x" * 19}) for i in range(6)]
        results = await asyncio.gather(*flood)
        done.set()
        await watcher
        codes = sorted(s for s, _ in results)
        assert codes.count(200) >= 2 and 429 in codes, codes
        rejected = next(r for s, r in results if s == 429)
        assert rejected["error"]["code"] == "tenant_quota_exceeded"
        assert 0 < peak <= quota, f"tenant held {peak} blocks, quota {quota}"
        # another tenant is not blocked by the first one's flood
        other = [post(url, {**body, "cache_salt": "quiet-tenant"}),
                 post(url, {**body, "cache_salt": "greedy-tenant"})]
        (s_other, _), _ = await asyncio.gather(*other)
        assert s_other == 200
        # a request that can never fit the quota is a 400, not a retry forever
        status, resp = await post(url, {**body, "max_tokens": 64, "n": 4})
        assert status == 400 and resp["error"]["code"] == "tenant_quota_exceeded"
        # the tenant is the identity (no API key, no header: the anonymous tenant), never
        # the client-chosen cache_salt
        assert srv.app[GATE_KEY].quota.reserved("") == 0


async def test_quota_released_when_the_client_disconnects(make_server):
    with make_server(tenant_block_quota=8) as srv:
        q = srv.app[GATE_KEY].quota
        body = {"prompt": "abc", "max_tokens": 60, "temperature": 0, "ignore_eos": True,
                "stream": True, "cache_salt": "t"}
        async with aiohttp.ClientSession() as s:
            r = await s.post(srv.url + "/v1/completions", json=body)
            assert r.status == 200
            await r.content.readline()
            assert q.reserved("") == 4 and q.reserved("t") == 0  # keyed on identity, not salt
            r.close()
        t0 = time.monotonic()
        while q.reserved("") and time.monotonic() - t0 < 5:
            await asyncio.sleep(0.01)
        assert q.reserved("") == 0


def test_quota_is_off_by_default_and_a_serve_flag():
    args = serve.add_serve_args(argparse.ArgumentParser()).parse_args([])
    assert args.tenant_block_quota is None and args.invariant_check_interval == 0
    args = serve.add_serve_args(argparse.ArgumentParser()).parse_args(
        ["--tenant-block-quota", "100", "--invariant-check-interval", "8"])
    assert args.tenant_block_quota == 100 and args.invariant_check_interval == 8


# ---------------------------------------------------------------- API key
async def test_api_key_checked_in_constant_time(make_server, monkeypatch):
    calls = []
    real = hmac.compare_digest

    def spy(a, b):
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(hmac, "compare_digest", spy)
    key = "sk-test-0123456789abcdef"
    with make_server(api_key=key) as srv:
        url = srv.url + "/v1/completions"
        wrong = [None, "Bearer " + key[:-1] + "X", "Bearer " + key[:5], "Bearer  " + key,
                 "Bearer " + key + "0", "Basic " + key, "Bearer " + "k" * 5000]
        for header in wrong:
            h = {"Authorization": header} if header else {}
            status, resp = await post(url, NORMAL, headers=h)
            assert status == 401 and resp["error"]["code"] == "invalid_api_key", header
        status, _ = await post(url, NORMAL, data=json.dumps(NORMAL).encode(),
                               headers={"Authorization": "Bearer \u00e9\u00e9".encode()
                                        .decode("latin-1"),
                                        "Content-Type": "application/json"})
        assert status == 401  # non-ASCII header bytes: still a clean 401
        for scheme in ("Bearer", "bearer"):  # the scheme in any case (RFC 7235, as vLLM)
            status, _ = await post(url, NORMAL, headers={"Authorization": f"{scheme} {key}"})
            assert status == 200
        for path in ("/health", "/metrics"):  # open for probes and scrapers
            async with aiohttp.ClientSession() as s, s.get(srv.url + path) as r:
                assert r.status == 200
    # every /v1 request went through hmac.compare_digest with the whole token, whatever its
    # length: no early exit on a length or prefix mismatch
    assert len(calls) == len(wrong) + 3
    assert all(b == key.encode() for _, b in calls)
    assert {len(a) for a, _ in calls} > {len(key)}


# ---------------------------------------------------------------- bounds
def test_bounds_have_safe_defaults():
    cfg = EngineConfig()
    assert DEFAULT_MAX_BODY_BYTES <= 16 * 1024 * 1024
    # max_tokens_limit None: bounded by the context (prompt + max_tokens <= max_model_len)
    # n: vLLM's cap (16384), but no request runs more sequences than --max-num-seqs (a 400)
    assert min(cfg.max_n, cfg.max_num_seqs) <= 64 and cfg.max_tokens_limit is None
    assert cfg.max_stop <= 64
    assert cfg.max_queue <= 100_000
    dests = {a.dest for a in serve.add_serve_args(argparse.ArgumentParser())._actions}
    assert {"max_body_bytes", "max_n", "max_tokens_limit", "max_stop", "max_model_len",
            "max_queue", "tenant_block_quota"} <= dests


async def test_bounds_enforced_at_the_limit(make_server):
    with make_server(max_n=3, max_tokens_limit=20, max_stop=2, max_model_len=64,
                     max_body_bytes=4096) as srv:
        url = srv.url + "/v1/completions"
        ok = {"prompt": "hi", "max_tokens": 20, "n": 3, "stop": ["a", "b"], "temperature": 0}
        status, _ = await post(url, ok)
        assert status == 200
        for extra, param in (({"n": 4}, "n"), ({"max_tokens": 21}, "max_tokens"),
                             ({"stop": ["a", "b", "c"]}, "stop"),
                             ({"prompt": "y" * 64}, "prompt")):
            status, resp = await post(url, {**ok, **extra})
            assert status == 400 and resp["error"]["param"] == param, (extra, resp)
        # prompt + max_tokens past the context: served, max_tokens lowered (NOTE(clamp))
        status, resp = await post(url, {**ok, "prompt": "y" * 50, "ignore_eos": True})
        assert status == 200, resp
        room = 64 - resp["usage"]["prompt_tokens"]
        assert resp["usage"]["completion_tokens"] == 3 * room < 3 * 20, resp
        status, resp = await post(url, data=b'{"prompt": "' + b"z" * 5000 + b'"}',
                                  headers={"Content-Type": "application/json"})
        assert status == 413 and resp["error"]["code"] == "request_too_large"


# ---------------------------------------------------------------- hostile table
async def test_hostile_table_each_gets_its_answer_and_the_server_keeps_serving(make_server):
    limit = 64 * 1024
    with make_server(max_body_bytes=limit) as srv:
        # one keep-alive connection for everything, as a pooled client has: an answer after
        # which the server closes must say "Connection: close", or the next request fails
        conn = aiohttp.TCPConnector(limit=1)
        async with aiohttp.ClientSession(connector=conn) as s:
            for case in hostile_cases(limit):
                async with s.request(case.method, srv.url + case.path, data=case.body(),
                                     headers=case.headers) as r:
                    raw = await r.read()
                    assert r.status in case.expect, (case.name, r.status, raw[:200])
                    if case.expects_error:
                        err = json.loads(raw)["error"]
                        assert err["message"] and set(err) == {"message", "type", "param",
                                                               "code"}, case.name
                        assert r.headers["Content-Type"].startswith("application/json")
                async with s.post(srv.url + "/v1/completions", json=NORMAL) as r:
                    raw = await r.read()
                    assert r.status == 200, f"normal request failed after {case.name}: {raw!r}"
        assert srv.engine.is_healthy()


async def test_big_prompt_cases_are_context_length_exceeded_at_full_size(make_server):
    """Issue 12 item 3 at its real sizes (4 MB body limit): refused before tokenizing."""
    limit = 4 * 1024 * 1024
    big = {"prompt_4mb_string", "prompt_2m_token_ids", "chat_4mb_message"}
    with make_server(max_body_bytes=limit) as srv:
        cases = [c for c in hostile_cases(limit) if c.name in big]
        assert {c.name for c in cases} == big
        for case in cases:
            body = case.body()
            assert len(body) > 3 * 1024 * 1024 and len(body) < limit, case.name
            async with aiohttp.ClientSession() as s:
                async with s.post(srv.url + case.path, data=body, headers=case.headers) as r:
                    err = (await r.json())["error"]
                    assert r.status == 400 and err["code"] == "context_length_exceeded", (
                        case.name, err)
        status, resp = await post(srv.url + "/v1/completions", NORMAL)
        assert status == 200, resp
