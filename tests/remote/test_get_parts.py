"""get_many sends its keys as at most GET_PARTS MGETs at once (O(1) round trips, whatever the
number of blocks), returns the values in key order across the parts, and a failing part fails
the call once (one breaker failure, not one per part)."""

from __future__ import annotations

import asyncio

import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvpool.remote import BreakerState
from kvpool.remote.redis_tier import GET_PARTS
from tests.remote.conftest import NS
from tests.remote.redis_stats import mget_calls


def _hashes(n: int, tag: int = 0) -> list[bytes]:
    return [bytes([tag]) + i.to_bytes(31, "little") for i in range(n)]


async def test_mget_count_is_bounded_not_per_block(make_tier, redis_server):
    tier = make_tier()
    hs = _hashes(64)
    keys = NS.group_keys(hs)
    # 300 KiB values: large enough that every part is checked in a worker thread
    assert await tier.put_many([(k, tier.codec.encode(h, [bytes([i]) * (300 << 10)]))
                                for i, (k, h) in enumerate(zip(keys, hs))]) == 64
    for n in (1, 3, 64):
        before = mget_calls(redis_server.url)
        values = await tier.get_many(keys[:n])
        assert mget_calls(redis_server.url) - before == min(n, GET_PARTS)
        assert [bytes(tier.codec.split(v)[0][:1]) for v in values] == \
            [bytes([i]) for i in range(n)]
    assert not tier.stats().errors


@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(present=st.lists(st.booleans(), min_size=1, max_size=13),
       corrupt=st.lists(st.integers(0, 12), max_size=3))
async def test_values_stay_in_key_order_across_parts(make_tier, redis_server, present,
                                                     corrupt):
    tier = make_tier()
    r = redis.Redis.from_url(redis_server.url)
    try:
        r.flushall()
        hs = _hashes(len(present), tag=7)
        keys = NS.group_keys(hs)
        values = {k: tier.codec.encode(h, [bytes([i + 1]) * 200])
                  for i, (k, h) in enumerate(zip(keys, hs)) if present[i]}
        bad = {keys[i] for i in corrupt if i < len(keys) and keys[i] in values}
        for k, v in values.items():  # a flipped payload byte: corrupt, a miss, deleted
            r.set(k, v[:-1] + bytes([v[-1] ^ 1]) if k in bad else v)
        got = await tier.get_many(keys)
        assert got == [values[k] if k in values and k not in bad else None for k in keys], \
            tier.stats().errors
        assert all(r.exists(k) == 0 for k in bad)
    finally:
        r.close()


async def test_a_failing_part_is_one_failure(make_tier, redis_server):
    tier = make_tier(op_timeout=0.1, connect_timeout=0.2)
    hs = _hashes(8, tag=9)
    keys = NS.group_keys(hs)
    assert await tier.put_many([(k, tier.codec.encode(h, [b"x" * 64]))
                                for k, h in zip(keys, hs)]) == 8
    redis_server.pause()  # SIGSTOP: every part's MGET hangs until the deadline
    try:
        assert await tier.get_many(keys) == [None] * 8
    finally:
        redis_server.resume()
    st = tier.stats()
    assert st.errors == {"timeout": 1}, st.errors
    # a missed deadline opens the breaker at once; the call's 4 parts are one call, one
    # event (one opening, nothing counted as "joined")
    assert tier.breaker.state is not BreakerState.CLOSED and st.breaker_opens == 1
    for _ in range(100):  # the tier's own PING closes it (the fixture's reset_s is 0.5)
        if tier.breaker.state is BreakerState.CLOSED:
            break
        await asyncio.sleep(0.05)
    # then a hit, once a 0.1 s MGET gets through: on a loaded CI box the first MGET after
    # the resume once timed out (a miss) and opened the breaker again
    for _ in range(50):
        if await tier.get_many(keys[:1]) != [None]:
            break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError(f"the tier never read the value again: {tier.stats().errors}")
