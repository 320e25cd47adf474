"""A Redis Cluster tier keeps a breaker per master node (NOTE(node-breaker)): a killed master
(no replica) costs its own slots' lookups only, as fast misses, and its keys hit again once
it is back. On a real 3-master cluster of this module's own (a node is killed)."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis

from kvpool.remote import BreakerState, CircuitBreaker, RedisTier, ValueCodec
from tests.remote.breakers import warmed
from tests.remote.chains import chain_items, one_prefix_per_master
from tests.remote.conftest import NS


@pytest.mark.parametrize("fault", ["kill", "hang"])
async def test_a_lost_master_misses_only_its_slots_and_recovers(own_cluster, fault):
    """One breaker for the whole cluster: the killed (or SIGSTOPped) master's first refused
    (or timed out) call opened it for every node's keys, so losing 1 master of 3 cost every
    hit."""
    # the other masters keep serving while one is down
    _set_everywhere(own_cluster, "CONFIG", "SET", "cluster-require-full-coverage", "no")
    t = RedisTier(own_cluster.url, ValueCodec(NS), breaker=CircuitBreaker(threshold=3, reset_s=0.2))
    try:
        w = await warmed(t)  # NOTE(warmed) in tests/remote/breakers.py
        by_port = one_prefix_per_master(own_cluster, t.codec, "salt")
        for items in by_port.values():
            assert await t.put_many(items) == 8
        dead = next(n for n in own_cluster.nodes if n.port in by_port)
        lost = [k for k, _ in by_port[dead.port]]
        kept = [items for port, items in by_port.items() if port != dead.port]
        dead.kill() if fault == "kill" else dead.pause()
        for _ in range(5):
            assert await t.probe(lost) == 0
            for items in kept:  # the two live masters' keys still hit
                assert await t.probe([k for k, _ in items]) == 8
                assert await t.get_many([k for k, _ in items]) == [v for _, v in items]
        st = w.stats()
        assert t.breaker.state is BreakerState.CLOSED and st.breakers_open == 1, st
        # the dead node's probes: one or two reached it (closed, then refused: that opened
        # its breaker; a hung node's timeout opened it at once), the others were refused with
        # no network
        tried = st.errors.get("connection", 0) + st.errors.get("timeout", 0)
        assert st.errors.get("breaker_open", 0) >= 3 and tried + st.errors["breaker_open"] == 5
        # killed: restarted on its port and nodes.conf, it serves its slots again (empty)
        dead.start() if fault == "kill" else dead.resume()
        for _ in range(200):  # bounded: its breaker's trial runs every reset_s
            await t.put_many(by_port[dead.port])
            if await t.probe(lost) == 8:
                break
            await asyncio.sleep(0.05)
        assert await t.get_many(lost) == [v for _, v in by_port[dead.port]], t.stats()
        assert t.stats().breakers_open == 0 and t.stats().breaker_state == 0
    finally:
        await t.aclose()


async def test_a_killed_node_is_said_to_be_unreachable_not_a_tls_port(own_cluster, caplog):
    """Its first failure (the pooled connection closed by the dying server) was logged as
    'the server dropped the connection ...: if that port speaks TLS, use rediss://'."""
    t = RedisTier(own_cluster.url, ValueCodec(NS), breaker=CircuitBreaker(threshold=3, reset_s=30))
    try:
        await warmed(t)  # NOTE(warmed) in tests/remote/breakers.py
        items = chain_items(t.codec, "node-down")
        assert await t.put_many(items) == 8
        dead = own_cluster.master_of(items[0][0])
        dead.kill()
        caplog.clear()
        for _ in range(3):
            assert await t.probe([k for k, _ in items]) == 0
        said = [r.getMessage() for r in caplog.records if r.name == "kvpool.remote"]
        assert not any("rediss://" in m for m in said), said
        assert sum(f"cluster node 127.0.0.1:{dead.port} is unreachable" in m
                   for m in said) == 1, said
    finally:
        await t.aclose()


def _set_everywhere(own_cluster, *args) -> None:
    for n in own_cluster.nodes:
        r = redis.Redis(port=n.port)
        r.execute_command(*args)
        r.close()


def _state_everywhere(own_cluster, state: str) -> None:
    for _ in range(200):  # bounded: a node updates its state within its cron (~0.1 s)
        states = []
        for n in own_cluster.nodes:
            r = redis.Redis(port=n.port)
            states.append(r.cluster("info")["cluster_state"])
            r.close()
        if states == [state] * len(states):
            return
        time.sleep(0.02)
    raise AssertionError(f"cluster_state {states}, not {state}")


async def test_a_cluster_down_pauses_each_nodes_calls_until_it_serves_again(own_cluster):
    """cluster_state:fail (a slot no node serves, full coverage required): every node answers
    CLUSTERDOWN at once. Each reply was an error miss and the next call asked again; now the
    first reply opens that node's breaker, its calls are misses with no network, and its
    trial (CLUSTER INFO) closes it once the node says cluster_state:ok (NOTE(clusterdown))."""
    t = RedisTier(own_cluster.url, ValueCodec(NS), breaker=CircuitBreaker(threshold=3, reset_s=0.2))
    try:
        w = await warmed(t)  # NOTE(warmed) in tests/remote/breakers.py
        prefixes = list(one_prefix_per_master(own_cluster, t.codec, "salt").values())
        for items in prefixes:
            assert await t.put_many(items) == 8
        slot = redis.Redis(port=own_cluster.nodes[0].port).cluster("keyslot", "{nobody}")
        _set_everywhere(own_cluster, "CLUSTER", "DELSLOTS", slot)  # no node serves it
        _state_everywhere(own_cluster, "fail")
        for _ in range(3):
            for items in prefixes:
                assert await t.probe([k for k, _ in items]) == 0
        st = w.stats()
        assert st.errors.get("cluster") == 3 and st.errors.get("breaker_open") == 6, st
        assert st.breakers_open == 3 and t.breaker.state is BreakerState.CLOSED, st
        _set_everywhere(own_cluster, "CONFIG", "SET", "cluster-require-full-coverage", "no")
        _state_everywhere(own_cluster, "ok")
        for _ in range(200):  # bounded: each node's trial runs every reset_s
            runs = [await t.probe([k for k, _ in items]) for items in prefixes]
            if runs == [8, 8, 8]:
                break
            await asyncio.sleep(0.05)
        assert runs == [8, 8, 8] and t.stats().breakers_open == 0, t.stats()
    finally:
        await t.aclose()
