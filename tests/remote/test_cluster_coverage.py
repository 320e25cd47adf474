"""The warm-up warns once when a lost master would stop the whole cluster
(NOTE(full-coverage)): a node requires full coverage (Redis's default) and a master has no
replica. On a real 3-master cluster (no replicas) of this module's own; each test puts back
what it changed."""

from __future__ import annotations

import logging
import time

import pytest
import redis

from bench.redis_ports import reserve_port
from bench.redis_servers import RedisClusterProcs, RedisServer
from kvpool.remote import CircuitBreaker, RedisTier, ValueCodec
from tests.remote.breakers import warmed
from tests.remote.conftest import NS, three_masters

SAID = "cluster-require-full-coverage yes"


@pytest.fixture(scope="module")
def cluster():
    """The module's own cluster (each test puts back what it changed)."""
    yield from three_masters()


def _everywhere(cluster, *args) -> None:
    for n in cluster.nodes:
        r = redis.Redis(port=n.port)
        try:
            r.execute_command(*args)
        finally:
            r.close()


async def _warm_up_lines(url: str, caplog) -> list[str]:
    """The tier's log lines that say the cluster is fragile, after a warm-up on ``url``."""
    caplog.clear()
    caplog.set_level(logging.INFO, logger="kvpool.remote")
    # reset_s: a warm-up answered late is done at the first trial (NOTE(warmed))
    t = RedisTier(url, ValueCodec(NS), breaker=CircuitBreaker(threshold=3, reset_s=0.5),
                  op_timeout=5.0, connect_timeout=5.0)
    try:
        w = await warmed(t)
        await warmed(t)  # said once per tier
        assert not w.stats().errors, t.stats()
    finally:
        await t.aclose()
    return [r.getMessage() for r in caplog.records
            if r.name == "kvpool.remote" and SAID in r.getMessage()]


async def test_full_coverage_with_a_master_without_replica_is_warned_with_the_fix(cluster,
                                                                                   caplog):
    """Before, nothing was said: losing one master would stop every slot silently."""
    said = await _warm_up_lines(cluster.url, caplog)
    assert len(said) == 1, caplog.text
    assert "cluster-require-full-coverage no" in said[0] and "replica" in said[0]
    assert "CLUSTERDOWN" in said[0]
    for n in cluster.nodes:  # each master is named: none has a replica
        assert f"127.0.0.1:{n.port}" in said[0]


async def test_no_full_coverage_is_not_warned(cluster, caplog):
    _everywhere(cluster, "CONFIG", "SET", "cluster-require-full-coverage", "no")
    try:
        assert await _warm_up_lines(cluster.url, caplog) == [], caplog.text
    finally:
        _everywhere(cluster, "CONFIG", "SET", "cluster-require-full-coverage", "yes")


async def test_config_refused_by_the_acl_says_nothing(cluster, caplog):
    """An ACL user without CONFIG: the setting is unknown, so nothing is said (no error
    either), and the tier serves."""
    _everywhere(cluster, "ACL", "SETUSER", "u", "on", ">p", "~*", "+@all", "-config")
    host = ",".join(f"127.0.0.1:{n.port}" for n in cluster.nodes)
    try:
        assert await _warm_up_lines(f"redis+cluster://u:p@{host}", caplog) == []
        assert "CONFIG" not in caplog.text and "NOPERM" not in caplog.text, caplog.text
    finally:
        _everywhere(cluster, "ACL", "DELUSER", "u")


def _lists_replica(port: int, rep: RedisServer, master_id: str) -> bool:
    """Node ``port`` lists ``rep`` as a replica of ``master_id``: gossip may show it as a
    slave before it names the master (master id "-"), which the warning rightly ignores."""
    r = redis.Redis(port=port)
    try:
        return any(f"{rep.port}@" in line and "slave" in line and master_id in line
                   for line in r.execute_command("CLUSTER", "NODES").decode().splitlines())
    finally:
        r.close()


def _replica_of(c: RedisClusterProcs, master: RedisServer) -> RedisServer:
    """A new cluster node made a replica of ``master``, once every node lists it as one."""
    port, held = reserve_port(cluster=True)  # bench/redis_ports.py NOTE(port-hold)
    rep = RedisServer(port, extra_args=master.extra_args, held=held)
    rep.start()
    r, m = redis.Redis(port=rep.port), redis.Redis(port=master.port)
    try:
        r.execute_command("CLUSTER", "MEET", "127.0.0.1", master.port)
        mid = m.execute_command("CLUSTER", "MYID").decode()
        for _ in range(500):  # bounded: the meet is gossiped within a few cron runs
            time.sleep(0.02)
            try:
                r.execute_command("CLUSTER", "REPLICATE", mid)
            except redis.ResponseError:  # not known to the new node yet
                continue
            if all(_lists_replica(n.port, rep, mid) for n in c.nodes):
                return rep
        raise AssertionError("the new node did not become a replica")
    except BaseException:
        rep.stop()
        raise
    finally:
        r.close()
        m.close()


async def test_a_master_with_a_replica_is_not_named(caplog):
    """One master of 3 gets a replica: the other two are still named, that one is not."""
    c = RedisClusterProcs(masters=3)
    c.start()
    rep = None
    try:
        covered = c.nodes[0]
        rep = _replica_of(c, covered)
        said = await _warm_up_lines(c.url, caplog)
        assert len(said) == 1, caplog.text
        assert f"127.0.0.1:{covered.port}" not in said[0].partition("masters ")[2], said
        for n in c.nodes[1:]:
            assert f"127.0.0.1:{n.port}" in said[0].partition("masters ")[2], said
    finally:
        if rep is not None:
            rep.stop()
        c.stop()
