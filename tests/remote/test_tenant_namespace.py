"""Per-tenant prefix-cache namespaces reach the Redis tier: two real apps (``--tenant-header``)
on one real redis-server. Tenant A's prompt, stored by replica 1, is no hit for tenant B on
replica 2, and B's chain lands on keys of its own (none of A's); A itself gets its prefix back
from Redis on replica 2."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

import aiohttp
import redis.asyncio as aioredis
from aiohttp.test_utils import TestServer

from kvpool.runtime.engine.async_engine import AsyncEngine
from kvpool.server.app import build_app
from kvpool.server.cache_namespace import CacheNamespace
from kvpool.server.remote_setup import build_link
from tests.remote.engines import CONFIG, PROMPT, settle

HEADER = "X-Tenant-Id"
BLOCK = CONFIG.block_size
FULL_BLOCKS = (len(PROMPT) - 1) // BLOCK  # the last token is always computed


@contextlib.asynccontextmanager
async def replica(url: str) -> AsyncIterator[tuple[str, AsyncEngine]]:
    engine = AsyncEngine(CONFIG)
    engine.remote_link = build_link(engine, url, write_policy="write_through",
                                    prefetch_timeout_ms=5000)
    app = build_app(engine, tenant_header=HEADER, engine_shutdown_timeout=5.0)
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server(shutdown_timeout=5.0)
    try:
        yield f"http://127.0.0.1:{server.port}/v1", engine
    finally:
        await server.close()  # the engine's shutdown: blocks back, tier closed
    assert engine.core.manager.stats().device.num_used == 0, "leaked blocks"


async def cached(base: str, tenant: str) -> int:
    body = {"prompt": PROMPT, "max_tokens": 1, "temperature": 0}
    async with aiohttp.ClientSession() as s, s.post(base + "/completions", json=body,
                                                    headers={HEADER: tenant}) as r:
        out = await r.json()
        assert r.status == 200, out
    return out["usage"]["prompt_tokens_details"]["cached_tokens"]


def chain_keys(engine: AsyncEngine, tenant: str) -> set[str]:
    """The Redis keys of PROMPT's chain in ``tenant``'s namespace."""
    salt = CacheNamespace(identity=True).salt(tenant, None)
    hashes = engine.core.manager.hasher.hash_blocks(PROMPT, salt)
    return set(engine.remote_link.group_keys(hashes))


async def stored_keys(url: str) -> set[str]:
    r = aioredis.from_url(url)
    try:
        # the replicas' secret marker (kvpool/remote/secret_marker.py) names no block
        return {k.decode() for k in await r.keys("*") if not k.endswith(b":secret")}
    finally:
        await r.aclose()


async def test_tenants_get_disjoint_redis_keys_and_no_hits_on_each_other(redis_server):
    url = redis_server.url
    async with replica(url) as (v1, e1), replica(url) as (v2, e2):
        assert await cached(v1, "a") == 0
        await settle(e1)
        keys_a = await stored_keys(url)
        assert keys_a == chain_keys(e1, "a") and len(keys_a) == FULL_BLOCKS

        assert await cached(v2, "b") == 0  # A's blocks are in Redis, none of them B's
        await settle(e2)
        keys_b = await stored_keys(url) - keys_a
        assert keys_b == chain_keys(e2, "b") and len(keys_b) == FULL_BLOCKS
        assert not chain_keys(e2, "b") & keys_a  # the salted chains never meet

        assert await cached(v2, "a") >= 0.9 * FULL_BLOCKS * BLOCK  # A's own, from Redis
