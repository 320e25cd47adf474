"""INFO is advisory (NOTE(info-advisory)): a Redis user without ``+info`` is served, said
once with the ACL fix, and the first OOM's re-read of INFO (NOTE(oom-reread)) never touches
the tier's breaker: a refused re-read keeps the settings read before. Real redis-server with
an ACL user (the fixture's, stopped by pid)."""

from __future__ import annotations

import logging

import redis

from kvpool.remote import BreakerState, CircuitBreaker, RedisTier, ValueCodec
from tests.remote.breakers import warmed
from tests.remote.chains import chain_items
from tests.remote.conftest import NS
from tests.remote.test_diagnose import lines, logged


def _user(port: int, *rules: str) -> str:
    """ACL user ``kvp`` with ``rules``; its URL."""
    admin = redis.Redis(port=port)
    admin.acl_setuser("kvp", enabled=True, passwords=["+pw"], keys=["*"], commands=list(rules))
    admin.close()
    return f"redis://kvp:pw@127.0.0.1:{port}/0"


def _tier(url: str) -> RedisTier:
    return RedisTier(url, ValueCodec(NS), connect_timeout=5.0, op_timeout=5.0,
                     breaker=CircuitBreaker(threshold=3, reset_s=0.05), oom_pause_s=30.0)


async def test_a_user_without_info_is_served_said_once_with_the_acl_fix(redis_server, caplog):
    """It was "not usable": INFO's NOPERM opened the breaker, which closed and reopened
    every reset_s, the noperm line said each time."""
    caplog.set_level(logging.INFO, logger="kvpool.remote")
    tier = _tier(_user(redis_server.port, "+@all", "-info"))
    try:
        w = await warmed(tier)  # NOTE(warmed) in tests/remote/breakers.py
        its = chain_items(tier.codec, "noinfo", 4, 64)
        assert await tier.put_many(its) == 4 and await tier.probe([k for k, _ in its]) == 4
        assert tier.breaker.state is BreakerState.CLOSED and w.stats().breaker_opens == 0
        said = lines(caplog, "may not run INFO")
        assert len(said) == 1 and "ACL SETUSER USER +info" in said[0], caplog.text
        assert not lines(caplog, "lacks a permission") and lines(caplog, "settings unchecked")
    finally:
        await tier.aclose()


async def test_an_oom_whose_info_reread_is_refused_leaves_the_reads_served(redis_server,
                                                                            caplog):
    """The re-read went through the breaker: its NOPERM opened it, the pause's trial (SET
    XX) failed OOM while Redis was full, and every read missed from then on."""
    url = _user(redis_server.port, "+@all")
    tier = _tier(url)
    try:
        w = await warmed(tier)  # the fixture's settings: allkeys-lru, 256 MiB
        its = chain_items(tier.codec, "kept", 4, 64)
        assert await tier.put_many(its) == 4
        admin = redis.Redis(port=redis_server.port)
        admin.execute_command("ACL", "SETUSER", "kvp", "-info")  # after the warm-up
        admin.config_set("maxmemory-policy", "noeviction")  # the stored keys stay
        admin.config_set("maxmemory", "1mb")  # below what Redis holds: every SET is OOM
        admin.close()
        assert await tier.put_many(chain_items(tier.codec, "full", 2, 64)) == 0
        said = await logged(caplog, "out of memory")  # said once the re-read was refused
        assert len(said) == 1 and "256 MiB" in said[0], said  # the settings read before
        assert tier.breaker.state is BreakerState.CLOSED, tier.stats()
        got = await tier.get_many([k for k, _ in its])  # GETRANGE runs over maxmemory
        assert got == [v for _, v in its], tier.stats()  # (the probe's script does not)
        assert w.stats().breaker_opens == 0 and not lines(caplog, "lacks a permission")
    finally:
        await tier.aclose()
