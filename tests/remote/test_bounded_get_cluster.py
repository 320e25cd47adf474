"""A cluster user whose ACL lacks GETRANGE (NOTE(bounded-get)) on the real 3-master cluster of
the session: ACLs are per node, so the user is defined on every master. Each part of a get
(one pipeline, one slot) falls back to MGET on its own node, the fix is said once per master
(each named), the values are right and nothing leaks; reads are bounded again once every
master grants GETRANGE. With one master lacking it, only that master's reads fall back: the
others stay bounded."""

from __future__ import annotations

import asyncio
import logging
import time

import redis

from kvpool.remote import BreakerState, CircuitBreaker, RedisTier, ValueCodec
from kvpool.remote.keys import segment_of
from tests.remote.chains import chain
from tests.remote.conftest import NS
from tests.remote.redis_stats import CountedReads, commandstats
from tests.remote.test_bounded_get import BLOCK, SLACK, grow, sent_bytes

USER = "nogetrange"


def everywhere(cluster, *args: str) -> list:
    """Run one command on every master; their replies."""
    out = []
    for n in cluster.nodes:
        r = redis.Redis(port=n.port)
        try:
            out.append(r.execute_command(*args))
        finally:
            r.close()
    return out


def acl(port: int, *rules: str) -> None:
    r = redis.Redis(port=port)
    try:
        r.execute_command("ACL", "SETUSER", USER, *rules)
    finally:
        r.close()


def closed(cluster) -> int:
    """Connections of USER left open on all masters, once the server saw them close (bounded
    wait: a tier's aclose returns before each server reads its end of the socket)."""
    for _ in range(100):
        left = sum(str(line).count(f"user={USER} ")
                   for line in everywhere(cluster, "CLIENT", "LIST"))
        if left == 0:
            break
        time.sleep(0.02)
    return left


def prefixes(cluster, codec: ValueCodec, salt: str) -> dict[int, list[tuple[str, bytes]]]:
    """master's port -> the items of one 8-block prefix whose slot it serves."""
    out: dict[int, list[tuple[str, bytes]]] = {}
    for i in range(200):
        hashes = chain(8, salt=f"{salt}{i}")
        its = [(k, codec.encode(h, [bytes([j + 1]) * BLOCK]))
               for j, (k, h) in enumerate(zip(NS.group_keys(hashes), hashes))]
        out.setdefault(cluster.master_of(its[0][0]).port, its)
        if len(out) == len(cluster.nodes):
            return out
    raise AssertionError("no prefix for every master")


def in_order(by_port: dict[int, list[tuple[str, bytes]]]) -> list[tuple[str, bytes]]:
    """``prefixes``' items, master by master in port order."""
    return [it for port in sorted(by_port) for it in by_port[port]]


async def stored(c, tier: RedisTier, salt: str) -> tuple[dict, list, list[str]]:
    """``prefixes`` put on the cluster and probed whole: (by port, the items, their keys)."""
    by_port = prefixes(c, tier.codec, salt)
    its = in_order(by_port)
    keys = [k for k, _ in its]
    assert await tier.put_many(its) == 24 and await tier.probe(keys[:8]) == 8
    return by_port, its, keys


def tier_of(cluster, retry_s: float) -> RedisTier:
    seeds = ",".join(f"127.0.0.1:{n.port}" for n in cluster.nodes)
    t = RedisTier(f"redis+cluster://{USER}:p@{seeds}", ValueCodec(NS, BLOCK), op_timeout=5.0,
                  connect_timeout=5.0, breaker=CircuitBreaker(threshold=3, reset_s=0.5))
    t.reads.retry_s = retry_s
    return t


def said(caplog) -> list[str]:
    return [m for m in caplog.messages if "may not run GETRANGE" in m]


async def test_every_master_without_getrange_serves_by_mget_per_part(redis_cluster, caplog):
    c = redis_cluster
    for n in c.nodes:
        acl(n.port, "reset", "on", ">p", "~*", "+@all", "-getrange")
    tier = tier_of(c, retry_s=0.0)  # GETRANGE tried on every read
    caplog.set_level(logging.WARNING, logger="kvpool.remote")
    try:
        by_port, its, keys = await stored(c, tier, "aclall")
        tier.reads = counted = Parts(tier.reads)
        before = {n.port: commandstats(n.port) for n in c.nodes}
        for _ in range(3):
            assert await asyncio.wait_for(tier.get_many(keys), 5) == [v for _, v in its]
        assert counted.calls >= 9 and counted.one_slot, counted.parts  # 3 masters, 3 gets
        for n in c.nodes:  # every master read each of its parts with MGET after the refusal
            parts = sum(c.master_of(ks[0]) is n for ks in counted.parts)
            after = commandstats(n.port)
            assert after["mget"] - before[n.port].get("mget", 0) == parts >= 3, (n.port, after)
        named_once(said(caplog), c)
        st = tier.stats()
        assert not st.errors and st.breakers_open == 0, st
        assert st.breaker_state == int(BreakerState.CLOSED) and st.deleted_invalid == 0, st
        for n in c.nodes:
            acl(n.port, "+getrange")
        await bounded_again(c, tier, by_port)
        assert len(said(caplog)) == 3 and tier.stats().errors == {"corrupt": 1}
    finally:
        await tier.aclose()
        left = closed(c)
        everywhere(c, "ACL", "DELUSER", USER)
    assert left == 0  # the tier's connections all closed


