"""bench/pool.py: the block pool under the anchors' workloads (../shared/BENCH.md).

    python -m bench.pool [--json FILE] [--quick] [--no-anchors]

Runs kvpool's workloads, then ../shared/anchors/bench_vllm_blockpool.py and bench_nanovllm.py
in subprocesses of the same run (when their external sources exist, see
../shared/anchors/setup_vllm_src.sh), and prints the figures side by side. Never pass/fail.
"""

from __future__ import annotations

import argparse
import random
import tracemalloc

from bench.common import best_of, machine, print_table, run_anchor, write_json
from kvpool.config import CacheConfig
from kvpool.core import (BlockHasher, BlockSpaceManager, CachedBlockAllocator, Device,
                         UncachedBlockAllocator)

BS = 16


def _pool(caching: bool, n: int):
    cls = CachedBlockAllocator if caching else UncachedBlockAllocator
    return cls(Device.DEVICE, n, BS)


def bench_decode(caching: bool, batched: bool, num_seqs=256, steps=400, seed=0) -> dict:
    """256 sequences each get one block per step; a sequence reaching its target length
    (uniform 8..64 blocks) is freed (tail first) and replaced."""
    pool = _pool(caching, num_seqs * 64)
    rng = random.Random(seed)
    targets = [rng.randint(8, 64) for _ in range(num_seqs)]
    tables: list[list[int]] = [[] for _ in range(num_seqs)]
    allocs = frees = 0
    import time
    t0 = time.perf_counter()
    if batched:
        # one extend_tables call gives every sequence its block; a calendar (step -> sequences
        # reaching their target then) keeps the harness's own bookkeeping O(finished)
        extend, free_many = pool.extend_tables, pool.free_many
        calendar: dict[int, list[int]] = {}
        for i, t in enumerate(targets):
            calendar.setdefault(t - 1, []).append(i)
        for step in range(steps):
            assert extend(tables)
            allocs += num_seqs
            fin = calendar.pop(step, None)
            if fin:
                done: list[int] = []
                for i in fin:
                    done += tables[i][::-1]
                    tables[i] = []
                    calendar.setdefault(step + rng.randint(8, 64), []).append(i)
                free_many(done)
                frees += len(done)
    else:
        allocate, free_many = pool.allocate, pool.free_many
        for _ in range(steps):
            for i in range(num_seqs):
                tbl = tables[i]
                tbl.append(allocate())
                allocs += 1
                if len(tbl) >= targets[i]:
                    free_many(tbl[::-1])
                    frees += len(tbl)
                    tables[i] = []
                    targets[i] = rng.randint(8, 64)
    dt = time.perf_counter() - t0
    for tbl in tables:
        pool.free_many(tbl[::-1])
    assert pool.stats().num_used == 0, "block leak"
    return {"seconds": dt, "ops_per_s": (allocs + frees) / dt}


def bench_bulk(caching: bool, per=128, rounds=400) -> dict:
    import time
    pool = _pool(caching, per * 64)
    live: list[list[int]] = []
    t0 = time.perf_counter()
    for _ in range(rounds):
        live.append(pool.allocate_many(per))
        if len(live) > 32:
            pool.free_many(live.pop(0)[::-1])
    dt = time.perf_counter() - t0
    return {"seconds": dt, "blocks_per_s": 2 * rounds * per / dt}


def _prompts(seed: int, n: int, length=2048) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(150000) for _ in range(length)] for _ in range(n)]


def bench_hash(algo="sha256", reps=200) -> dict:
    import time
    h = BlockHasher(BS, "bench-model", algo)
    prompts = _prompts(1, 8)
    t0 = time.perf_counter()
    n = 0
    for r in range(reps):
        n += len(h.hash_blocks(prompts[r % 8]))
    dt = time.perf_counter() - t0
    assert n == reps * 128
    return {"seconds": dt, "tokens_per_s": reps * 2048 / dt}


