"""A misconfigured tier says so, once per kind, with the fix (real redis-servers on loopback):
a missing or wrong password, an untrusted certificate, plain redis:// to a TLS port, a cluster
node, a full noeviction server. Each used to look like a cold tier: misses and no log line.
The breaker still recovers once the fault is fixed."""

from __future__ import annotations

import asyncio
import logging

import pytest
import redis

from kvpool.remote import BreakerState, CircuitBreaker, RedisTier, ValueCodec
from kvpool.remote.diagnose import CLUSTER_FIX
from tests.remote.breakers import wait_closed, warmed
from tests.remote.chains import chain
from tests.remote.conftest import NS
from bench.redis_ports import reserve_port
from bench.redis_servers import RedisServer
from tests.remote.redis_stats import commandstats
from tests.remote.tls_certs import make_tls_files


@pytest.fixture
def servers():
    """``start(**RedisServer kwargs)`` -> a started server, every one stopped by pid."""
    started: list[RedisServer] = []

    def start(**kw) -> RedisServer:
        srv = RedisServer(**kw)
        started.append(srv)
        srv.start()
        return srv

    yield start
    for srv in started:
        srv.stop()


@pytest.fixture
async def tiers():
    made: list[RedisTier] = []

    def make(url: str, **kw) -> RedisTier:
        kw.setdefault("breaker", CircuitBreaker(threshold=3, reset_s=0.3))
        # generous deadlines: these tests are about replies, not a slow (loaded) machine
        kw.setdefault("connect_timeout", 3.0)
        kw.setdefault("op_timeout", 3.0)
        made.append(RedisTier(url, ValueCodec(NS), **kw))
        return made[-1]

    yield make
    for t in made:
        await t.aclose()


def lines(caplog, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if text in r.getMessage()]


async def logged(caplog, text: str, bound_s: float = 5.0) -> list[str]:
    """``lines`` once one has ``text`` (bounded): the OOM's line waits for an INFO
    (NOTE(oom-reread))."""
    for _ in range(int(bound_s / 0.02)):
        if lines(caplog, text):
            break
        await asyncio.sleep(0.02)
    return lines(caplog, text)


def items(codec, n: int, size: int = 64, tag: int = 0):
    hashes = chain(n, salt=str(tag))
    return [(NS.key(h), codec.encode(h, [bytes([i % 256]) * size])) for i, h in enumerate(hashes)]


async def test_missing_password_is_logged_once_and_the_breaker_recovers_when_fixed(
        servers, tiers, caplog):
    caplog.set_level(logging.INFO, logger="kvpool.remote")
    srv = servers(password="right")
    tier = tiers(f"redis://127.0.0.1:{srv.port}/0")
    assert not await tier.warm_up()
    keys = [k for k, _ in items(tier.codec, 4)]
    for _ in range(5):
        assert await tier.probe(keys) == 0
    fix = lines(caplog, "redis://:PASSWORD@host:port")
    assert len(fix) == 1 and "rejected the password" in fix[0], caplog.text
    assert len(lines(caplog, "cannot serve the tier (auth")) == 1
    assert tier.stats().errors.get("auth", 0) >= 1
    assert tier.breaker.state is not BreakerState.CLOSED
    # the operator drops the password: the tier's own PING closes the breaker
    admin = redis.Redis(port=srv.port, password="right")
    admin.config_set("requirepass", "")
    admin.close()
    assert await wait_closed(tier, 5.0) is not None, tier.stats()
    its = items(tier.codec, 4)
    assert await tier.put_many(its) == 4
    assert await tier.probe([k for k, _ in its]) == 4
    assert lines(caplog, "is reachable")  # said once it came up
    assert len(lines(caplog, "rejected the password")) == 1


async def test_wrong_password_names_the_fix(servers, tiers, caplog):
    srv = servers(password="right")
    tier = tiers(f"redis://:wrong@127.0.0.1:{srv.port}/0")
    assert not await tier.warm_up()
    assert len(lines(caplog, "rejected the password")) == 1
    assert "wrong" not in caplog.text  # the password never reaches the log


async def test_untrusted_certificate_and_plain_url_to_a_tls_port(servers, tiers, caplog,
                                                                 tmp_path):
    srv = servers(tls=make_tls_files(tmp_path))
    untrusted = tiers(f"rediss://127.0.0.1:{srv.port}/0")
    assert not await untrusted.warm_up()
    assert len(lines(caplog, "ssl_ca_certs=/path/ca.pem")) == 1, caplog.text
    assert untrusted.stats().errors.get("tls") == 1
    plain = tiers(f"redis://127.0.0.1:{srv.port}/0")
    assert not await plain.warm_up()
    assert len(lines(caplog, "use rediss://host:port")) == 1, caplog.text
    caplog.set_level(logging.INFO, logger="kvpool.remote")
    trusted = tiers(srv.url)
    await warmed(trusted)  # its first answer may be late: NOTE(warmed) in breakers.py
    up = lines(caplog, "is reachable")
    assert len(up) == 1 and "maxmemory 256 MiB" in up[0] and "allkeys-lru" in up[0], caplog.text


