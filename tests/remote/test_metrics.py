"""kvpool_remote_* on a real scrape of a RedisTier that talked to a real Redis."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kvpool.metrics.remote import REMOTE_METRIC_NAMES, RemoteMetrics
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
    keys = [NS.key(x) for x in h]
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
