"""A master lost under the tier (Redis Cluster with a replica per master, and Sentinel):
every request still succeeds with the same greedy output (the tier's failures are misses
and a breaker event), and the tier serves hits again once a master is back for the slot,
without a restart."""

from __future__ import annotations

import asyncio
import time

import pytest

import redis

from bench.redis_ports import PortTaken, ping
from bench.redis_servers import RedisClusterProcs, RedisServer, SentinelProcs, \
    kill_once_acked, replication_offsets
from kvpool.remote import CircuitBreaker, RedisTier, ValueCodec
from tests.remote.chains import chain
from tests.remote.conftest import NS
from tests.remote.engines import PROMPT, engine, fresh_tokens, run, settle, stop, \
    tokens

RECOVERY_BOUND_S = 30.0  # generous: the cluster's own failover takes ~2-3 s here


@pytest.fixture(scope="module")
def cluster_with_replicas():
    c = RedisClusterProcs(masters=3, replicas=1)
    c.start()
    try:
        yield c
    finally:
        c.stop()


@pytest.fixture
def sentinel():
    s = SentinelProcs()
    s.start()
    try:
        yield s
    finally:
        s.stop()


async def stored_chain(url: str, salt: str) -> tuple[RedisTier, list[str]]:
    """A tier on ``url`` (the product's deadlines) and a 40-block chain stored through it.

    On a loaded host (2 cores, xdist) the warm-up missed its 2 s bound (NOTE(setup)) in 4 of
    22 runs and ``assert await t.warm_up()`` failed the test before any failover. The tier
    rides that out itself (its health check closes the breaker once Redis answers and
    finishes the warm-up: NOTE(warm-later)), so this waits for what the tests need, bounded:
    the chain stored and found (puts are SET NX: sending them again keeps what is stored)."""
    t = RedisTier(url, ValueCodec(NS), breaker=CircuitBreaker(threshold=3, reset_s=0.3))
    await t.warm_up()  # False when Redis answered it late: not the condition waited for
    hashes = chain(40, salt=salt)
    keys = NS.group_keys(hashes)
    its = [(k, t.codec.encode(h, [b"k" * 256])) for k, h in zip(keys, hashes)]
    t0 = time.monotonic()
    await t.put_many(its)
    while await t.probe(keys) < len(keys):  # a failed call is a miss, never raises
        assert time.monotonic() - t0 < RECOVERY_BOUND_S, f"chain not stored: {t.stats()}"
        await asyncio.sleep(0.05)  # the breaker open: calls miss at once until it closes
        await t.put_many(its)
    return t, keys


