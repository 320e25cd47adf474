"""kvpool_remote_* on a real scrape of a RedisTier that talked to a real Redis."""

from __future__ import annotations

import asyncio

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kvpool.metrics.remote import REMOTE_METRIC_NAMES, RemoteMetrics
from kvpool.remote import BreakerState, CircuitBreaker
from tests.configs import engine_config
from tests.remote.breakers import wait_closed
from tests.remote.conftest import NS


def samples(registry):
    out = {}
    for fam in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


async def test_scrape_reflects_tier_traffic(make_tier, redis_server):
    holder = {}
    metrics = RemoteMetrics(lambda: holder["tier"].stats())
    tier = holder["tier"] = make_tier(observer=metrics.observe)
    h = [bytes([i]) * 32 for i in range(3)]
    keys = NS.group_keys(h)
    vals = [tier.codec.encode(h[i], [b"k" * 100]) for i in range(2)]
    await tier.put_many(list(zip(keys, vals)))
    assert await tier.probe(keys) == 2
    await tier.get_many(keys[:2])
    redis_server.kill()
    await tier.put_many([(keys[2], tier.codec.encode(h[2], [b"k" * 100]))])
    s = samples(metrics.registry)
    assert s[("kvpool_remote_probes_total", ())] == 1
    assert s[("kvpool_remote_hit_blocks_total", ())] == 2
    assert s[("kvpool_remote_miss_blocks_total", ())] == 1
    assert s[("kvpool_remote_put_bytes_total", ())] == sum(map(len, vals))
    assert s[("kvpool_remote_get_bytes_total", ())] == sum(map(len, vals))
    assert s[("kvpool_remote_puts_dropped_total", ())] == 1
    assert s[("kvpool_remote_errors_total", (("kind", "connection"),))] == 1
    assert s[("kvpool_remote_errors_total", (("kind", "timeout"),))] == 0
    assert s[("kvpool_remote_breaker_state", ())] == 0  # one failure < threshold 3
    for op in ("probe", "get", "put"):
        assert s[(f"kvpool_remote_{op}_seconds_count", ())] == 1  # the failed put not timed
    names = {n.removesuffix("_count") for n, _ in s if not n.endswith(("_bucket", "_sum",
                                                                        "_created"))}
    assert {n for n in REMOTE_METRIC_NAMES} <= names


async def test_attached_to_server_metrics_fast_render_matches_reference(make_tier):
    """attach(): the server's own render() carries the remote families and histograms, with
    the same samples prometheus_client's exposition of that registry has."""
    from kvpool.runtime.engine.async_engine import AsyncEngine

    eng = AsyncEngine(engine_config("small", num_device_blocks=8, num_host_blocks=8))
    server = eng.metrics  # the registry kvpool serve's /metrics renders
    holder = {}
    metrics = RemoteMetrics(lambda: holder["tier"].stats())
    tier = holder["tier"] = make_tier(observer=metrics.observe)
    metrics.attach(server)
    k = NS.key(b"\x07" * 32)
    await tier.put_many([(k, tier.codec.encode(b"\x07" * 32, [b"v" * 64]))])
    assert await tier.probe([k]) == 1
    metrics.observe("prefetch_wait", 0.003)

    def parsed(text: bytes) -> dict:
        out = {}
        for fam in text_string_to_metric_families(text.decode()):
            for s in fam.samples:
                if not s.name.endswith("_created"):
                    out[(s.name, tuple(sorted(s.labels.items())))] = s.value
        return out

    fast, ref = parsed(server.render()), parsed(server.render_reference())
    assert fast == ref
    assert fast[("kvpool_remote_probes_total", ())] == 1
    assert fast[("kvpool_remote_hit_blocks_total", ())] == 1
    assert fast[("kvpool_remote_prefetch_wait_seconds_count", ())] == 1
    assert fast[("kvpool_remote_prefetch_wait_seconds_bucket", (("le", "0.005"),))] == 1
    assert fast[("kvpool_remote_prefetch_wait_seconds_bucket", (("le", "0.002"),))] == 0
    engine_series = ("kvpool_time_to_first_token_seconds_count", (("model_name", eng.model_name),))
    assert engine_series in fast  # the engine's still there