def bench_lookup(reps=300) -> dict:
    import time
    m = BlockSpaceManager(CacheConfig(num_device_blocks=128 * 4, block_size=BS))
    cached, unseen = _prompts(2, 2)
    m.allocate([1], cached)
    m.mark_computed(1)
    hit_h, miss_h = m.hash_prompt(cached), m.hash_prompt(unseen)
    lookup = m.device_pool.lookup
    assert all(lookup(x) is not None for x in hit_h[:127])
    t0 = time.perf_counter()
    for _ in range(reps):
        for x in hit_h:
            lookup(x)
    dt = time.perf_counter() - t0
    t1 = time.perf_counter()
    for _ in range(reps):
        for x in miss_h:
            lookup(x)
    dt1 = time.perf_counter() - t1
    return {"seconds": dt, "hits_per_s": reps * 128 / dt, "misses_per_s": reps * 128 / dt1}


def bench_cycle(scenario: str, n_req=64, decode_steps=128) -> dict:
    """Per request: prefix lookup, admission + allocation of a 2048-token prompt, 128 decode
    steps (append one token + slot each), free. 'shared': identical prompts."""
    import time
    caching = scenario != "nocache"
    m = BlockSpaceManager(CacheConfig(num_device_blocks=4096, block_size=BS,
                                      enable_prefix_caching=caching))
    rng = random.Random(3)
    shared = [rng.randrange(150000) for _ in range(2048)]
    prompts = [shared if scenario == "shared" else [rng.randrange(150000) for _ in range(2048)]
               for _ in range(n_req)]
    hit_tokens = 0
    t0 = time.perf_counter()
    for i, p in enumerate(prompts):
        hashes = m.hash_prompt(p) if caching else None
        if caching:
            m.get_prefix_hits(hashes)
        assert m.can_allocate(len(p), hashes or ()).value == "ok"
        hit_tokens += m.allocate([i], p, block_hashes=hashes)
        m.mark_computed(i)
        for s in range(decode_steps):
            assert m.append_slots(i, (s,)) is not None
        m.free(i)
    dt = time.perf_counter() - t0
    assert m.stats().device.num_used == 0, "block leak"
    return {"seconds": dt, "requests_per_s": n_req / dt, "hit_tokens_per_req": hit_tokens / n_req}


