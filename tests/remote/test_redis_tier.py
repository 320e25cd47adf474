"""RedisTier against a real redis-server on loopback: bytes, probe semantics, dedup, bad values,
and faults (kill -9, SIGSTOP). Bounds on fault behaviour are generous upper limits that a
tier with redis-py's defaults (seconds per call, retries, 30 s hangs) would miss by far."""

from __future__ import annotations

import asyncio
import hashlib
import time

import pytest
import torch
import redis

from kvpool.remote import BreakerState, CircuitBreaker, Namespace
from kvpool.remote.codec import HEADER_SIZE
from tests.remote.chains import chain
from tests.remote.conftest import NS


def block_tensors(dtype: torch.dtype, shape: tuple[int, ...], n: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(shape, generator=g, dtype=torch.float32).to(dtype) for _ in range(n)]


def raw(t: torch.Tensor) -> bytes:
    return t.contiguous().view(torch.uint8).numpy().tobytes()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape,group", [((2, 2, 16, 2, 16), 1), ((2, 4, 16, 1, 64), 2),
                                         ((1, 8, 3, 5), 4)])
async def test_round_trip_is_byte_exact(make_tier, dtype, shape, group):
    name = str(dtype).removeprefix("torch.")
    ns = Namespace(model_id="tiny", weights="seed0", dtype=name, block_size=16, layers=2,
                   kv_heads=2, head_dim=16, blocks_per_object=group)
    tensors = block_tensors(dtype, shape, 3 * group)
    nbytes = len(raw(tensors[0]))
    tier = make_tier(ns, block_nbytes=nbytes)
    hashes = chain(3 * group)
    keys = ns.group_keys(hashes)
    assert len(keys) == 3
    items = [(k, tier.codec.encode(hashes[(i + 1) * group - 1],
                                   [raw(t) for t in tensors[i * group:(i + 1) * group]]))
             for i, k in enumerate(keys)]
    assert await tier.put_many(items) == 3
    values = await tier.get_many(keys)
    got = []
    for i, v in enumerate(values):
        dec = tier.codec.decode(v, hashes[(i + 1) * group - 1])
        assert dec.tokens == group * 16
        for view in dec.blocks:
            t = torch.frombuffer(bytearray(view), dtype=torch.uint8).view(dtype).view(shape)
            got.append(t)
    assert [hashlib.sha256(raw(t)).hexdigest() for t in got] == \
        [hashlib.sha256(raw(t)).hexdigest() for t in tensors]
    assert all(torch.equal(a, b) for a, b in zip(got, tensors))
    st = tier.stats()
    assert st.puts == 3 and st.put_bytes == sum(len(v) for _, v in items)
    assert st.get_bytes == st.put_bytes and not st.errors


async def _fill(tier, hashes, which):
    keys = NS.group_keys(hashes)
    items = [(keys[i], tier.codec.encode(hashes[i], [bytes([i]) * 64])) for i in which]
    assert await tier.put_many(items) == len(items)
    return keys


async def test_probe_is_the_leading_run(make_tier):
    tier = make_tier()
    hashes = chain(8)
    keys = await _fill(tier, hashes, [0, 1, 2, 4, 5, 6, 7])  # a hole at 3
    assert await tier.probe(keys) == 3
    assert await tier.probe(keys[4:]) == 4
    assert await tier.probe(keys[3:]) == 0
    assert await tier.probe([]) == 0
    st = tier.stats()
    assert (st.probes, st.hit_blocks, st.miss_blocks) == (3, 7, 5 + 0 + 5)


async def test_a_key_of_another_type_ends_the_run_and_is_deleted(make_tier, redis_server):
    """A LIST where a value belongs counted as present (TOUCH), then MGET read nil and SET NX
    never replaced it: that prefix missed in the tier for good. Now the probe stops there,
    deletes it, and the next write heals it."""
    tier = make_tier()
    hashes = chain(4)
    keys = await _fill(tier, hashes, [0, 1, 3])
    r = redis.Redis(port=redis_server.port)
    try:
        r.rpush(keys[2], b"not a value")
        assert await tier.probe(keys) == 2
        assert r.exists(keys[2]) == 0 and r.exists(keys[3]) == 1
        await _fill(tier, hashes, [2])
        assert await tier.probe(keys) == 4
    finally:
        r.close()


async def test_probe_refreshes_lru_of_the_run_only(make_tier, redis_server):
    tier = make_tier()
    hashes = chain(4)
    keys = await _fill(tier, hashes, [0, 1, 3])
    r = redis.Redis(port=redis_server.port)
    try:
        await asyncio.sleep(2.1)  # OBJECT IDLETIME has a resolution of seconds
        assert await tier.probe(keys) == 2
        idle = [r.object("idletime", k) for k in (keys[0], keys[1], keys[3])]
        assert idle[0] == 0 and idle[1] == 0 and idle[2] >= 2
    finally:
        r.close()


async def test_set_nx_dedups(make_tier):
    tier = make_tier()
    h = chain(1)[0]
    key = NS.key(h)
    first = tier.codec.encode(h, [b"a" * 64])
    second = tier.codec.encode(h, [b"b" * 64])
    assert await tier.put_many([(key, first)]) == 1
    assert await tier.put_many([(key, second)]) == 0
    assert await tier.get_many([key]) == [first]
    st = tier.stats()
    assert (st.puts, st.puts_deduped, st.put_bytes) == (1, 1, len(first))


