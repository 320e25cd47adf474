"""Fixtures for the remote tier: a real redis-server on loopback (one per test that asks)."""

from __future__ import annotations

import pytest

from kvpool.remote import CircuitBreaker, Namespace, RedisTier, ValueCodec
from bench.redis_servers import REDIS_SERVER, RedisServer

NS = Namespace(model_id="tiny", weights="seed0", dtype="float32", block_size=16, layers=2,
               kv_heads=2, head_dim=16)


@pytest.fixture
def redis_server():
    """A fresh redis-server on 127.0.0.1 on a free port; stopped by pid at the end."""
    import os
    if not os.path.exists(REDIS_SERVER):
        pytest.fail(f"{REDIS_SERVER} is missing: apt-get install redis-server (.ci/run does)")
    srv = RedisServer()
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture
async def make_tier(redis_server):
    """``make_tier(namespace=NS, **kwargs)`` -> a RedisTier on the fixture's server.

    The round-trip and connect deadlines are 5 s unless a test sets ``op_timeout`` or
    ``connect_timeout``: these tests check what the tier stores and returns, and on a loaded
    2-core box one of them (64 values of 300 KiB) failed once with the product's 0.25 s, which
    a 19 MB put can miss there, and another once read three misses where Redis held a value
    (a fresh tier's first MGETs open their connections under the product's 0.2 s connect
    deadline). The tests of deadlines set their own."""
    tiers: list[RedisTier] = []

    def factory(namespace: Namespace = NS, block_nbytes: int | None = None,
                **kwargs) -> RedisTier:
        kwargs.setdefault("breaker", CircuitBreaker(threshold=3, reset_s=0.5))
        kwargs.setdefault("op_timeout", 5.0)
        kwargs.setdefault("connect_timeout", 5.0)
        t = RedisTier(redis_server.url, ValueCodec(namespace, block_nbytes), **kwargs)
        tiers.append(t)
        return t

    yield factory
    for t in tiers:
        await t.aclose()


def three_masters():
    """A 3-master Redis Cluster on 127.0.0.1 (free ports), stopped by pid after the yield:
    the body of the cluster fixtures, whatever their scope."""
    from bench.redis_servers import RedisClusterProcs
    c = RedisClusterProcs(masters=3)
    c.start()
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture
def own_cluster():
    """A cluster of the test's own, for tests that take nodes down, reset them or move
    slots (the session's ``redis_cluster`` is never harmed)."""
    yield from three_masters()


@pytest.fixture(scope="session")
def redis_cluster():
    """A cluster shared by the session: tests use their own keys and never take a node down
    (the failover tests start their own)."""
    yield from three_masters()
