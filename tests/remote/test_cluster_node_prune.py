"""A cluster tier keeps breaker state only for the nodes its cluster has now
(node_breakers.py NOTE(node-prune)). Before, a breaker made for a node stayed for the life of
the process, and each health check's state stayed after its breaker closed: a cluster whose
masters come and go (failovers, resharding) grew both without end. On a real 3-master
cluster of this module's own: every slot of one master is given to another (the operator's
resharding), so that master leaves CLUSTER SLOTS and, at the tier's next topology refresh,
its breaker goes."""

from __future__ import annotations

import asyncio
import time

import redis

from kvpool.remote import CircuitBreaker, RedisTier, RemoteStats, ValueCodec
from kvpool.remote.node_breakers import HealthChecks
from tests.remote.breakers import warmed
from tests.remote.chains import chain_items, one_prefix_per_master
from tests.remote.conftest import NS
from tests.router.kv_events import until


def _give_all_slots(own_cluster, src: int, dst: int) -> None:
    """Every slot of the master on port ``src`` to the one on ``dst``, on every node (its
    keys flushed first: a node refuses to give away a slot it holds keys of)."""
    rs = redis.Redis(port=src)
    rs.flushall()
    ranges = [(lo, hi) for lo, hi, owner, *_ in rs.execute_command("CLUSTER", "SLOTS")
              if owner[1] == src]
    rs.close()
    rd = redis.Redis(port=dst)
    dst_id = rd.execute_command("CLUSTER", "MYID")
    rd.close()
    # the destination first, then the source, as Redis' resharding does: told it owns the
    # slots, the destination bumps its config epoch, so its claim wins the gossip; in node
    # order a node could hear the old owner's stale claim win back and the cluster stay down
    ports = [dst, src] + [n.port for n in own_cluster.nodes if n.port not in (src, dst)]
    for port in ports:
        r = redis.Redis(port=port)
        pipe = r.pipeline(transaction=False)
        for lo, hi in ranges:
            for slot in range(lo, hi + 1):
                pipe.execute_command("CLUSTER", "SETSLOT", slot, "NODE", dst_id)
        pipe.execute()
        r.close()


async def test_a_master_that_left_the_cluster_loses_its_breaker_at_the_next_refresh(
        own_cluster):
    # a short reset: the move can leave the cluster answering CLUSTERDOWN for a while, and the
    # breaker it opens paused the tier's calls (no MOVED, no refresh) for 30 s, past the wait
    # below (two CI runs failed so)
    t = RedisTier(own_cluster.url, ValueCodec(NS),
                  breaker=CircuitBreaker(threshold=3, reset_s=0.5))
    try:
        await warmed(t)  # NOTE(warmed) in tests/remote/breakers.py
        by_port = one_prefix_per_master(own_cluster, t.codec, "prune")
        for items in by_port.values():
            assert await t.put_many(items) == 8
        assert len(t.breakers.all()) == 4  # the tier's own and one per master
        src, dst = list(by_port)[:2]
        _give_all_slots(own_cluster, src, dst)
        # calls on the moved slots meet MOVED; redis-py refreshes the whole map after a few
        # (reinitialize_steps), and the breakers follow that refresh
        # bounded by time, not by tries: 200 tries of 10 ms once ran out on a loaded CI box
        deadline, i = time.monotonic() + 20, 0
        while len(t.breakers.all()) != 3 and time.monotonic() < deadline:
            await t.probe([k for k, _ in chain_items(t.codec, f"moved{i}")])
            i += 1
            await asyncio.sleep(0.01)
        names = sorted(t.breakers.node(b) for b in t.breakers.all()[1:])
        assert names == sorted(f"127.0.0.1:{p}" for p in by_port if p != src), names
    finally:
        await t.aclose()


async def test_health_checks_hold_no_state_for_breakers_they_closed():
    """200 node breakers, each with a call and an opening closed by its trial: what the
    checks hold stays bounded (a trial loop's entry goes with the loop; empty in-flight sets
    are swept), instead of one entry per breaker there ever was."""
    closed: list[CircuitBreaker] = []

    async def trial(_b: CircuitBreaker) -> bool:
        return True

    async def on_closed(b: CircuitBreaker) -> None:
        closed.append(b)

    checks = HealthChecks(trial, on_closed, RemoteStats())
    for _ in range(200):
        b = CircuitBreaker(threshold=1, reset_s=0.01)
        calls = checks.inflight(b)
        async with asyncio.timeout(None) as deadline:  # a call in flight, as the tier's
            calls.add(deadline)
            epoch = b.admit()
            calls.discard(deadline)
        assert b.record_failure(epoch, "refused")
        checks.opened(b)
    await until(lambda: len(closed) == 200, "every breaker closed by its trial")
    await asyncio.sleep(0)  # the last loops' ends run
    assert len(checks) <= 16, len(checks)
    await checks.aclose()
