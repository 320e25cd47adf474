"""A value that grows past the codec's largest after the probe found it is never read whole
(NOTE(bounded-get), real redis-server on loopback: one server, a cluster, a Sentinel-managed
master). The probe drops such a string, but one written between the probe and the get was
read by the get's MGET, all of it (tens of MB on the serving path). Each test writes it right
after the probe, so the race is deterministic; Redis's own ``total_net_output_bytes`` shows
what it sent. The request falls back to a miss for that key, the key is deleted, nothing else
changes."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import time

import pytest
import redis

from bench.redis_ports import reserve_port
from bench.redis_servers import REDIS_SERVER, ping, terminate
from kvpool.remote import BreakerState, CircuitBreaker, RedisTier, ValueCodec
from tests.remote.chains import chain
from tests.remote.conftest import NS
from kvpool.remote.redis_tier import GET_PARTS
from tests.remote.engines import PROMPT, engine, fresh_tokens, run, settle, stop, tokens
from tests.remote.redis_stats import CountedReads, commandstats

BLOCK = 256  # bytes per block: a value is its header and one block
GROWN = 32 << 20  # what the grown value adds: far more than any reply the get should cause
SLACK = 1 << 20  # the test's own replies (INFO) and a get's values stay far below this


def sent_bytes(port: int) -> int:
    """Bytes the server at ``port`` has sent to its clients so far (not to its replicas: the
    grown value streams to the Sentinel deployment's replica meanwhile)."""
    r = redis.Redis(port=port)
    try:
        st = r.info("stats")
        return int(st["total_net_output_bytes"]) - int(st.get("total_net_repl_output_bytes", 0))
    finally:
        r.close()


def grow(port: int, key: str, value: bytes) -> None:
    """``key`` := a valid value with GROWN bytes after it (what a hostile writer could put)."""
    r = redis.Redis(port=port)
    try:
        r.set(key, value + b"\0" * GROWN)
    finally:
        r.close()


def items(codec: ValueCodec, salt: str, n: int = 4) -> list[tuple[str, bytes]]:
    return [(NS.key(h), codec.encode(h, [bytes([i + 1]) * BLOCK]))
            for i, h in enumerate(chain(n, salt=salt))]


@pytest.fixture
def sentinel(redis_server, tmp_path):
    """A sentinel naming the fixture's server the master of service kvp (no replica: quick to
    start); the tier's URL. Stopped by pid."""
    port, held = reserve_port()  # until the sentinel is stopped (NOTE(port-hold))
    conf = tmp_path / "sentinel.conf"
    conf.write_text(f"port {port}\nbind 127.0.0.1\ndir {tmp_path}\n"
                    f"sentinel monitor kvp 127.0.0.1 {redis_server.port} 1\n")
    proc = subprocess.Popen([REDIS_SERVER, str(conf), "--sentinel"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(500):  # bounded: it names the master as soon as it answers
            if ping(port):
                break
            time.sleep(0.02)
        else:
            pytest.fail("the sentinel never answered")
        yield f"redis+sentinel://127.0.0.1:{port}/kvp"
    finally:
        terminate(proc)
        for sock in held:
            sock.close()


@pytest.fixture(params=["server", "cluster", "sentinel"])
def deployment(request):
    """(the tier's URL, the port of the server holding a key) of each kind of deployment."""
    if request.param == "server":
        srv = request.getfixturevalue("redis_server")
        return srv.url, lambda key: srv.port
    if request.param == "cluster":
        c = request.getfixturevalue("redis_cluster")
        return c.url, lambda key: c.master_of(key).port
    srv = request.getfixturevalue("redis_server")
    return request.getfixturevalue("sentinel"), lambda key: srv.port


async def test_a_value_grown_after_the_probe_is_not_read_whole(deployment):
    url, port_of = deployment
    tier = RedisTier(url, ValueCodec(NS, BLOCK), op_timeout=5.0, connect_timeout=5.0,
                     breaker=CircuitBreaker(threshold=3, reset_s=0.5))
    try:
        its, others = items(tier.codec, "grown"), items(tier.codec, "bystander")
        keys, okeys = [k for k, _ in its], [k for k, _ in others]
        assert await tier.put_many(its + others) == 8
        assert await tier.probe(keys) == 4  # all there and of the codec's size
        port = port_of(keys[2])
        grow(port, keys[2], its[2][1])  # after the probe, before the get
        before = sent_bytes(port)
        got, other = await asyncio.gather(tier.get_many(keys), tier.get_many(okeys))
        sent = sent_bytes(port) - before
        assert sent < SLACK, f"{sent} bytes sent: the grown value was read"
        assert got == [v for _, v in its[:2]] + [None, its[3][1]]
        assert other == [v for _, v in others]  # the request beside it is served whole
        st = tier.stats()
        assert st.errors == {"corrupt": 1} and st.deleted_invalid == 1, st
        assert st.breaker_state == int(BreakerState.CLOSED)
        assert await tier.probe(keys) == 2  # deleted: the next write heals the prefix
        assert await tier.put_many(its[2:3]) == 1
        assert await tier.get_many(keys) == [v for _, v in its]
    finally:
        await tier.aclose()


async def test_a_request_whose_value_grows_recomputes_and_leaks_nothing(redis_server):
    """Through an engine: the fetch lands the run before the grown key, the request computes
    the rest (the same greedy tokens), and a request beside it is served from Redis whole.
    The seam wraps the tier's get_many to grow a key before the real one runs (after the
    probe); Redis itself is real."""
    want = await fresh_tokens(PROMPT)
    other = [(i * 13 + 1) % 500 + 1 for i in range(16 * 20 + 3)]
    want_other = await fresh_tokens(other)
    e1 = await engine(redis_server.url)
    await run(e1, PROMPT)
    await run(e1, other)
    await settle(e1)
    key = e1.remote_link.group_keys(e1.core.manager.hasher.hash_blocks(PROMPT))[8]
    await stop(e1)
    r = redis.Redis(port=redis_server.port)
    value = r.get(key)
    r.close()
    e2 = await engine(redis_server.url, op_timeout_ms=5000.0, prefetch_timeout_ms=10_000.0,
                      connect_timeout_ms=5000.0)
    tier, real, grown = e2.remote_link.tier, e2.remote_link.tier.get_many, []

    async def grow_then_get(keys, parts=None):
        if key in keys and not grown:
            grow(redis_server.port, key, value)
            grown.append(key)
        return await real(keys, parts)

    tier.get_many = grow_then_get
    before = sent_bytes(redis_server.port)
    a, b = await asyncio.gather(run(e2, PROMPT), run(e2, other))
    legit = 60 * len(value)  # every value PROMPT's 40 and the other's 20 blocks could fetch
    assert grown and sent_bytes(redis_server.port) - before < legit + SLACK
    assert tokens(a) == want and tokens(b) == want_other
    assert tier.stats().errors == {"corrupt": 1}, tier.stats()
    assert 20 <= e2.reader.stats.fetched_blocks < 20 + 40  # the other's 20, PROMPT's first 8
    await stop(e2)  # no block leaked


async def test_a_bounded_get_is_one_round_trip_per_part(make_tier, redis_server):
    """O(1) round trips as with MGET: ``GET_PARTS`` pipelines, one GETRANGE per key."""
    tier = make_tier(block_nbytes=BLOCK)
    its = items(tier.codec, "parts", 64)
    assert await tier.put_many(its) == 64
    tier.reads = counted = CountedReads(tier.reads)
    before = commandstats(redis_server.port)
    assert await tier.get_many([k for k, _ in its]) == [v for _, v in its]
    after = commandstats(redis_server.port)
    assert counted.calls == GET_PARTS and after["getrange"] - before.get("getrange", 0) == 64
    assert after.get("mget", 0) == before.get("mget", 0)


async def test_an_empty_string_or_a_list_is_no_value(make_tier, redis_server):
    """GETRANGE reads an empty string as a missing key, so the probe drops one (it would stay
    counted present forever); a list written after the probe answers WRONGTYPE: foreign."""
    tier = make_tier(block_nbytes=BLOCK)
    its = items(tier.codec, "empty")
    keys = [k for k, _ in its]
    assert await tier.put_many(its) == 4
    r = redis.Redis(port=redis_server.port)
    try:
        r.set(keys[1], b"")
        assert await tier.probe(keys) == 1 and r.exists(keys[1]) == 0
        assert await tier.put_many(its[1:2]) == 1 and await tier.probe(keys) == 4
        r.delete(keys[3])
        r.rpush(keys[3], b"x")
        assert await tier.get_many(keys) == [v for _, v in its[:3]] + [None]
        assert tier.stats().errors == {"foreign": 1} and r.exists(keys[3]) == 0
    finally:
        r.close()


async def test_a_user_without_getrange_is_served_by_mget_and_told_once(redis_server, caplog):
    """The ACL line before GETRANGE: reads fall back to MGET (unbounded), the fix said once,
    no pause; GETRANGE is tried again after retry_s and used once granted."""
    admin = redis.Redis(port=redis_server.port)
    old_line = "~kvp:* +mget +set +del +touch +type +strlen +evalsha +script|load +ping +info"
    admin.execute_command("ACL", "SETUSER", "u", "on", ">p", *old_line.split())
    tier = RedisTier(f"redis://u:p@127.0.0.1:{redis_server.port}/0", ValueCodec(NS, BLOCK),
                     op_timeout=5.0, connect_timeout=5.0)
    tier.reads.retry_s = 0.0  # try GETRANGE on every read
    caplog.set_level(logging.WARNING, logger="kvpool.remote")
    try:
        its = items(tier.codec, "acl")
        keys = [k for k, _ in its]
        assert await tier.put_many(its) == 4 and await tier.probe(keys) == 4
        for _ in range(3):
            assert await tier.get_many(keys) == [v for _, v in its]
        said = [m for m in caplog.messages if "may not run GETRANGE" in m]
        assert len(said) == 1 and "ACL SETUSER USER +getrange" in said[0], caplog.messages
        st = tier.stats()
        assert not st.errors and st.breaker_state == int(BreakerState.CLOSED), st
        admin.execute_command("ACL", "SETUSER", "u", "+getrange")
        ranges = admin.info("commandstats").get("cmdstat_getrange", {}).get("calls", 0)
        grow(redis_server.port, keys[3], its[3][1])
        before = sent_bytes(redis_server.port)
        assert await tier.get_many(keys) == [v for _, v in its[:3]] + [None]
        assert sent_bytes(redis_server.port) - before < SLACK  # bounded again
        assert admin.info("commandstats")["cmdstat_getrange"]["calls"] - ranges == 4
    finally:
        await tier.aclose()
        admin.close()
