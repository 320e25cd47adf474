"""``python -m bench.remote --cluster``: the tier on a 3-master Redis Cluster beside one
server, in the same run, interleaved (bench.common: medians [min-max] of the repeats).

- ``cluster.probe.{single,cluster}_p50_ms`` / ``_p99_ms``: a 64-key prefix probe (two
  32-block segments: on the cluster two scripts at once, maybe on two nodes; one script on
  one server); ``cluster.probe.ratio`` cluster / single (target <= 2).
- ``cluster.get.SIZE.{single,cluster}_mib_s``: ``get_many`` of 8 values of SIZE bytes (one
  segment) through the tier; ``cluster.get.SIZE.ratio`` cluster / single (target >= 0.8).
- ``cluster.share.*``: engine A stores a 2k-token prompt (128 blocks) through the tier, a fresh
  engine B serves it: ``stored_share`` (A's puts / 128), ``fetched_share`` (blocks B got
  from the tier / 128, target >= 0.9) and
  ``ttft_ms`` on the cluster and on one server, beside ``recompute_ttft_ms`` (no tier).

Starts its own servers on 127.0.0.1 (free ports) and stops them by pid. Figures only.
"""

from __future__ import annotations

import os
import time

from bench.common import Timing, aalternate, put_runs, ratio_stat, put
from bench.redis_servers import RedisClusterProcs, RedisServer
from bench.remote_loop import one, store_prefix
from kvpool.remote import CircuitBreaker, Namespace, RedisTier, ValueCodec

SIZES = (512 << 10, 1 << 20, 2 << 20)
SHARE_BLOCKS = 128


def _ns() -> Namespace:
    return Namespace(model_id="bench", weights="w0", dtype="float16", block_size=16, layers=8,
                     kv_heads=4, head_dim=64)


def _chain(tag: int, n: int) -> list[bytes]:
    return [tag.to_bytes(4, "little") + i.to_bytes(28, "little") for i in range(n)]


def _tier(url: str, size: int) -> RedisTier:
    """A tier whose codec knows the block size, as a server's does (its gets are bounded:
    NOTE(bounded-get))."""
    return RedisTier(url, ValueCodec(_ns(), size), op_timeout=5.0, max_connections=8,
                     breaker=CircuitBreaker(threshold=1000))


async def _stored(url: str, tag: int, n: int, size: int) -> tuple[RedisTier, list[str]]:
    t = _tier(url, size)
    assert await t.warm_up(8)
    hs = _chain(tag, n)
    keys = t.codec.namespace.group_keys(hs)
    payload = os.urandom(size)
    for i in range(0, n, 8):
        assert await t.put_many([(k, t.codec.encode(h, [payload]))
                                 for k, h in zip(keys[i:i + 8], hs[i:i + 8])]) >= 0
    assert await t.probe(keys) == n
    return t, keys