def bench_memory(num_blocks=1_000_000, fill: bool = False) -> dict:
    """tracemalloc bytes of block-pool metadata per block, prefix caching on."""
    tracemalloc.start()
    base = tracemalloc.get_traced_memory()[0]
    m = BlockSpaceManager(CacheConfig(num_device_blocks=num_blocks, block_size=BS))
    empty = tracemalloc.get_traced_memory()[0] - base
    out = {"seconds": 0.0, "bytes_per_block": empty / num_blocks}
    if fill:  # every block used and cached under a 32-byte hash (worst case for the maps)
        pool = m.device_pool
        ids = pool.allocate_many(num_blocks)
        for b in ids:
            pool._register(b, b.to_bytes(32, "little"), 0)
        out["bytes_per_block_all_cached"] = (tracemalloc.get_traced_memory()[0] - base) / num_blocks
    tracemalloc.stop()
    del m
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--json")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--no-anchors", action="store_true")
    args = ap.parse_args()
    rep = 1 if args.quick else args.repeats
    k = 0.25 if args.quick else 1.0
    res: dict = {"machine": machine()}
    f = res
    for caching in (True, False):
        sfx = "" if caching else ".nocache"
        f[f"decode.per_seq_ops_per_s{sfx}"] = best_of(
            rep, lambda: bench_decode(caching, False, steps=int(400 * k)))["ops_per_s"]
        f[f"decode.batched_ops_per_s{sfx}"] = best_of(
            rep, lambda: bench_decode(caching, True, steps=int(400 * k)))["ops_per_s"]
        f[f"bulk.blocks_per_s{sfx}"] = best_of(
            rep, lambda: bench_bulk(caching, rounds=int(400 * k)))["blocks_per_s"]
    f["hash.algo"] = "sha256"
    f["hash.tokens_per_s"] = best_of(rep, lambda: bench_hash(reps=int(200 * k)))["tokens_per_s"]
    lk = best_of(rep, lambda: bench_lookup(reps=int(300 * k)))
    f["lookup.hits_per_s"], f["lookup.misses_per_s"] = lk["hits_per_s"], lk["misses_per_s"]
    for sc in ("unique", "shared", "nocache"):
        f[f"cycle.{sc}.requests_per_s"] = best_of(
            rep, lambda: bench_cycle(sc, n_req=int(64 * k)))["requests_per_s"]
    mem = bench_memory(fill=not args.quick)
    f["memory.bytes_per_block"] = mem["bytes_per_block"]
    if "bytes_per_block_all_cached" in mem:
        f["memory.bytes_per_block_all_cached"] = mem["bytes_per_block_all_cached"]

    vllm = nano = None
    if not args.no_anchors:
        qa = ["--quick"] if args.quick else []
        vllm = run_anchor("bench_vllm_blockpool.py", qa)
        nano = run_anchor("bench_nanovllm.py", qa)
    res["baselines"] = {"vllm": vllm, "nanovllm": nano}
    v = (vllm or {}).get("results", {})
    nv = (nano or {}).get("results", {})

    def g(d, key, field):
        return (d.get(key) or {}).get(field)

    rows = [
        ("decode.per_seq_ops_per_s", f["decode.per_seq_ops_per_s"],
         g(v, "i.decode_1blk_256seq.caching=True", "ops_per_s"), "vLLM caching=True"),
        ("decode.batched_ops_per_s", f["decode.batched_ops_per_s"],
         g(v, "i.decode_1blk_256seq.caching=True", "ops_per_s"), "vLLM caching=True"),
        ("decode.per_seq_ops_per_s.nocache", f["decode.per_seq_ops_per_s.nocache"],
         g(v, "i.decode_1blk_256seq.caching=False", "ops_per_s"), "vLLM caching=False"),
        ("decode.batched_ops_per_s.nocache", f["decode.batched_ops_per_s.nocache"],
         g(v, "i.decode_1blk_256seq.caching=False", "ops_per_s"), "vLLM caching=False"),
        ("decode.per_seq_ops_per_s", f["decode.per_seq_ops_per_s"],
         g(nv, "i.decode_1blk_256seq", "ops_per_s"), "nano-vllm"),
        ("bulk.blocks_per_s", f["bulk.blocks_per_s"],
         g(v, "i.bulk_128blk.caching=True", "blocks_per_s_alloc_plus_free"), "vLLM caching=True"),
        ("hash.tokens_per_s (sha256)", f["hash.tokens_per_s"],
         g(v, "ii.hash_2048tok.sha256", "tokens_hashed_per_s"), "vLLM sha256"),
        ("hash.tokens_per_s (sha256) vs xxh64", f["hash.tokens_per_s"],
         g(nv, "ii.hash_2048tok.xxh64", "tokens_hashed_per_s"), "nano-vllm xxh64"),
        ("lookup.hits_per_s", f["lookup.hits_per_s"],
         g(v, "ii.lookup_get_cached_block.sha256", "hit_lookups_per_s"), "vLLM"),
        ("lookup.misses_per_s", f["lookup.misses_per_s"],
         g(v, "ii.lookup_get_cached_block.sha256", "miss_lookups_per_s"), "vLLM"),
    ]
    for sc in ("unique", "shared", "nocache"):
        rows.append((f"cycle.{sc}.requests_per_s", f[f"cycle.{sc}.requests_per_s"],
                     g(v, f"iii.kvcachemanager.{sc}", "requests_per_s"), "vLLM KVCacheManager"))
    for sc in ("unique", "shared"):
        rows.append((f"cycle.{sc}.requests_per_s", f[f"cycle.{sc}.requests_per_s"],
                     g(nv, f"iii.cycle.{sc}.bs16", "requests_per_s"), "nano-vllm"))
    res["ratios"] = {f"{key} / {name}": ours / base for key, ours, base, name in rows
                     if ours and base}
    print_table(rows)
    print(f"\nmemory.bytes_per_block (1M blocks, prefix caching on): "
          f"{f['memory.bytes_per_block']:.1f}")
    if "memory.bytes_per_block_all_cached" in f:
        print(f"memory.bytes_per_block_all_cached: {f['memory.bytes_per_block_all_cached']:.1f}")
    write_json(args.json, res)


if __name__ == "__main__":
    main()
