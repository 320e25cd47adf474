"""The router's edge: request bodies and headers it refuses, headers it forwards, identity.

The router is served the way ``kvpool router`` serves it (cli.listen). Most tests need no live
replica (port 9 refuses: the router answers itself); the tenant test starts one real
``kvpool serve --tenant-header X-Tenant --tenant-block-quota`` (stopped by pid).
"""

from __future__ import annotations

import asyncio
import threading
import time
import urllib.error
import urllib.request
import uuid

import aiohttp
import pytest
from multidict import CIMultiDict

from kvpool.router.relayed import CHECKED_VALUES, request_headers, response_headers
from kvpool.router.proxy import Router
from kvpool.router.replicas import ReplicaSet
from kvpool.server.json_body import DEFAULT_MAX_BODY_BYTES
from tests.router.helpers import router, served, spawn

NOWHERE = "http://127.0.0.1:9"  # nothing listens: every attempt is refused
HEALTH_BOUND = 1.0  # seconds: generous; a 43 MB body parsed on the loop stalled it 3.7 s
TENANT = "X-Tenant"
QUOTA = 100  # blocks of 16 tokens per tenant


def edge_router() -> Router:
    return Router(ReplicaSet([NOWHERE], interval=3600))


def assert_error_json(out: dict) -> dict:
    assert set(out) == {"error"} and set(out["error"]) == {"message", "type", "param", "code"}
    return out["error"]


class HealthProbe(threading.Thread):
    """GET /health back to back from a thread of its own: a stall of the router's loop (or
    of the GIL) shows in its latencies, whatever the test's own coroutines are doing."""

    def __init__(self, url: str) -> None:
        super().__init__(daemon=True)
        self.url = url
        self.took: list[float] = []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            t0 = time.monotonic()
            try:
                with urllib.request.urlopen(self.url + "/health", timeout=30) as r:
                    r.read()
            except urllib.error.HTTPError as exc:  # 503 (no replica up) is an answer too
                exc.read()
            self.took.append(time.monotonic() - t0)
            self.stop.wait(0.02)


