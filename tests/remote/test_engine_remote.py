"""Two engines on one real redis-server: the read and write paths end to end.

Engine 1 computes a long prompt and stores its blocks; engine 2 (a fresh process's worth of
state, same model and seed) serves the same prompt with most blocks fetched from Redis, and
its greedy output is token-identical to a fresh compute. Faults (Redis killed, a corrupt
value) cost a recompute, never a failed request or a leaked block."""

from __future__ import annotations

import asyncio

from tests.remote.engines import (PROMPT, engine, fresh_tokens, run, settle, stop, stored,
                                  tokens)


async def test_engine_two_serves_engine_ones_prefix_from_redis(redis_server):
    want = await fresh_tokens(PROMPT)

    e1 = await engine(redis_server.url)
    assert tokens(await run(e1, PROMPT)) == want
    await settle(e1)
    assert e1.remote_link.tier.stats().puts >= 39
    await stop(e1)

    e2 = await engine(redis_server.url)
    got = await run(e2, PROMPT)
    assert tokens(got) == want  # fetched KV gives the same greedy tokens as computing it
    limit = (len(PROMPT) - 1) // 16
    assert e2.reader.stats.fetched_blocks >= 0.9 * limit
    assert e2.imports.adopted_blocks == e2.reader.stats.fetched_blocks
    assert got.num_cached_tokens >= 0.9 * limit * 16  # the scheduler hit them locally
    # tenant B (another cache_salt) shares nothing with tenant A's stored blocks
    hits_before = e2.remote_link.tier.stats().hit_blocks
    fetched_before = e2.reader.stats.fetched_blocks
    b = await run(e2, PROMPT, salt="tenant-b")
    assert tokens(b) == want and b.num_cached_tokens == 0
    assert e2.remote_link.tier.stats().hit_blocks == hits_before  # 0 remote hits for B
    assert e2.reader.stats.fetched_blocks == fetched_before
    await stop(e2)


async def test_redis_killed_mid_run_requests_recompute(redis_server):
    want = await fresh_tokens(PROMPT)
    await stop(await stored(redis_server.url))
    e2 = await engine(redis_server.url)
    redis_server.kill()
    outs = await asyncio.gather(*(run(e2, PROMPT) for _ in range(3)),
                                run(e2, PROMPT[:300]))
    assert all(tokens(o) == want for o in outs[:3])
    assert e2.reader.stats.fetched_blocks == 0
    await settle(e2)
    await stop(e2)


async def test_corrupt_value_is_a_miss_and_the_output_is_right(redis_server):
    import redis
    want = await fresh_tokens(PROMPT)
    e1 = await stored(redis_server.url)
    hashes = e1.core.manager.hasher.hash_blocks(PROMPT)
    key = e1.remote_link.group_keys(hashes)[0]  # the first block: the whole run is unusable
    await stop(e1)
    r = redis.Redis.from_url(redis_server.url)
    v = bytearray(r.get(key))
    v[-1] ^= 0xFF
    r.set(key, bytes(v))
    e2 = await engine(redis_server.url)
    assert tokens(await run(e2, PROMPT)) == want
    assert e2.remote_link.tier.stats().errors.get("corrupt", 0) == 1
    assert e2.reader.stats.fetched_blocks == 0
    assert r.get(key) is None or r.get(key) != bytes(v)  # deleted (or rewritten whole)
    r.close()
    await stop(e2)


async def test_write_back_stores_evicted_blocks(redis_server):
    # NOTE: this checks what is stored and fetched, not the deadlines: on a loaded 2-core CI
    # box engine 2 once fetched nothing, which a missed 250 ms round trip or 500 ms fetch
    # explains (the assertion now prints the stats that would tell); later engine 1 wrote
    # nothing: "Timeout connecting to server" under the 0.2 s connect deadline opened its
    # breaker, as in tests/remote/conftest.py make_tier's note.
    slow_box = dict(op_timeout_ms=5000.0, prefetch_timeout_ms=10_000.0,
                    connect_timeout_ms=5000.0)
    e1 = await engine(redis_server.url, policy="write_back", **slow_box)
    await run(e1, PROMPT)
    for k in (11, 13):  # 2 x 60 blocks through a 96-block pool: every PROMPT block is evicted
        await run(e1, [(i * k + 5) % 500 + 1 for i in range(16 * 60)])
    await settle(e1)
    wrote = (e1.remote_link.tier.stats(), e1.writer.staged, e1.writer.dropped)
    assert wrote[0].puts > 0, wrote
    await stop(e1)
    e2 = await engine(redis_server.url, policy="write_back", **slow_box)
    want = await fresh_tokens(PROMPT)
    assert tokens(await run(e2, PROMPT)) == want
    assert e2.reader.stats.fetched_blocks >= 0.9 * ((len(PROMPT) - 1) // 16), (
        e2.reader.stats, e2.remote_link.tier.stats(), wrote)
    await settle(e2)
    await stop(e2)


async def test_the_op_timeout_is_the_tiers_round_trip_deadline(redis_server):
    """``--remote-op-timeout-ms`` reaches the tier: with Redis stopped for 0.6 s, a 5 s
    deadline waits it out and finds the chain, a 50 ms one is a timeout (a miss)."""
    e1 = await stored(redis_server.url)
    await stop(e1)
    keys = e1.remote_link.group_keys(e1.core.manager.hasher.hash_blocks(PROMPT, None))[:40]
    for ms, found, timeouts in ((5000.0, 40, 0), (50.0, 0, 1)):
        e = await engine(redis_server.url, op_timeout_ms=ms)
        tier = e.remote_link.tier
        try:
            redis_server.pause()
            asyncio.get_running_loop().call_later(0.6, redis_server.resume)
            assert await tier.probe(keys) == found
            assert tier.stats().errors.get("timeout", 0) == timeouts, tier.stats()
        finally:
            redis_server.resume()
            await stop(e)