@pytest.mark.parametrize("kind", ["corrupt", "short", "foreign"])
async def test_bad_value_is_a_miss_deleted_and_counted(make_tier, redis_server, kind):
    tier = make_tier()
    hashes = chain(2)
    keys = NS.group_keys(hashes)
    good = tier.codec.encode(hashes[0], [b"\x01" * 256])
    value = bytearray(tier.codec.encode(hashes[1], [b"\x02" * 256]))
    if kind == "corrupt":
        value[HEADER_SIZE + 10] ^= 0xFF
    elif kind == "short":
        value = value[:HEADER_SIZE + 100]
    else:  # another model's value under this key
        other = Namespace(model_id="other", weights="w", dtype="float32", block_size=16,
                          layers=2, kv_heads=2, head_dim=16)
        from kvpool.remote import ValueCodec
        value = bytearray(ValueCodec(other).encode(hashes[1], [b"\x02" * 256]))
    r = redis.Redis(port=redis_server.port)
    try:
        r.set(keys[0], good)
        r.set(keys[1], bytes(value))
        assert await tier.get_many(keys) == [good, None]
        assert r.exists(keys[1]) == 0 and r.exists(keys[0]) == 1
    finally:
        r.close()
    st = tier.stats()
    assert st.errors == {kind: 1} and st.deleted_invalid == 1 and st.get_missing == 1


async def _misses_until(tier, keys, pred, bound_s):
    """Call probe repeatedly (as live traffic would) until pred(result) or bound_s passes."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < bound_s:
        if pred(await tier.probe(keys)):
            return time.monotonic() - t0
        await asyncio.sleep(0.05)
    return None


async def test_redis_killed_fails_fast_opens_breaker_then_recovers(make_tier, redis_server):
    tier = make_tier(breaker=CircuitBreaker(threshold=3, reset_s=0.5))
    hashes = chain(2)
    keys = await _fill(tier, hashes, [0, 1])
    assert await tier.probe(keys) == 2
    redis_server.kill()
    for _ in range(3):  # connection refused: each a quick miss, no retries
        t0 = time.monotonic()
        assert await tier.probe(keys) == 0
        assert await tier.get_many(keys) == [None, None]
        assert time.monotonic() - t0 < 1.0
    assert tier.breaker.state is BreakerState.OPEN
    n_conn = tier.stats().errors.get("connection", 0)
    for _ in range(50):  # open: answered without the network (no new connection error)
        assert await tier.probe(keys) == 0
    st = tier.stats()
    assert st.errors.get("connection", 0) == n_conn and st.errors["breaker_open"] >= 50
    assert st.breaker_state == int(BreakerState.OPEN) and st.breaker_opens == 1
    redis_server.start()  # restarted empty on the same port
    keys = await _fill_after_recovery(tier, hashes)
    assert await tier.probe(keys) == 2
    assert tier.breaker.state is BreakerState.CLOSED


async def _fill_after_recovery(tier, hashes):
    assert await _misses_until(tier, [NS.key(hashes[0])], lambda n: tier.breaker.state
                               is BreakerState.CLOSED, 5.0) is not None
    return await _fill(tier, hashes, [0, 1])


async def test_redis_hung_misses_within_deadline_and_recovers(make_tier, redis_server):
    tier = make_tier(op_timeout=0.25, connect_timeout=0.2,
                     breaker=CircuitBreaker(threshold=3, reset_s=1.0))
    hashes = chain(2)
    keys = await _fill(tier, hashes, [0, 1])
    assert await tier.probe(keys) == 2
    redis_server.pause()
    try:
        t0 = time.monotonic()
        assert await tier.probe(keys) == 0
        # the deadline is 0.25 s; a hung call with redis-py defaults waits > 30 s
        assert time.monotonic() - t0 < 1.0
        # one missed deadline opens it (no threshold for timeouts)
        assert tier.breaker.state is not BreakerState.CLOSED
        assert tier.stats().errors["timeout"] == 1
        before = tier.stats().errors
        assert await tier.get_many(keys) == [None, None]
        after = tier.stats().errors  # open breaker: refused, no network call timed out
        assert after["timeout"] == 1 and after["breaker_open"] == before.get("breaker_open", 0) + 1
    finally:
        redis_server.resume()
    took = await _misses_until(tier, keys, lambda n: n == 2, 5.0)
    assert took is not None and took < 2.5, took  # target 2 s after SIGCONT (reset 1 s)
    assert tier.breaker.state is BreakerState.CLOSED
    assert await tier.get_many(keys[:1]) != [None]


async def test_probe_refreshes_the_held_head_and_counts_only_the_rest(make_tier):
    tier = make_tier()
    hashes = chain(6)
    keys = await _fill(tier, hashes, [0, 2, 3, 4])  # the head has a hole at 1
    # the head (keys 0-1) is refreshed whatever its state; the run is counted from key 2
    assert await tier.probe(keys[2:], refresh=keys[:2]) == 3
    assert await tier.probe(keys[2:]) == 3 and await tier.probe(keys) == 1
    st = tier.stats()
    assert st.hit_blocks == 7 and st.miss_blocks == 1 + 1 + 5
