"""The per-tenant prefix cache through the router: a real ``kvpool serve --tenant-header X-Tenant``
(stopped by pid) behind a real router on 127.0.0.1. Tenant b, asking through the router for the
prompt tenant a sent, gets no hit, neither predicted (the router's lookup) nor reported
(``cached_tokens``); each tenant's own repeat hits, and what the router predicted for every
request equals what the replica then reported as cached."""

from __future__ import annotations

import aiohttp
import pytest

from tests.router.helpers import metrics, prompt, router, spawn

TENANT = "X-Tenant"
PREDICTED = "kvpool_router_predicted_hit_tokens_total"


@pytest.fixture(scope="module")
def tenant_replica():
    srv = spawn("tenant-cache", "--tenant-header", TENANT)
    try:
        yield srv.url
    finally:
        srv.stop(timeout=20)


async def test_through_the_router_a_tenant_sees_only_its_own_prefix_hits(tenant_replica):
    body = {"prompt": prompt("secret"), "max_tokens": 1, "temperature": 0}
    async with router([tenant_replica]) as (_, url), aiohttp.ClientSession() as s:
        async def cached(tenant: str) -> int:
            before = (await metrics(s, url))[PREDICTED][()]
            async with s.post(url + "/v1/completions", json=body,
                              headers={TENANT: tenant}) as r:
                out = await r.json()
                assert r.status == 200, out
            got = out["usage"]["prompt_tokens_details"]["cached_tokens"]
            predicted = (await metrics(s, url))[PREDICTED][()] - before
            assert predicted == got, f"router predicted {predicted}, replica cached {got}"
            return got

        assert await cached("a") == 0
        assert await cached("b") == 0  # a's prompt is no hit for b: no oracle
        own = await cached("a")
        assert own > 0
        assert await cached("b") == own  # what b itself sent