def _cluster_node(servers) -> RedisServer:
    """A started cluster-enabled server; its port and bus port held until it answers
    (bench/redis_ports.py NOTE(port-hold))."""
    port, held = reserve_port(cluster=True)
    return servers(port=port, held=held, extra_args=("--cluster-enabled", "yes"))


async def test_cluster_enabled_server_is_refused_with_the_fix(servers, tiers, caplog):
    caplog.set_level(logging.INFO, logger="kvpool.remote")
    srv = _cluster_node(servers)
    tier = tiers(srv.url)
    assert not await tier.warm_up()
    refused = [r for r in caplog.records if CLUSTER_FIX in r.getMessage()]
    assert len(refused) == 1 and refused[0].levelno == logging.ERROR
    assert "--remote-url redis+cluster://HOST:PORT" in refused[0].getMessage()
    before = commandstats(srv.port)
    keys = [k for k, _ in items(tier.codec, 4)]
    assert await tier.probe(keys) == 0 and await tier.get_many(keys) == [None] * 4
    assert await tier.put_many(items(tier.codec, 2)) == 0 and not await tier.health()
    after = commandstats(srv.port)
    assert {k: after.get(k, 0) - before.get(k, 0) for k in ("evalsha", "mget", "set")} == \
        {"evalsha": 0, "mget": 0, "set": 0}  # nothing sent: every call a miss at once
    assert tier.stats().errors.get("refused_server") == 3
    assert not lines(caplog, "is reachable")


async def test_noeviction_is_warned_and_an_oom_pauses_the_puts(servers, tiers, caplog):
    srv = servers(maxmemory="3mb", policy="noeviction")
    tier = tiers(srv.url, oom_pause_s=30.0)
    await warmed(tier)  # the warning said by the warm-up's INFO, in time or late
    warned = lines(caplog, "maxmemory-policy is noeviction")
    assert len(warned) == 1 and "allkeys-lru" in warned[0]
    stored = 0
    for tag in range(20):  # 20 x 16 x 64 KiB = 20 MiB into a 3 MiB server
        stored += await tier.put_many(items(tier.codec, 16, 64 << 10, tag))
        if tier.stats().oom_pauses:
            break
    st = tier.stats()
    assert st.oom_pauses == 1 and st.errors.get("oom", 0) >= 1, st
    assert len(await logged(caplog, "out of memory")) == 1
    before = commandstats(srv.port).get("set", 0)
    for tag in range(100, 105):  # paused: nothing sent, each dropped and counted
        assert await tier.put_many(items(tier.codec, 4, 64 << 10, tag)) == 0
    assert commandstats(srv.port).get("set", 0) == before
    st2 = tier.stats()
    assert st2.puts_paused == 20 and st2.oom_pauses == 1
    assert st2.breaker_state == int(BreakerState.CLOSED)  # Redis answered: not an outage
    keys = [k for k, _ in items(tier.codec, 4, 64 << 10, 0)]
    assert await tier.probe(keys) == 4  # reads go on


async def _two_node_cluster(servers) -> tuple[RedisServer, RedisServer]:
    a, b = _cluster_node(servers), _cluster_node(servers)
    ra, rb = redis.Redis(port=a.port), redis.Redis(port=b.port)
    try:
        ra.execute_command("CLUSTER", "ADDSLOTSRANGE", 0, 8191)
        rb.execute_command("CLUSTER", "ADDSLOTSRANGE", 8192, 16383)
        ra.execute_command("CLUSTER", "MEET", "127.0.0.1", b.port)
        for _ in range(300):  # bounded: gossip converges in about a second
            if all(r.info("cluster").get("cluster_enabled") and
                   r.execute_command("CLUSTER", "INFO").decode().count("cluster_state:ok")
                   for r in (ra, rb)):
                return a, b
            await asyncio.sleep(0.05)
        pytest.fail("the two-node cluster did not reach cluster_state:ok in 15 s")
    finally:
        ra.close()
        rb.close()


async def test_crossslot_and_moved_replies_are_logged_once_naming_the_fix(servers, tiers,
                                                                          caplog):
    a, _ = await _two_node_cluster(servers)
    tier = tiers(a.url)  # no warm_up: as when the server came up as a cluster node later
    keys = [k for k, _ in items(tier.codec, 8)]
    slots = redis.Redis(port=a.port)
    mine = [k for k in keys if slots.execute_command("CLUSTER", "KEYSLOT", k) < 8192]
    other = [k for k in keys if k not in mine]
    slots.close()
    assert mine and other
    for _ in range(3):
        # the tier's own scripts and MGETs stay in one slot each (one hash tag), so only a
        # multi-key TOUCH over several prefixes' keys can still meet CROSSSLOT on one node
        assert await tier.touch(keys) == 0
        assert await tier.get_many(other[:1]) == [None]  # a key of the other node: MOVED
    assert len(lines(caplog, "answered CROSSSLOT")) == 1
    assert len(lines(caplog, "answered MOVED")) == 1
    assert all(CLUSTER_FIX in m for m in lines(caplog, "answered "))
    assert tier.stats().errors.get("cluster") == 6
    assert tier.breaker.state is BreakerState.CLOSED
