"""A Redis that answers the replica's warm-up late (a loaded host; here a real redis-server
held by ``CLIENT PAUSE``): the warm-up is False and the breaker opens, then, once Redis
answers, the tier ends up as a replica whose warm-up worked (NOTE(warm-later) in
kvpool/remote/startup.py), and nothing on the way calls it unreachable."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import time

import redis

from kvpool.remote import CircuitBreaker
from kvpool.remote import startup
from kvpool.remote.segments import PROBE_LUA

WAIT_S = 10.0  # bound on the recovery (it takes ~reset_s after the pause ends)


def warm(admin: redis.Redis, sha: str, base: int, n: int) -> bool:
    """Does the server hold what a warm-up leaves: the probe script and ``n`` connections
    beyond the ``base`` ones (the pool keeps them open)?"""
    return (admin.script_exists(sha)[0]
            and int(admin.info("clients")["connected_clients"]) >= base + n)


async def test_a_warm_up_redis_answered_late_is_done_once_it_answers(make_tier, redis_server,
                                                                     monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="kvpool.remote")
    monkeypatch.setattr(startup, "SETUP_S", 0.5)  # the setup bound, short for the test
    admin = redis.Redis(port=redis_server.port, single_connection_client=True)
    sha = hashlib.sha1(PROBE_LUA.encode()).hexdigest()  # the probe script's name in Redis
    base = int(admin.info("clients")["connected_clients"])  # admin's own included
    tier = make_tier(max_connections=4, breaker=CircuitBreaker(threshold=3, reset_s=0.2))
    admin.execute_command("CLIENT", "PAUSE", 1000, "ALL")  # Redis answers 1 s from now
    assert not await tier.warm_up(4)
    assert tier.stats().errors == {"timeout": 1} and tier.stats().breaker_opens == 1
    t0 = time.monotonic()
    while not await asyncio.to_thread(warm, admin, sha, base, 4):
        assert time.monotonic() - t0 < WAIT_S, (
            f"no warm-up {WAIT_S} s after Redis answered: script loaded "
            f"{admin.script_exists(sha)[0]}, {admin.info('clients')['connected_clients']} "
            f"connections ({base} not the tier's), {tier.stats()}")
        await asyncio.sleep(0.05)
    assert tier.stats().breaker_state == 0
    said = [r.getMessage() for r in caplog.records]
    assert any("did not answer in time at startup (timeout)" in m for m in said), said
    assert not any("not reachable" in m for m in said), said
    assert any(m.endswith("policy allkeys-lru") and "is reachable" in m for m in said), said
    admin.close()


async def test_info_at_warm_up_is_bounded_as_the_warm_up_is(make_tier):
    """INFO was sent under a request's deadline (``op_timeout``, 0.25 s): a loaded host that
    answered the warm-up's connections and script in time but INFO past 0.25 s read
    "did not answer" at startup. Here a deadline nothing meets stands in for that host."""
    tier = make_tier(op_timeout=1e-6)
    assert await tier.warm_up()
    assert tier.stats().errors == {}
