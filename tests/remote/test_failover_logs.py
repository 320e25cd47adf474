"""What the tier says while a real Redis deployment changes under it (real redis-servers on
loopback): a cluster node closing idle connections is no outage (NOTE(idle-close)), each
outage or READONLY spell is said once per episode and a node's recovery is said
(NOTE(episode)), and an OOM under allkeys-lru asks for more maxmemory (NOTE(oom-fix))."""

from __future__ import annotations

import asyncio
import logging
import time

import redis

from kvpool.remote import BreakerState, CircuitBreaker, RedisTier, ValueCodec
from bench.redis_ports import dead_port
from tests.remote.breakers import wait_closed, warmed
from tests.remote.chains import chain_items, one_prefix_per_master
from tests.remote.conftest import NS
from tests.remote.test_diagnose import logged


def _said(caplog, level: int, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == "kvpool.remote" and r.levelno == level and text in r.getMessage()]


def _everywhere(cluster, *args) -> None:
    for n in cluster.nodes:
        r = redis.Redis(port=n.port)
        r.execute_command(*args)
        r.close()


async def _reached(caplog, text: str, n: int, bound_s: float) -> bool:
    """Whether ``n`` INFO lines with ``text`` are logged within ``bound_s``."""
    t0 = time.monotonic()
    while len(_said(caplog, logging.INFO, text)) < n:
        if time.monotonic() - t0 > bound_s:
            return False
        await asyncio.sleep(0.02)
    return True


async def _idle_closed(cluster, bound_s: float = 6.0) -> None:
    """Wait until every node closed every client but the one asking (``timeout`` 1: Redis
    closes a client idle past it, on its once-a-second clock), the loop running meanwhile as
    a serving replica's does (it reads each close as it comes)."""
    admins = [redis.Redis(port=n.port) for n in cluster.nodes]
    try:
        t0 = time.monotonic()
        while time.monotonic() - t0 < bound_s:
            if all(len(r.client_list()) == 1 for r in admins):
                return
            await asyncio.sleep(0.05)
        raise AssertionError("the nodes kept idle clients past their timeout")
    finally:
        for r in admins:
            r.close()


async def test_connections_a_node_closed_while_idle_are_reopened(redis_cluster, caplog):
    """Every pooled connection idle past a node's ``timeout`` failed its next call: a miss
    or a dropped put per node and burst, and "cluster node ... is unreachable" for healthy
    masters (NOTE(idle-close))."""
    _everywhere(redis_cluster, "CONFIG", "SET", "timeout", "1")
    t = RedisTier(redis_cluster.url, ValueCodec(NS), connect_timeout=2.0, op_timeout=2.0,
                  breaker=CircuitBreaker(threshold=3, reset_s=0.2))
    try:
        w = await warmed(t, 4)  # NOTE(warmed) in tests/remote/breakers.py
        prefixes = list(one_prefix_per_master(redis_cluster, t.codec, "idle").values())
        for items in prefixes:
            assert await t.put_many(items) == 8
        caplog.clear()
        await _idle_closed(redis_cluster)  # the tier's connections, closed by the nodes
        for i, items in enumerate(prefixes):
            keys = [k for k, _ in items]
            assert await t.probe(keys) == 8, t.stats()
            assert await t.get_many(keys) == [v for _, v in items]
            assert await t.put_many(chain_items(t.codec, f"after{i}")) == 8
        assert w.stats().errors == {} and w.stats().breaker_opens == 0, t.stats()
        assert not _said(caplog, logging.WARNING, ""), caplog.text
    finally:
        _everywhere(redis_cluster, "CONFIG", "SET", "timeout", "0")
        await t.aclose()


async def test_a_second_restart_is_said_again(redis_server, make_tier, caplog):
    """The second kill of the server added no line (each kind was said once per process)
    while breaker_opens_total counted it (NOTE(episode))."""
    caplog.set_level(logging.INFO, logger="kvpool.remote")
    t = make_tier(breaker=CircuitBreaker(threshold=3, reset_s=0.05), connect_timeout=1.0)
    keys = [k for k, _ in chain_items(t.codec, "restart")]
    w = await warmed(t)  # NOTE(warmed) in tests/remote/breakers.py
    for n in (1, 2):
        redis_server.kill()
        for _ in range(3):  # one line an episode, not one a call
            assert await t.probe(keys) == 0
        assert len(_said(caplog, logging.WARNING, "nothing accepts connections")) == n
        redis_server.start()
        # its trial closes the breaker, then the recovery's INFO says it: on a loaded box a
        # kill right after the close failed that INFO, and a line went unsaid
        assert await _reached(caplog, "is reachable", n + 1, 10.0), caplog.text
    assert w.stats().breaker_opens == 2
    assert len(_said(caplog, logging.INFO, "is reachable")) == 3  # the start, 2 recoveries


