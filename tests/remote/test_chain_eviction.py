"""Redis's LRU keeps whole prefix chains, not every key but the head (a real redis-server with a
small maxmemory and allkeys-lru, two real engines).

A replica reads a hot chain head (a shared system prompt) from its own prefix cache on every
request, so its reader used to probe Redis only beyond it: the head was never touched there,
aged as the oldest keys of the tier and was evicted first, and a hole at the head makes every
chain under it unusable for every other replica (a recently sent prompt got 0 of its blocks).

Redis's LRU clock has a resolution of one second, and keys touched within the same second tie
and are evicted at random among themselves (no client can order them). A tier in use turns
its content over in minutes; this small one would in about a second, so the prompts are
paced (PACE) to let the tier's content span several ticks of that clock, as it would."""

from __future__ import annotations

import asyncio

import pytest
import redis

from bench.redis_servers import RedisServer
from tests.remote.engines import engine, run, settle, stop

BS = 16
HEAD = [(i * 13 + 1) % 500 + 1 for i in range(8 * BS)]  # 8 blocks every prompt starts with
PACE = 0.35  # seconds between prompts: the tier's content spans several LRU ticks


def prompt(i: int) -> list[int]:
    """HEAD + 24 blocks of its own + a tail: 32 full blocks."""
    return HEAD + [(j * (2 * i + 3) + i) % 500 + 1 for j in range(24 * BS + 5)]


@pytest.fixture
def small_redis():
    srv = RedisServer(maxmemory="12mb")  # about 270 values of a tiny-model block
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


async def test_a_recent_prompt_gets_its_blocks_back_though_its_head_is_only_read_locally(
        small_redis):
    url = small_redis.url
    r = redis.Redis.from_url(url)
    a = await engine(url, prefetch_timeout_ms=5000)
    head_key = None
    for i in range(25):  # 24 x 24 values after the first prompt: twice the tier's capacity
        await run(a, prompt(i))
        await settle(a)
        if head_key is None:  # stored by the first prompt, read locally from then on
            head_key = a.remote_link.group_keys(a.core.manager.hasher.hash_blocks(HEAD))[0]
        await asyncio.sleep(PACE)
    capacity = r.dbsize()
    assert r.info()["evicted_keys"] >= capacity  # overfilled
    idle = r.object("idletime", head_key)  # refreshed by every request that read it locally
    recent = prompt(100)
    await run(a, recent)
    await settle(a)
    await run(a, prompt(101))  # 24 values written after it: < 10% of the tier's capacity
    await settle(a)
    assert 24 < 0.1 * capacity, capacity
    await stop(a)
    b = await engine(url, policy="off", prefetch_timeout_ms=5000)  # another replica
    await run(b, recent)
    full = (len(recent) - 1) // BS
    assert b.reader.stats.fetched_blocks >= 0.9 * full, (b.reader.stats, idle)
    assert idle is not None and idle <= 2, idle  # None: evicted
    await stop(b)
    r.close()
