"""A cluster node whose ACL lacks a tier command pauses its own breaker only (NOTE(pause),
NOTE(node-breaker)), and its health check's trial runs on a key of that node's slots
(NOTE(node-probe)): it stays paused while the node refuses, the other masters keep serving,
and it closes once the node's ACL is fixed. On a real 3-master cluster of this module's own
where the ACL user ``u`` differs on one node only (ACLs are per node)."""

from __future__ import annotations

import asyncio

import redis

from kvpool.remote import BreakerState, CircuitBreaker, RedisTier, ValueCodec
from tests.remote.breakers import warmed
from tests.remote.chains import chain
from tests.remote.conftest import NS


def acl(port: int, *rules: str) -> None:
    r = redis.Redis(port=port)
    try:
        r.execute_command("ACL", "SETUSER", "u", *rules)
    finally:
        r.close()


def prefixes(own_cluster, codec) -> dict:
    """master's port -> the items of one 8-block prefix whose slot it serves."""
    out: dict = {}
    for i in range(200):
        hashes = chain(8, salt=f"pause{i}")
        items = [(k, codec.encode(h, [bytes([j]) * 256]))
                 for j, (k, h) in enumerate(zip(NS.group_keys(hashes), hashes))]
        out.setdefault(own_cluster.master_of(items[0][0]).port, items)
        if len(out) == 3:
            return out
    raise AssertionError("no prefix for every master")


async def serves(tier, items) -> bool:
    keys = [k for k, _ in items]
    return await tier.probe(keys) == 8 and await tier.get_many(keys) == [v for _, v in items]


async def test_a_node_lacking_set_stays_paused_alone_until_its_acl_is_fixed(own_cluster):
    """Before, the node's trial ran on the tier's one check key, served by another node: it
    passed at once and closed the refusing node's breaker (to reopen on its next put)."""
    for n in own_cluster.nodes:
        acl(n.port, "on", ">p", "~*", "+@all")
    codec = ValueCodec(NS)
    check = own_cluster.master_of(NS.key(bytes(32)))  # the fixed check key's node
    bad = next(n for n in own_cluster.nodes if n is not check)
    acl(bad.port, "-set")
    seeds = ",".join(f"127.0.0.1:{n.port}" for n in own_cluster.nodes)
    t = RedisTier(f"redis+cluster://u:p@{seeds}", codec, op_timeout=5.0, connect_timeout=5.0,
                  breaker=CircuitBreaker(threshold=3, reset_s=0.05))
    try:
        w = await warmed(t)  # NOTE(warmed) in tests/remote/breakers.py
        by_port = prefixes(own_cluster, codec)
        assert await t.put_many(by_port[bad.port]) == 0  # NOPERM: that node's breaker pauses
        good = [items for port, items in by_port.items() if port != bad.port]
        for items in good:
            assert await t.put_many(items) == 8
        for _ in range(200):  # bounded: a trial every reset_s; stop once 5 failed or one closed
            st = w.stats()
            if st.health_failed >= 5 or st.breakers_open == 0:
                break
            await asyncio.sleep(0.02)
        # every trial that ended failed; one more may be running (node_breakers.py _loop)
        assert st.breakers_open == 1 and st.health_checks - 1 <= st.health_failed >= 5, st
        assert st.errors.get("noperm") == 1 and t.breaker.state is BreakerState.CLOSED, st
        assert await t.probe([k for k, _ in by_port[bad.port]]) == 0  # no network: paused
        for items in good:  # the other masters keep serving
            assert await serves(t, items)
        acl(bad.port, "+set")  # the operator fixes that node's ACL
        for _ in range(250):  # bounded: the next trial closes it
            if t.stats().breakers_open == 0:
                break
            await asyncio.sleep(0.02)
        assert t.stats().breakers_open == 0, t.stats()
        assert await t.put_many(by_port[bad.port]) == 8
        assert await serves(t, by_port[bad.port])
    finally:
        await t.aclose()