def named_once(lines: list[str], c) -> None:
    """NOTE(getrange-nodes): with every master refusing GETRANGE, each is named in one line
    of its own with the fix, and the last one says all of them refuse it, with their
    addresses (only the first master was named before)."""
    names = [f"127.0.0.1:{n.port}" for n in c.nodes]
    assert len(lines) == len(names), lines
    assert all("ACL SETUSER USER +getrange" in line for line in lines), lines
    assert sorted(name for name in names for line in lines
                  if f"GETRANGE on {name} " in line) == sorted(names), lines
    assert f"all {len(names)} masters: {', '.join(sorted(names))})" in lines[-1], lines


async def test_one_master_without_getrange_falls_back_alone(redis_cluster, caplog):
    """Before, the one refusing master switched the whole tier to MGET for RETRY_S: a value
    grown on another master after the probe was read whole (32 MiB)."""
    c = redis_cluster
    for n in c.nodes:
        acl(n.port, "reset", "on", ">p", "~*", "+@all")
    bad, good = c.nodes[0], c.nodes[1]
    acl(bad.port, "-getrange")
    tier = tier_of(c, retry_s=60.0)
    caplog.set_level(logging.WARNING, logger="kvpool.remote")
    try:
        by_port, its, keys = await stored(c, tier, "aclone")
        assert await asyncio.wait_for(tier.get_many(keys), 5) == [v for _, v in its]
        assert len(said(caplog)) == 1 and f":{bad.port} " in said(caplog)[0], caplog.messages
        gkeys = [k for k, _ in by_port[good.port]]
        assert await tier.probe(gkeys) == 8
        grow(good.port, gkeys[3], by_port[good.port][3][1])  # after the probe
        sent = sent_bytes(good.port)
        got = await asyncio.wait_for(tier.get_many(keys), 5)
        assert sent_bytes(good.port) - sent < SLACK, "the grown value was read whole"
        want = [v for _, v in its]
        want[its.index(by_port[good.port][3])] = None
        assert got == want and tier.stats().errors == {"corrupt": 1}, tier.stats()
        bkeys = [k for k, _ in by_port[bad.port]]
        before = commandstats(bad.port)
        tier.reads = counted = Parts(tier.reads)
        assert await tier.get_many(bkeys) == [v for _, v in by_port[bad.port]]
        after = commandstats(bad.port)  # within RETRY_S: MGET alone, GETRANGE not tried
        assert after["mget"] - before["mget"] == counted.calls >= 1, after
        assert after.get("getrange", 0) == before.get("getrange", 0)
        assert len(said(caplog)) == 1 and tier.stats().breakers_open == 0
    finally:
        await tier.aclose()
        left = closed(c)
        everywhere(c, "ACL", "DELUSER", USER)
    assert left == 0


async def bounded_again(c, tier: RedisTier, by_port: dict) -> None:
    """Every master granted GETRANGE: a value grown after the probe is a miss, not read
    whole, and every master ran one GETRANGE per key of its prefix, no MGET."""
    its = in_order(by_port)
    port = sorted(by_port)[1]
    grow(port, by_port[port][3][0], by_port[port][3][1])
    before = {n.port: commandstats(n.port) for n in c.nodes}
    sent = sent_bytes(port)
    want = [v for _, v in its]
    want[8 + 3] = None
    assert await asyncio.wait_for(tier.get_many([k for k, _ in its]), 5) == want
    assert sent_bytes(port) - sent < SLACK  # bounded again on every master
    for n in c.nodes:
        after = commandstats(n.port)
        assert after["getrange"] - before[n.port]["getrange"] == 8, (n.port, after)
        assert after.get("mget", 0) == before[n.port].get("mget", 0)


class Parts(CountedReads):
    """CountedReads that also keeps each read's keys (a part: one pipeline)."""

    def __init__(self, reads) -> None:
        super().__init__(reads)
        self.parts: list[list[str]] = []

    @property
    def one_slot(self) -> bool:
        return all(len({segment_of(k) for k in ks}) == 1 for ks in self.parts)

    async def read(self, keys: list[str]):
        self.parts.append(keys)
        return await super().read(keys)
