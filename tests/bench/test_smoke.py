"""Every benchmark runs end to end in --quick mode and writes KEY, KEY.min and KEY.max for
each of its figures (../shared/BENCH.md), min <= median <= max. Nothing here is timed: the
figures are only checked for shape and order, never for speed."""

import pytest

from tests.bench.runs import check_keys, run_bench

POOL = ["decode.per_seq_ops_per_s", "decode.batched_ops_per_s", "bulk.blocks_per_s",
        "decode.per_seq_ops_per_s.nocache", "decode.batched_ops_per_s.nocache",
        "bulk.blocks_per_s.nocache", "hash.tokens_per_s", "lookup.hits_per_s",
        "lookup.misses_per_s", "cycle.unique.requests_per_s", "cycle.shared.requests_per_s",
        "cycle.nocache.requests_per_s", "memory.bytes_per_block"]
COPY = ["swap.gbps", "swap.memcpy_gbps", "swap.ratio", "defrag.gbps", "defrag.memcpy_gbps",
        "defrag.ratio", "overlap.step_slowdown", "overlap.step_seconds",
        "overlap.step_seconds_with_swap", "overlap.swap_gbps_during",
        "overlap.step_slowdown_nice10"]
SERVE = ["engine.output_tokens_per_s", "hf.output_tokens_per_s", "ratio", "kv.utilization",
         "kv.contiguous_utilization", "scrape.p50_ms", "scrape.p99_ms"]
STRUCTURED = ["step_ms.free", "step_ms.json", "mask_us.v512", "mask_us.v150k"]
LOGPROBS = ["step.ms_plain", "step.ms_logprobs", "step.ratio"]
ASYNC = ["batched.ops_per_s", "per_call_lock.ops_per_s", "ratio",
         "per_call_trylock.ops_per_s", "ratio_vs_trylock"]


@pytest.mark.parametrize("module,keys", [("bench.copy", COPY), ("bench.serve", SERVE),
                                         ("bench.async_pool", ASYNC),
                                         ("bench.structured", STRUCTURED),
                                         ("bench.logprobs", LOGPROBS)])
def test_bench_quick_writes_median_min_max(tmp_path, module, keys):
    # the --json folder does not exist yet: the bench creates it
    res, out = run_bench(module, tmp_path / "out" / "x.json")
    check_keys(res, keys, repeats=2)
    assert "[" in out  # the table prints the spread


def test_bench_pool_quick(tmp_path):
    res, out = run_bench("bench.pool", tmp_path / "out" / "pool.json", "--no-anchors",
                         "--repeats", "3")
    check_keys(res, POOL, repeats=3)
    assert res["hash.algo"] == "sha256"
    assert res["baselines"] == {"vllm": None, "nanovllm": None}
    assert "[" in out and "decode.batched_ops_per_s" in out


def test_bench_sched_quick(tmp_path):
    res, _ = run_bench("bench.sched", tmp_path / "sched.json")
    for name in ("decode256", "decode1024", "mixed256"):
        r = res[name]
        assert r["us_per_seq_step.min"] <= r["us_per_seq_step"] <= r["us_per_seq_step.max"]
    # the growth with the batch: per-round ratios of the two decode sizes' same-round runs
    g = [res[f"decode1024_over_decode256{k}"] for k in (".min", "", ".max")]
    assert 0 < g[0] <= g[1] <= g[2]


def test_bench_remote_quick(tmp_path):
    # a real redis-server on loopback; the tier and the bare redis.asyncio client alternate
    res, out = run_bench("bench.remote", tmp_path / "remote.json")
    keys = [f"{op}.{size}k.{mode}.{side}" for op in ("get", "put") for size in (64, 1024)
            for mode in ("single", "pipelined", "concurrent")
            for side in ("tier_mib_s", "raw_mib_s", "ratio")]
    check_keys(res, keys + ["probe.lua_p50_ms", "probe.lua_p99_ms",
                            "probe.exists_pipelined_p50_ms"], repeats=2)
    from kvpool.remote.redis_tier import GET_PARTS
    # one GETRANGE per key (NOTE(bounded-get)) in GET_PARTS pipelines: a round trip each
    assert res["round_trips.get_many_64"] == 64 and res["round_trips.probe_64"] == 1
    assert 1 <= res["round_trips.get_many_64_reads"] <= GET_PARTS
    assert "tier/raw" in out
    # the TTFT section runs by default (--quick: 1, 8, 128 blocks, 2 repeats)
    assert res["ttft.lengths"] == [1, 8, 128] and res["ttft.repeats"] == 2
    assert res["ttft.128.forced_fetched_blocks"] == 128  # a forced fetch took every block
    check_keys(res, [f"ttft.{b}.{arm}_ms" for b in (1, 8, 128)
                     for arm in ("fetch", "forced", "recompute")], repeats=2)
    assert "break-even" in out