async def test_big_body_is_a_413_json_and_health_stays_answered():
    """43 MB of token ids: refused at the body bound, never parsed, /health answered all along."""
    raw = b'{"prompt": [' + b"0," * (43 * 1024 * 1024 // 2) + b'0]}'
    async with served(edge_router()) as url, aiohttp.ClientSession() as s:
        probe = HealthProbe(url)
        probe.start()
        try:
            await asyncio.sleep(0.1)
            async with s.post(url + "/v1/completions", data=raw,
                              headers={"Content-Type": "application/json"}) as r:
                status, out = r.status, await r.json()
            await asyncio.sleep(0.1)
        finally:
            probe.stop.set()
            await asyncio.to_thread(probe.join, 30)
    took = probe.took
    assert len(took) >= 3 and max(took) < HEALTH_BOUND, sorted(took)[-3:]
    assert status == 413, out
    assert assert_error_json(out)["code"] == "request_too_large"


async def test_large_bodies_are_checked_off_the_loop_within_the_value_bound():
    r = edge_router()
    async with served(r) as url, aiohttp.ClientSession() as s:
        unclosed = b'{"prompt": "' + b"a" * (1 << 20)  # 1 MiB, not JSON
        async with s.post(url + "/v1/completions", data=unclosed) as resp:
            assert resp.status == 400
            assert assert_error_json(await resp.json())["code"] == "invalid_json"
        assert r.bodies.off_loop == 1
        # more values than the router decodes: passed on for the replica to judge (none is
        # up here: 503), not decoded on the router
        many = b'{"prompt": [' + b"1," * CHECKED_VALUES + b"1]}"
        assert len(many) < DEFAULT_MAX_BODY_BYTES
        async with s.post(url + "/v1/completions", data=many) as resp:
            assert resp.status == 503
            assert resp.headers["Retry-After"] == "1"
            assert assert_error_json(await resp.json())["code"] == "no_replica"
        async with s.post(url + "/v1/chat/completions", data=b"[1, 2]") as resp:
            assert resp.status == 400  # small: checked inline, an array is not an object
            assert assert_error_json(await resp.json())["code"] == "invalid_json"


async def test_oversized_header_is_openai_error_json():
    async with served(edge_router()) as url, aiohttp.ClientSession() as s:
        async with s.post(url + "/v1/completions", json={"prompt": "hi"},
                          headers={"X-Big": "a" * 100_000}) as resp:
            assert resp.status in (400, 431)
            assert resp.headers["Content-Type"].startswith("application/json")
            assert_error_json(await resp.json())
        async with s.get(url + "/health") as resp:  # the router is fine afterwards
            assert resp.status == 503  # (no replica is up)
            assert (await resp.json())["status"] == "unavailable"


def test_end_to_end_headers_are_forwarded_hop_by_hop_ones_dropped():
    got = CIMultiDict([
        ("Host", "router:8080"), ("Content-Length", "12"), ("Connection", "keep-alive, X-Hop"),
        ("Keep-Alive", "timeout=5"), ("X-Hop", "1"), ("Proxy-Authorization", "Basic x"),
        ("TE", "trailers"), ("Transfer-Encoding", "chunked"), ("Upgrade", "h2c"),
        ("Authorization", "Bearer k"), ("Content-Type", "application/json"),
        ("Accept", "text/event-stream"), ("X-Request-Id", "req-1"), (TENANT, "acme"),
        ("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
        ("tracestate", "k=v"), ("X-Forwarded-For", "10.0.0.1"), ("X-Forwarded-For", "10.0.0.2"),
    ])
    assert request_headers(got) == [
        ("Authorization", "Bearer k"), ("Content-Type", "application/json"),
        ("Accept", "text/event-stream"), ("X-Request-Id", "req-1"), (TENANT, "acme"),
        ("traceparent", "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"),
        ("tracestate", "k=v"), ("X-Forwarded-For", "10.0.0.1"), ("X-Forwarded-For", "10.0.0.2"),
    ]
    back = CIMultiDict([("Content-Type", "application/json"), ("Retry-After", "1"),
                        ("Content-Length", "9"), ("Server", "Python"), ("Date", "today"),
                        ("Connection", "close"), ("X-Request-Id", "req-1")])
    assert response_headers(back) == [("Content-Type", "application/json"),
                                      ("Retry-After", "1"), ("X-Request-Id", "req-1")]


@pytest.fixture(scope="module")
def tenant_replica():
    srv = spawn("tenants", "--tenant-header", TENANT, "--tenant-block-quota", str(QUOTA))
    try:
        yield srv.url
    finally:
        srv.stop(timeout=20)


async def status_of(s, url, tenant, max_tokens):
    body = {"prompt": f"hi {uuid.uuid4().hex}", "max_tokens": max_tokens, "temperature": 0}
    async with s.post(url + "/v1/completions", json=body, headers={TENANT: tenant}) as r:
        await r.read()
        return r.status


async def test_a_tenant_has_the_same_identity_and_quota_through_the_router(tenant_replica):
    """Tenant a holds 94 of its 100 blocks with one stream sent through the router. Then, the
    same through the router as direct: a's next 13 blocks are over its quota (429), b's
    request is b's own (200). A router that dropped the header made everyone one tenant."""
    hog = {"prompt": "hold", "max_tokens": 1500, "ignore_eos": True, "stream": True,
           "temperature": 0}  # ceil(1502 / 16) = 94 blocks reserved
    async with router([tenant_replica]) as (_, url), \
            aiohttp.ClientSession() as s:
        async with s.post(url + "/v1/completions", json=hog, headers={TENANT: "a"}) as held:
            assert held.status == 200
            await held.content.readline()
            for where in (tenant_replica, url):
                assert await status_of(s, where, "a", 200) == 429, where
                assert await status_of(s, where, "b", 2) == 200, where