async def until_hits(t: RedisTier, keys: list[str], view=lambda: "") -> float:
    """Seconds until a probe finds the whole chain again (each failed probe a miss);
    ``view()``: what the servers say, for the failure message."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < RECOVERY_BOUND_S:
        n = await t.probe(keys)  # never raises: a failure is 0
        if n == len(keys):
            return time.monotonic() - t0
        await asyncio.sleep(0.1)
    pytest.fail(f"no hits {RECOVERY_BOUND_S} s after the failover: {t.stats()}\n"
                f"{await asyncio.to_thread(view)}")


async def test_a_killed_cluster_master_is_misses_then_hits_again(cluster_with_replicas):
    c = cluster_with_replicas
    want = await fresh_tokens(PROMPT)
    t, keys = await stored_chain(c.url, "kill")
    e = await engine(c.url)
    try:
        await run(e, PROMPT)  # its blocks stored through the cluster
        await settle(e)
        # acknowledged by its replica first: a failover loses nothing
        await asyncio.to_thread(c.kill_master_of, keys[0])
        assert await t.probe(keys) == 0  # the dead master's segment: a miss, not an error
        for _ in range(3):  # requests during the outage: all succeed (run checks), same output
            assert tokens(await run(e, PROMPT)) == want
        await until_hits(t, keys, c.view)
        st = t.stats()
        assert st.breaker_opens >= 1 and st.errors.get("connection", 0) >= 1
        assert tokens(await run(e, PROMPT)) == want
    finally:
        await t.aclose()
        await stop(e)


@pytest.mark.parametrize("how", ["sigkill", "sentinel_failover"])
async def test_a_sentinel_failover_is_misses_then_hits_again(sentinel, how):
    want = await fresh_tokens(PROMPT)
    t, keys = await stored_chain(sentinel.url, how)
    e = await engine(sentinel.url)
    try:
        await run(e, PROMPT)
        await settle(e)
        if how == "sigkill":  # once the replica acknowledged the chain
            await asyncio.to_thread(sentinel.kill_master)
        else:
            await asyncio.to_thread(sentinel.failover)
        assert tokens(await run(e, PROMPT)) == want  # during the failover: succeeds
        took = await until_hits(t, keys, sentinel.view)
        assert took < RECOVERY_BOUND_S
        if how == "sigkill":
            assert t.stats().breaker_opens >= 1
        assert tokens(await run(e, PROMPT)) == want
        assert sentinel.master_port() == sentinel.replica.port
    finally:
        await t.aclose()
        await stop(e)


def test_a_master_is_killed_only_once_every_attached_replica_acked():
    """The harness kills a master only once every attached replica acknowledged everything
    written to it, by anyone: a failover may promote any of them, and one behind would come
    up without the chain. WAIT from a fresh connection (the harness's redis-cli) returned at
    once on Redis 7, however far behind a replica was. One replica paused: a clear error and
    no kill; resumed: the kill, and both replicas hold the last write."""
    m = RedisServer()
    reps = [RedisServer(extra_args=("--replicaof", "127.0.0.1", str(m.port))) for _ in "ab"]
    try:
        for s in (m, *reps):
            s.start()
        r = redis.Redis(port=m.port)
        r.set("k", "v")
        assert r.wait(2, 10_000) == 2  # both attached and in sync
        assert len(replication_offsets(m.port)[1]) == 2
        reps[1].pause()
        r.set("k", "w")  # only the running replica can acknowledge it
        with pytest.raises(RuntimeError, match="not killing it"):
            kill_once_acked(m, 1, 2.5)  # longer than a replica's ack period (1 s)
        assert m.proc is not None and r.get("k") == b"w"
        reps[1].resume()
        kill_once_acked(m, 1, 10.0)
        assert m.proc is None
        assert all(redis.Redis(port=s.port).get("k") == b"w" for s in reps)
        r.close()
    finally:
        for s in (m, *reps):
            s.stop()


def test_a_server_is_started_only_once_its_own_process_answers():
    """A redis-server that could not bind its port exited, but the server already there
    answered the harness's PING, and start() returned as if it ran. Now it raises PortTaken
    naming the other process, which keeps serving (NOTE(port-hold))."""
    other = RedisServer()
    other.start()
    late = RedisServer(other.port)
    try:
        with pytest.raises(PortTaken, match=f"pid {other.pid}\\)"):
            late.start()
        assert late.proc is None and ping(other.port)
    finally:
        late.stop()
        other.stop()


def test_every_master_gets_a_replica_though_two_nodes_drew_one_port():
    """Two nodes of one cluster on one port (free_port's picks could repeat: 1 cluster in
    600): the second node's server exited, the first answered for it, the cluster was made
    with one master never given a replica, and the failover test's kill waited 30 s on
    "offsets [] of 0". Now that node moves to another port and every master has a replica."""
    c = RedisClusterProcs(masters=3, replicas=1)
    c.nodes[4].port = c.nodes[1].port
    c.start()
    try:
        masters = {c.master_of(f"{{{i}}}").port for i in range(100)}
        said = {port: replication_offsets(port) for port in masters}
        assert len(masters) == 3 and all(acked for _, acked in said.values()), said
        assert len({n.port for n in c.nodes}) == 6
    finally:
        c.stop()