async def test_health_check_pings_of_an_open_breaker_are_exported(make_tier, redis_server):
    """Redis dies (the breaker opens, its background PINGs fail), comes back on the same port
    (a PING closes it): kvpool_remote_health_checks_total counts every one of those PINGs,
    kvpool_remote_health_failed_total the failed ones, kvpool_remote_breaker_opens_total the
    one opening."""
    holder = {}
    metrics = RemoteMetrics(lambda: holder["tier"].stats())
    tier = holder["tier"] = make_tier(breaker=CircuitBreaker(threshold=1, reset_s=0.2))
    key = NS.key(b"\x05" * 32)
    assert await tier.probe([key]) == 0  # answered (empty): closed, no PING yet
    before = samples(metrics.registry)
    assert before[("kvpool_remote_health_checks_total", ())] == 0
    assert before[("kvpool_remote_breaker_opens_total", ())] == 0
    redis_server.kill()
    assert await tier.probe([key]) == 0  # refused: the breaker opens
    assert tier.breaker.state is not BreakerState.CLOSED
    for _ in range(250):  # bounded: the first trial PING is due 0.2 s after opening
        if tier.stats().health_failed:
            break
        await asyncio.sleep(0.02)
    assert tier.stats().health_failed >= 1
    redis_server.start()  # the same port again
    assert await wait_closed(tier, 5.0) is not None, tier.stats()
    st = tier.stats()
    s = samples(metrics.registry)
    assert st.health_checks - st.health_failed == 1  # the one answered PING closed it
    assert s[("kvpool_remote_health_checks_total", ())] == st.health_checks >= 2
    assert s[("kvpool_remote_health_failed_total", ())] == st.health_failed >= 1
    assert s[("kvpool_remote_breaker_opens_total", ())] == st.breaker_opens == 1
    assert s[("kvpool_remote_breaker_state", ())] == int(BreakerState.CLOSED)


async def test_write_dedup_probes_are_not_read_hits_and_read_outcomes_are_exported(
        redis_server):
    """NOTE(dedup-probe) in kvpool/remote/tier.py: a replica that recomputes a prefix
    another replica stored (here: its cost model declines the fetch) probes the tier again
    before storing it, to skip what is there. That probe found every block and was counted
    in kvpool_remote_hit_blocks_total, which rose while the tier served nothing; and what the
    read path decided (kvpool_remote_read_requests_total{outcome}, fetched blocks) was
    exported nowhere."""
    from tests.remote.engines import PROMPT, engine, run, settle, stop, stored

    other = [(i * 11 + 5) % 500 + 1 for i in range(16 * 8 + 3)]  # not PROMPT's start
    limit = (len(PROMPT) - 1) // 16
    await stop(await stored(redis_server.url))
    declining = await engine(redis_server.url, fetch_bias=1e9)  # stores what it computes
    try:
        await run(declining, other)  # rate measured; not in the tier: a miss
        await run(declining, PROMPT)  # declined unprobed, recomputed, then stored: deduped
        await settle(declining)
        s = samples(RemoteMetrics(declining.remote_link.tier.stats).registry)
    finally:
        await stop(declining)
    assert s[("kvpool_remote_hit_blocks_total", ())] == 0  # nothing was served
    assert s[("kvpool_remote_dedup_hit_blocks_total", ())] == limit
    assert s[("kvpool_remote_dedup_probes_total", ())] >= 2
    assert s[("kvpool_remote_probes_total", ())] == 1  # other's read
    assert s[("kvpool_remote_read_requests_total", (("outcome", "unprobed"),))] == 1
    assert s[("kvpool_remote_read_requests_total", (("outcome", "miss"),))] == 1
    assert s[("kvpool_remote_read_requests_total", (("outcome", "fetched"),))] == 0
    assert s[("kvpool_remote_fetched_blocks_total", ())] == 0

    reading = await engine(redis_server.url, policy="off")
    try:
        await run(reading, PROMPT)
        s = samples(RemoteMetrics(reading.remote_link.tier.stats).registry)
    finally:
        await stop(reading)
    assert s[("kvpool_remote_read_requests_total", (("outcome", "fetched"),))] == 1
    assert s[("kvpool_remote_fetched_blocks_total", ())] == limit
    assert s[("kvpool_remote_hit_blocks_total", ())] == limit