async def test_a_second_readonly_spell_is_said_again(redis_server, make_tier, caplog):
    """The server turned replica (READONLY) twice: the second spell paused the tier with no
    line (NOTE(episode))."""
    admin = redis.Redis(port=redis_server.port)
    t = make_tier(breaker=CircuitBreaker(threshold=3, reset_s=0.05))
    try:
        w = await warmed(t)  # NOTE(warmed) in tests/remote/breakers.py
        for n in (1, 2):
            with dead_port() as port:  # nobody there (bench/redis_ports.py NOTE(dead-port))
                admin.execute_command("REPLICAOF", "127.0.0.1", port)
                for i in range(3):
                    assert await t.put_many(chain_items(t.codec, f"ro{n}.{i}")) == 0
                assert len(_said(caplog, logging.WARNING, "read-only replica")) == n
                admin.execute_command("REPLICAOF", "NO", "ONE")
            assert await wait_closed(t, 5.0) is not None
        assert w.stats().breaker_opens == 2 and w.stats().errors["readonly"] == 2
    finally:
        admin.close()


async def _nodes_closed(t: RedisTier, bound_s: float) -> None:
    t0 = time.monotonic()
    while t.stats().breakers_open and time.monotonic() - t0 < bound_s:
        await asyncio.sleep(0.02)
    assert t.stats().breakers_open == 0, t.stats()


async def test_a_nodes_second_outage_and_each_recovery_are_said(redis_cluster, caplog):
    """A cluster node down twice (here hung: CLIENT PAUSE, which leaves the shared cluster's
    bus and slots alone): its second outage added no line, and neither recovery was said, so
    the log had it down since the first (NOTE(episode))."""
    caplog.set_level(logging.INFO, logger="kvpool.remote")
    t = RedisTier(redis_cluster.url, ValueCodec(NS), connect_timeout=0.3, op_timeout=0.3,
                  breaker=CircuitBreaker(threshold=3, reset_s=0.05))
    try:
        w = await warmed(t)  # NOTE(warmed) in tests/remote/breakers.py
        items = chain_items(t.codec, "node-twice")
        assert await t.put_many(items) == 8
        node = redis_cluster.master_of(items[0][0])
        name = f"127.0.0.1:{node.port}"
        admin = redis.Redis(port=node.port)
        for n in (1, 2):
            admin.execute_command("CLIENT", "PAUSE", 700, "ALL")
            for _ in range(3):
                assert await t.probe([k for k, _ in items]) == 0
            assert len(_said(caplog, logging.WARNING, f"cluster node {name} is unreachable"
                             )) == n, caplog.text
            await _nodes_closed(t, 5.0)
            assert len(_said(caplog, logging.INFO, f"cluster node {name} answers again")) == n
        admin.close()
        assert t.breaker.state is BreakerState.CLOSED and w.stats().breaker_opens == 2
        assert await t.probe([k for k, _ in items]) == 8
    finally:
        await t.aclose()


async def test_an_oom_under_allkeys_lru_asks_for_more_maxmemory(redis_server, make_tier,
                                                                 caplog):
    """It said "give it maxmemory-policy allkeys-lru" to a server running allkeys-lru whose
    maxmemory was too small (NOTE(oom-fix))."""
    admin = redis.Redis(port=redis_server.port)
    admin.config_set("maxmemory", "1mb")  # below what Redis holds with no key at all
    admin.close()
    t = make_tier(oom_pause_s=30.0)
    await warmed(t)  # NOTE(warmed) in tests/remote/breakers.py
    assert await t.put_many(chain_items(t.codec, "oom", 4, 64 << 10)) == 0
    assert t.stats().oom_pauses == 1
    await logged(caplog, "out of memory")  # said once INFO was read again: NOTE(oom-reread)
    said = _said(caplog, logging.WARNING, "out of memory")
    assert len(said) == 1 and "allkeys-lru" in said[0] and "raise maxmemory" in said[0], said
    assert "give it maxmemory-policy" not in said[0] and "maxmemory 1 MiB" in said[0]


async def test_an_oom_after_the_policy_changed_names_the_fix_for_the_policy_now(redis_server,
                                                                                make_tier,
                                                                                caplog):
    """The line quoted the settings read at the warm-up ("allkeys-lru, 256 MiB ... raise
    maxmemory") after the operator set noeviction and a tiny maxmemory (NOTE(oom-reread))."""
    t = make_tier(oom_pause_s=30.0)
    await warmed(t)  # the fixture's server: allkeys-lru, 256 MiB (NOTE(warmed))
    admin = redis.Redis(port=redis_server.port)
    admin.config_set("maxmemory-policy", "noeviction")
    admin.config_set("maxmemory", "1mb")  # below what Redis holds with no key at all
    admin.close()
    assert await t.put_many(chain_items(t.codec, "oom-now", 4, 64 << 10)) == 0
    said = await logged(caplog, "out of memory")
    assert len(said) == 1 and "maxmemory-policy noeviction evicts nothing" in said[0], said
    assert "raise maxmemory" not in said[0] and "256 MiB" not in said[0]
    assert t.stats().oom_pauses == 1