def probe_arm(t: RedisTier, keys: list[str], rounds: int):
    """An arm timing ``rounds`` probes of ``keys`` one by one: p50 / p99 ms."""
    async def run() -> dict:
        lat = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            await t.probe(keys)
            lat.append(time.perf_counter() - t0)
        lat.sort()
        return {"seconds": sum(lat), "p50_ms": lat[len(lat) // 2] * 1e3,
                "p99_ms": lat[int(len(lat) * 0.99)] * 1e3}
    return run


def _get_arm(t: RedisTier, keys: list[str], nbytes: int):
    async def run() -> dict:
        t0 = time.perf_counter()
        values = await t.get_many(keys)
        s = time.perf_counter() - t0
        assert all(v is not None for v in values)
        return {"seconds": s, "mib_s": nbytes / s / 2**20}
    return run


async def _probe(urls: dict[str, str], timing: Timing, res: dict) -> None:
    tiers = {name: await _stored(url, 7, 64, 1024) for name, url in urls.items()}
    rounds = 100 if timing.quick else 1000
    try:
        runs = await aalternate({n: probe_arm(t, k, rounds) for n, (t, k) in tiers.items()},
                                timing)
        for n in urls:
            put_runs(res, runs[n], {f"cluster.probe.{n}_p50_ms": "p50_ms",
                                    f"cluster.probe.{n}_p99_ms": "p99_ms"})
        put(res, "cluster.probe.ratio",
            ratio_stat(runs["cluster"], "p50_ms", runs["single"], "p50_ms"))
    finally:
        for t, _ in tiers.values():
            await t.aclose()


async def _get(urls: dict[str, str], size: int, timing: Timing, res: dict) -> None:
    tiers = {name: await _stored(url, 100 + size // 1024, 8, size)
             for name, url in urls.items()}
    try:
        runs = await aalternate({n: _get_arm(t, k, 8 * size) for n, (t, k) in tiers.items()},
                                timing)
        key = f"cluster.get.{size >> 10}KiB"
        for n in urls:
            put_runs(res, runs[n], {f"{key}.{n}_mib_s": "mib_s"})
        put(res, f"{key}.ratio", ratio_stat(runs["cluster"], "mib_s", runs["single"], "mib_s"))
    finally:
        for t, _ in tiers.values():
            await t.aclose()


async def _share(urls: dict[str, str], repeats: int, res: dict) -> None:
    """Interleaved rounds: a fresh prompt stored by engine A per round and tier, served by a
    fresh engine B; and a recompute of the same prompt length."""
    from bench.remote_ttft import prompt_of
    runs: dict[str, list[dict]] = {n: [] for n in (*urls, "recompute")}
    for r in range(repeats):
        for n, url in urls.items():
            prompt = prompt_of(SHARE_BLOCKS, 5000 + 10 * r + len(n))
            stored = await store_prefix(SHARE_BLOCKS, prompt, url)
            one_run = await one(SHARE_BLOCKS, prompt, url, write_policy="off", fetch_bias=0.0,
                                monitor=False)
            one_run["fetched_share"] = one_run["fetched_blocks"] / SHARE_BLOCKS
            one_run["stored_share"] = stored / SHARE_BLOCKS  # what engine A's puts took
            runs[n].append(one_run)
        runs["recompute"].append(await one(SHARE_BLOCKS, prompt_of(SHARE_BLOCKS, 9000 + r),
                                           None, monitor=False))
    for n in urls:
        put_runs(res, runs[n], {f"cluster.share.{n}_fetched_share": "fetched_share",
                                f"cluster.share.{n}_stored_share": "stored_share",
                                f"cluster.share.{n}_ttft_ms": "ttft_ms"})
    put_runs(res, runs["recompute"], {"cluster.share.recompute_ttft_ms": "ttft_ms"})


async def cluster_vs_single(timing: Timing) -> dict:
    """Every section above, on servers this call starts and stops."""
    res: dict = {}
    srv = RedisServer(maxmemory="1gb")
    cl = RedisClusterProcs(masters=3)
    try:
        srv.start()
        cl.start()
        urls = {"single": srv.url, "cluster": cl.url}
        await _probe(urls, timing, res)
        for size in SIZES:
            await _get(urls, size, timing, res)
        await _share(urls, 2 if timing.quick else 5, res)
    finally:
        cl.stop()
        srv.stop()
    return res


def print_cluster(res: dict) -> None:
    def cell(key: str, fmt: str = ".2f") -> str:
        if key not in res:
            return "-"
        return f"{res[key]:{fmt}} [{res[key + '.min']:{fmt}}-{res[key + '.max']:{fmt}}]"
    print("\ncluster vs single server (medians [min-max] of interleaved repeats)")
    print(f"  probe 64 keys p50 ms: single {cell('cluster.probe.single_p50_ms', '.3f')}, "
          f"cluster {cell('cluster.probe.cluster_p50_ms', '.3f')}, ratio "
          f"{cell('cluster.probe.ratio')} (target <= 2)")
    for size in SIZES:
        k = f"cluster.get.{size >> 10}KiB"
        print(f"  get {size >> 10} KiB MiB/s: single {cell(k + '.single_mib_s', '.0f')}, "
              f"cluster {cell(k + '.cluster_mib_s', '.0f')}, ratio {cell(k + '.ratio')} "
              "(target >= 0.8)")
    print(f"  2k-token prompt from the tier: share cluster "
          f"{cell('cluster.share.cluster_fetched_share')}, single "
          f"{cell('cluster.share.single_fetched_share')}; TTFT ms cluster "
          f"{cell('cluster.share.cluster_ttft_ms', '.1f')}, single "
          f"{cell('cluster.share.single_ttft_ms', '.1f')}, recompute "
          f"{cell('cluster.share.recompute_ttft_ms', '.1f')}")
