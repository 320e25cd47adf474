"""Two real ``kvpool serve --remote-url`` processes on one real redis-server.

Replica 1 computes a ~2k-token prompt and stores its blocks (write_through); replica 2, its own
process (own hash seed, own pools), serves the same prompt with >= 90% of its full blocks from
Redis, read from its own /metrics, and the same greedy tokens. Tenant B (another cache_salt)
gets no remote hit on tenant A's prompt. The ``kvpool_remote_*`` families, the prefetch-wait
histogram included, are on each replica's /metrics.
"""

from __future__ import annotations

import asyncio
import os

import aiohttp
import pytest
import redis.asyncio as aioredis

from kvpool.metrics.remote import REMOTE_METRIC_NAMES
from stress.http.metrics import MetricsScrape, scrape, wait_drained
from stress.http.servers import SpawnedServer

BLOCK = 16
PROMPT = [(i * 7 + 3) % 500 + 1 for i in range(2048 + 5)]  # 128 full blocks + a tail
FULL_BLOCKS = (len(PROMPT) - 1) // BLOCK  # the last token is always computed
SERVE_ARGS = ["--num-device-blocks", "320", "--num-host-blocks", "320", "--block-size",
              str(BLOCK), "--max-model-len", "4096", "--max-num-batched-tokens", "512",
              "--enable-prefix-caching", "--remote-write-policy", "write_through",
              "--remote-prefetch-timeout-ms", "5000", "--log-level", "warning"]


def replica(url: str, rid: str, seed: str) -> SpawnedServer:
    # a different PYTHONHASHSEED per process: keys must not depend on it
    env = {**os.environ, "PYTHONHASHSEED": seed}
    return SpawnedServer([*SERVE_ARGS, "--remote-url", url, "--replica-id", rid], env=env)


async def complete(session, base: str, salt: str) -> dict:
    body = {"prompt": PROMPT, "max_tokens": 8, "temperature": 0, "ignore_eos": True,
            "cache_salt": salt, "logprobs": 0}
    async with session.post(base + "/v1/completions", json=body,
                            timeout=aiohttp.ClientTimeout(total=120)) as r:
        data = await r.json()
        assert r.status == 200, data
    return data


def output_tokens(data: dict) -> list[str]:
    return data["choices"][0]["logprobs"]["tokens"]


async def wait_stored(url: str, at_least: int) -> int:
    """Poll the values' keys until replica 1's write-through stores landed (bounded); the
    replicas' secret marker (kvpool/remote/secret_marker.py) is no value."""
    r = aioredis.from_url(url)
    try:
        for _ in range(200):
            n = len([k async for k in r.scan_iter("kvp:*") if not k.endswith(b":secret")])
            if n >= at_least:
                return n
            await asyncio.sleep(0.05)
        pytest.fail(f"only {n} keys in Redis after 10 s, expected {at_least}")
    finally:
        await r.aclose()


def remote(m: MetricsScrape, name: str) -> float:
    return m.get(f"kvpool_remote_{name}")


def check_remote_families(m: MetricsScrape) -> None:
    """Item 1: the remote families on the server's own /metrics, after replica 2 served tenant
    B's miss and tenant A's remote hit."""
    names = {n.removesuffix("_count") for n in m.samples}
    assert set(REMOTE_METRIC_NAMES) <= names, set(REMOTE_METRIC_NAMES) - names
    assert m.get("kvpool_remote_prefetch_wait_seconds_count") == 2  # b2 and a2
    assert m.get("kvpool_remote_probe_seconds_count") == (  # reads and the dedup probes
        remote(m, "probes_total") + remote(m, "dedup_probes_total"))
    assert m.get("kvpool_remote_get_bytes_total") > 0
    assert m.get("kvpool_remote_breaker_state") == 0
    assert m.get("kvpool_remote_errors_total", kind="timeout") == 0


async def test_second_replica_serves_first_replicas_prefix_from_redis(redis_server):
    r1 = replica(redis_server.url, "r1", "1")
    r2 = replica(redis_server.url, "r2", "2")
    try:
        await asyncio.gather(asyncio.to_thread(r1.start), asyncio.to_thread(r2.start))
        async with aiohttp.ClientSession() as s:
            a1 = await complete(s, r1.url, "tenant-a")
            assert a1["usage"]["prompt_tokens"] == len(PROMPT)
            stored = await wait_stored(redis_server.url, FULL_BLOCKS)
            assert stored == FULL_BLOCKS  # one value per full block, nothing else

            m0 = await scrape(s, r2.url)
            b2 = await complete(s, r2.url, "tenant-b")  # same prompt, another tenant
            m1 = await scrape(s, r2.url)
            assert remote(m1, "hit_blocks_total") == remote(m0, "hit_blocks_total") == 0
            assert remote(m1, "miss_blocks_total") > 0  # it did ask, and found nothing
            assert b2["usage"].get("prompt_tokens_details", {}).get("cached_tokens", 0) == 0

            a2 = await complete(s, r2.url, "tenant-a")
            m2 = await scrape(s, r2.url)
            hits = remote(m2, "hit_blocks_total") - remote(m1, "hit_blocks_total")
            assert hits >= 0.9 * FULL_BLOCKS, (hits, FULL_BLOCKS)
            cached = a2["usage"]["prompt_tokens_details"]["cached_tokens"]
            assert cached >= 0.9 * FULL_BLOCKS * BLOCK, cached
            assert output_tokens(a2) == output_tokens(a1)  # fetched bytes, same greedy path
            assert output_tokens(b2) == output_tokens(a1)  # recomputed, same again

            check_remote_families(m2)
            for srv in (r1, r2):
                m, _ = await wait_drained(s, srv.url, timeout=10)
                assert m.used_blocks("device") == m.used_blocks("host") == 0, "leaked blocks"
    finally:
        for srv in (r1, r2):
            srv.stop()
    assert (r1.returncode, r2.returncode) == (0, 0), (r1.tail(), r2.tail())
