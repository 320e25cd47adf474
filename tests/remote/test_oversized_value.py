"""A string far larger than any value of the tier's namespace, written under one of its keys
by someone else, is dropped by the probe (real redis-server on loopback): it was counted
present, so the request's MGET read all of it (tens of MB, past the deadline: a timeout that
opened the breaker for every key of the tier), nothing deleted it, and each later request for
that prefix did it again."""

from __future__ import annotations

import redis

from kvpool.remote import BreakerState
from tests.remote.chains import chain
from tests.remote.conftest import NS

BLOCK = 256  # bytes per block of this codec: a value is its header and one block


async def test_an_oversized_value_ends_the_run_and_is_deleted(make_tier, redis_server):
    tier = make_tier(block_nbytes=BLOCK)
    hashes = chain(4, salt="oversized")
    its = [(NS.key(h), tier.codec.encode(h, [bytes([i]) * BLOCK])) for i, h in enumerate(hashes)]
    keys = [k for k, _ in its]
    assert await tier.put_many(its) == 4
    r = redis.Redis(port=redis_server.port)
    try:
        r.set(keys[2], its[2][1] + b"\0" * (32 << 20))  # a valid head, 32 MiB after it
        assert await tier.probe(keys) == 2  # the run ends there, as at a key of another type
        assert r.exists(keys[2]) == 0 and r.exists(keys[3]) == 1
        assert await tier.get_many(keys[:2]) == [v for _, v in its[:2]]
        st = tier.stats()
        assert st.breaker_state == int(BreakerState.CLOSED) and "timeout" not in st.errors, st
        assert await tier.put_many(its[2:3]) == 1  # the next write heals the prefix
        assert await tier.probe(keys) == 4
    finally:
        r.close()


async def test_a_value_of_the_right_size_is_not_cut(make_tier, redis_server):
    """Signed or not, a value of the codec's size stays (the bound is the largest it writes)."""
    tier = make_tier(block_nbytes=BLOCK)
    hashes = chain(2, salt="fits")
    its = [(NS.key(h), tier.codec.encode(h, [b"\1" * BLOCK])) for h in hashes]
    assert await tier.put_many(its) == 2
    assert await tier.probe([k for k, _ in its]) == 2
