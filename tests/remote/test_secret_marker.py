"""Replicas of one namespace keyed by different ``--remote-secret-file`` secrets, or one by
none, on a real redis-server (and a real cluster): since keyed names (keys.py
NOTE(keyed-names)) they share no key and silently missed each other's blocks; the secret
marker (kvpool/remote/secret_marker.py NOTE(secret-marker)) says it once, with the fix."""

from __future__ import annotations

import dataclasses
import logging

import redis

from kvpool.remote import CircuitBreaker, RedisTier, ValueCodec
from kvpool.remote.secret_marker import PLAIN, marker, marker_key
from tests.remote.breakers import warmed
from tests.remote.conftest import NS

S1 = b"correct horse battery staple 0123456789"
S2 = b"another secret, 16 bytes or more"
SAID = "another replica of this namespace writes it"
FIX = "give every replica the same --remote-secret-file"


def said(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if SAID in r.getMessage()]


def test_the_marker_vector_of_keys_py():
    assert marker_key(NS) == "kvp:2:29a6de07f8a04e4a:secret" and marker(NS) == PLAIN
    assert marker(NS.keyed(b"0123456789abcdef")) == b"keyed:e9b492aab0ac91b9"  # openssl too


async def test_another_secret_is_said_once_by_each_replica_with_the_fix(make_tier, caplog):
    caplog.set_level(logging.WARNING, "kvpool.remote")
    first, second = make_tier(NS.keyed(S1)), make_tier(NS.keyed(S2))
    w = await warmed(first)  # each warm-up may be answered late: NOTE(warmed)
    assert said(caplog) == []
    await warmed(second)
    (line,) = said(caplog)
    assert "with another --remote-secret-file" in line and FIX in line, line
    assert "share no blocks" in line and marker_key(NS) in line, line
    assert second.stats().errors.get("forged") == 1 and not w.stats().errors
    # the checks again (an outage's end): the first replica says it now, none says it twice
    for t in (first, second, first):
        await warmed(t)
    assert len(said(caplog)) == 2, said(caplog)
    assert first.stats().errors.get("forged") == 1 == second.stats().errors.get("forged")


async def test_the_same_secret_is_not_said(make_tier, caplog):
    caplog.set_level(logging.WARNING, "kvpool.remote")
    tiers = [make_tier(NS.keyed(S1)), make_tier(NS.keyed(S1)), make_tier(NS)]
    await warmed(tiers[0])  # NOTE(warmed) in tests/remote/breakers.py
    w = await warmed(tiers[1])
    assert said(caplog) == [] and not w.stats().errors
    other = dataclasses.replace(NS, model_id="another model")  # another namespace's marker
    await warmed(make_tier(other))
    assert said(caplog) == [], said(caplog)


async def test_a_secret_and_none_are_said_on_both_sides(make_tier, redis_server, caplog):
    caplog.set_level(logging.WARNING, "kvpool.remote")
    plain, keyed = make_tier(NS), make_tier(NS.keyed(S1))
    w = await warmed(plain)  # NOTE(warmed) in tests/remote/breakers.py
    await warmed(keyed)
    (line,) = said(caplog)
    assert "without --remote-secret-file while this replica has one" in line and FIX in line
    assert keyed.stats().errors.get("unsigned") == 1
    await warmed(plain)
    assert "with a --remote-secret-file while this replica has none" in said(caplog)[1]
    assert not w.stats().errors  # no kind counts a replica without a secret
    r = redis.Redis.from_url(redis_server.url)
    try:
        assert r.get(marker_key(NS)) == PLAIN  # the last checker's
        await warmed(keyed)
        value = r.get(marker_key(NS))
        assert value == marker(NS.keyed(S1)) and value.startswith(b"keyed:")
        assert S1 not in value and NS.keyed(S1).name_key.hex().encode() not in value
        r.delete(marker_key(NS))
        r.hset(marker_key(NS), "f", "v")  # a Redis error there skips the check, no more
        await warmed(keyed)
    finally:
        r.close()
    assert len(said(caplog)) == 2, said(caplog)


async def test_the_marker_works_on_a_cluster(redis_cluster, caplog):
    caplog.set_level(logging.WARNING, "kvpool.remote")
    ns = dataclasses.replace(NS, model_id="secret marker")  # the session cluster's own key
    tiers = [RedisTier(redis_cluster.url, ValueCodec(ns.keyed(s)), op_timeout=5.0,
                       connect_timeout=5.0, breaker=CircuitBreaker(threshold=3, reset_s=0.5))
             for s in (S1, S2)]
    try:
        for t in tiers:  # NOTE(warmed) in tests/remote/breakers.py
            await warmed(t)
    finally:
        for t in tiers:
            await t.aclose()
    (line,) = said(caplog)
    assert "with another --remote-secret-file" in line and FIX in line, line
