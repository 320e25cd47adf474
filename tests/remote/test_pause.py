"""A READONLY or NOPERM reply pauses the tier's calls as an outage does (NOTE(pause)): a
replica addressed as the master and an ACL user without the tier's commands or keys (real
redis-servers on loopback). After the first failing call every request's calls are misses
with no network, the health check tries the tier's commands (not a PING, which such a server
answers), and the tier resumes once the operator fixes the server at run time."""

from __future__ import annotations

import pytest
import redis

from kvpool.remote import BreakerState
from tests.remote.breakers import wait_closed, warmed
from tests.remote.test_diagnose import items, lines, servers, tiers  # noqa: F401 (fixtures)

ROUNDS = 20


async def _rounds(tier) -> None:
    """ROUNDS requests' worth of calls: a put of 4 values, a probe and a get; all misses."""
    its = items(tier.codec, 4)
    keys = [k for k, _ in its]
    for _ in range(ROUNDS):
        assert await tier.put_many(its) == 0
        assert await tier.probe(keys) == 0
        assert await tier.get_many(keys) == [None] * 4


async def _serves(tier) -> None:
    """The tier stores, finds and reads values again."""
    its = items(tier.codec, 4, tag=7)
    keys = [k for k, _ in its]
    assert await tier.put_many(its) == 4
    assert await tier.probe(keys) == 4
    assert await tier.get_many(keys) == [v for _, v in its]


def _failed_sets(port: int, password: str | None = None) -> int:
    r = redis.Redis(port=port, password=password)
    try:
        return int(r.info("commandstats").get("cmdstat_set", {}).get("failed_calls", 0))
    finally:
        r.close()


def _denied(port: int) -> int:
    r = redis.Redis(port=port, password="admin")
    try:
        return sum(int(e["count"]) for e in r.acl_log(count=1000))  # ACL LOG groups them
    finally:
        r.close()


async def test_a_replica_addressed_as_the_master_pauses_until_promoted(servers, tiers,
                                                                       caplog):
    primary = servers()
    replica = servers(extra_args=("--replicaof", "127.0.0.1", str(primary.port)))
    tier = tiers(replica.url)
    w = await warmed(tier)
    await _rounds(tier)
    st = w.stats()  # NOTE(warmed) in tests/remote/breakers.py
    # one READONLY event; the calls after it were refused by the breaker, no round trip
    assert st.errors.get("readonly") == 1 and st.breaker_opens == 1, st
    assert st.errors.get("breaker_open", 0) >= 3 * ROUNDS - 1, st
    # the server saw the first put's SETs, then one SET XX per health check only
    assert _failed_sets(replica.port) <= 4 + st.health_checks, st
    assert tier.breaker.state is not BreakerState.CLOSED
    assert len(lines(caplog, "replica")) == 1, caplog.text
    # the operator promotes it (what a failover does): the health check's trial passes
    admin = redis.Redis(port=replica.port)
    admin.replicaof("NO", "ONE")
    admin.close()
    assert await wait_closed(tier, 10.0) is not None, tier.stats()
    await _serves(tier)


GRANTS = {  # every command but the writes; every command on other keys only
    "command": ("~*", "-@all", "+get", "+mget", "+evalsha", "+script|load", "+ping", "+info",
                "+type", "+touch"),
    "key": ("~other:*", "+@all"),
}


@pytest.mark.parametrize("lacks", sorted(GRANTS))
async def test_an_acl_user_lacking_permissions_pauses_until_granted(servers, tiers, caplog,
                                                                    lacks):
    srv = servers(password="admin")
    admin = redis.Redis(port=srv.port, password="admin")
    admin.execute_command("ACL", "SETUSER", "u", "on", ">p", *GRANTS[lacks])
    tier = tiers(f"redis://u:p@127.0.0.1:{srv.port}/0")
    try:
        await tier.warm_up()
        await _rounds(tier)
        st = tier.stats()
        assert st.errors.get("noperm") == 1 and "response" not in st.errors, st
        assert st.errors.get("breaker_open", 0) >= 3 * ROUNDS - 2, st
        # denials: the warm-up's secret marker SET (kvpool/remote/secret_marker.py), the
        # first failing call's (a put: 4 SETs), then one per health check
        assert _denied(srv.port) <= 5 + st.health_checks, st
        said = lines(caplog, "lacks a permission")
        assert len(said) == 1 and "ACL SETUSER" in said[0], caplog.text
        assert not lines(caplog, "Redis answered an error")
        # the operator runs the ACL line: the health check's trial passes
        admin.execute_command("ACL", "SETUSER", "u", "resetkeys", "~kvp:*", "+mget", "+set",
                              "+del", "+touch", "+type", "+evalsha", "+script|load", "+ping",
                              "+info")
        assert await wait_closed(tier, 10.0) is not None, tier.stats()
        await _serves(tier)
    finally:
        admin.close()
