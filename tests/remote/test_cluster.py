"""The tier on a real 3-master Redis Cluster (``redis+cluster://``): probes and MGETs stay in
one slot per prefix segment, two engines share a 2k-token prompt through it, MOVED is followed
and counted, and a bad URL is refused naming the accepted forms."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import pytest
import redis

from kvpool.errors import ConfigError
from kvpool.metrics.remote import RemoteMetrics
from kvpool.remote import CircuitBreaker, RedisTier, ValueCodec
from kvpool.remote.clients import client_from_url
from kvpool.remote.connections import BufferedConnection
from kvpool.remote.keys import segment_of
from kvpool.runtime.engine.async_engine import AsyncEngine
from kvpool.server.remote_setup import build_link
from tests.configs import engine_config
from tests.remote.breakers import warmed
from tests.remote.chains import chain
from tests.remote.conftest import NS
from tests.remote.engines import run, settle, stop, tokens

LONG = [(i * 11 + 5) % 500 + 1 for i in range(16 * 128 + 5)]


async def cluster_engine(url: str) -> AsyncEngine:
    # room for a 2k-token prompt (128 full blocks) on each engine
    eng = AsyncEngine(engine_config("long", max_num_seqs=4, max_num_batched_tokens=512,
                                    enable_prefix_caching=True))
    # deadlines far above the defaults: on a loaded 2-core CI box a node's round trip once
    # stalled past the 0.25 s op deadline and the read fell short; this test is about sharing
    # through the cluster, the deadlines are tests/remote/test_remote_faults.py's
    eng.remote_link = build_link(eng, url, write_policy="write_through", op_timeout_ms=5000.0,
                                 connect_timeout_ms=5000.0, prefetch_timeout_ms=10000.0)
    await eng.start()
    return eng


def tier(url: str, **kw) -> RedisTier:
    kw.setdefault("breaker", CircuitBreaker(threshold=3, reset_s=0.5))
    # the engines' deadlines, for the same reason (the errors asserted are the cluster's)
    kw.setdefault("op_timeout", 5.0)
    kw.setdefault("connect_timeout", 5.0)
    return RedisTier(url, ValueCodec(NS), **kw)


def items(codec, hashes, size=256):
    return [(k, codec.encode(h, [bytes([i % 256]) * size]))
            for i, (k, h) in enumerate(zip(NS.group_keys(hashes), hashes))]


async def test_a_long_prefix_is_probed_and_read_per_segment_without_crossslot(redis_cluster):
    t = tier(redis_cluster.url)
    try:
        w = await warmed(t)
        assert issubclass(t.connection_class, BufferedConnection)
        hashes = chain(200, salt="segments")
        its = items(t.codec, hashes)
        keys = [k for k, _ in its]
        assert len({segment_of(k) for k in keys}) == 4  # 64 + 64 + 64 + 8 blocks
        assert await t.put_many(its) == 200
        assert await t.probe(keys) == 200
        assert await t.probe(keys[40:], refresh=keys[:40]) == 160
        assert await t.get_many(keys) == [v for _, v in its]
        # a hole in the second segment ends the run there, whatever the later segments hold
        r = redis.Redis(port=redis_cluster.master_of(keys[100]).port)
        r.delete(keys[100])
        r.close()
        assert await t.probe(keys) == 100
        st = w.stats()
        assert st.errors == {} and w.seen() <= {"full-coverage"}  # NOTE(full-coverage) only
        assert st.hit_blocks == 200 + 160 + 100
    finally:
        await t.aclose()


async def test_two_engines_share_a_2k_token_prompt_through_the_cluster(redis_cluster):
    a = await cluster_engine(redis_cluster.url)
    try:
        want = tokens(await run(a, LONG))
        await settle(a)
    finally:
        await stop(a)
    b = await cluster_engine(redis_cluster.url)
    try:
        got = await run(b, LONG)
        assert tokens(got) == want
        full = len(LONG) // 16
        assert b.reader.stats.fetched_blocks >= 0.9 * full, b.reader.stats
        st = b.remote_link.tier.stats()
        assert st.errors == {} and b.remote_link.tier.faults.seen <= {"full-coverage"}
    finally:
        await stop(b)


async def test_moved_is_followed_and_counted(redis_cluster):
    t = tier(redis_cluster.url)
    metrics = RemoteMetrics(t.stats)
    try:
        w = await warmed(t)
        hashes = chain(8, salt="moved")
        its = items(t.codec, hashes)
        keys = [k for k, _ in its]
        owner = redis_cluster.master_of(keys[0])
        other = next(n for n in redis_cluster.nodes if n is not owner)
        slot = int(redis.Redis(port=owner.port).execute_command("CLUSTER", "KEYSLOT", keys[0]))
        # hand the (empty) slot to another master behind the client's back: its slot map
        # is now stale, and the next call meets MOVED
        other_id = redis.Redis(port=other.port).execute_command("CLUSTER", "MYID")
        for n in redis_cluster.nodes:
            redis.Redis(port=n.port).execute_command("CLUSTER", "SETSLOT", slot, "NODE",
                                                     other_id)
        await asyncio.sleep(0.2)
        assert await t.put_many(its) == 8
        assert await t.probe(keys) == 8
        assert t.redirects.get("moved", 0) >= 1
        family = next(f for f in metrics.families() if f[0] == "kvpool_remote_redirects_total")
        assert dict(family[4])[("moved",)] >= 1
        assert w.stats().errors == {}
    finally:
        await t.aclose()


@pytest.mark.parametrize("url,fix", [
    ("redis-cluster://127.0.0.1:7000", "redis+cluster://HOST:PORT[,HOST:PORT...]"),
    ("http://127.0.0.1:7000", "redis+sentinel://HOST:PORT[,HOST:PORT...]/SERVICE"),
    ("redis+sentinel://127.0.0.1:26379", "name the master's service"),
    ("redis+cluster://127.0.0.1:x,127.0.0.1:7001", "is not HOST:PORT"),
    ("redis+cluster://", "no HOST:PORT"),
])
def test_a_bad_url_names_the_accepted_forms(url, fix):
    with pytest.raises(ConfigError, match="--remote-url") as e:
        client_from_url(url, max_connections=2, connect_timeout=0.2)
    assert fix in str(e.value)


def test_the_password_is_never_in_the_error():
    with pytest.raises(ConfigError) as e:
        client_from_url("redis+sentinel://user:s3cret@127.0.0.1:26379", max_connections=2,
                        connect_timeout=0.2)
    assert "s3cret" not in str(e.value) and "user:***@" in str(e.value)


def test_serve_exits_2_naming_the_fix():
    r = subprocess.run([sys.executable, "-m", "kvpool", "serve", "--remote-url",
                        "redis+sentinel://127.0.0.1:26379", "--port", "0"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr[-2000:]
    assert "redis+sentinel://HOST:PORT[,HOST:PORT...]/SERVICE" in r.stderr
