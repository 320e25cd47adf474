"""bench/pool.py: the block pool under the anchors' workloads (docs/benchmarks.md).

    python -m bench.pool [--json FILE] [--quick] [--no-anchors] [--repeats N] [--min-seconds S]

Imports ../shared/anchors/bench_vllm_blockpool.py and bench_nanovllm.py into this process (when
their external sources exist, see ../shared/anchors/setup_vllm_src.sh) and runs each of
kvpool's workloads in turn with the anchors' same workload (k1 v1 n1 k2 v2 n2 ...), every
figure the median of --repeats runs of at least --min-seconds each (bench.common). Prints
median [min-max] side by side, ratios as the median of per-round ratios. Never pass/fail.
"""

from __future__ import annotations

import dataclasses
import os
import random
import time
import tracemalloc

from bench.common import (Timing, alternate, bench_parser, load_anchor, machine, print_table, put,
                          ratio_stat, repeat, stat, summary, timing_from_args, timing_info,
                          write_json)
from kvpool.config import CacheConfig
from kvpool.core import BlockHasher, BlockPool, BlockSpaceManager, Device

BS = 16


def _pool(caching: bool, n: int):
    return BlockPool(Device.DEVICE, n, BS, caching=caching)


def bench_decode(caching: bool, batched: bool, num_seqs=256, steps=400, seed=0) -> dict:
    """256 sequences each get one block per step; a sequence reaching its target length
    (uniform 8..64 blocks) is freed (tail first) and replaced."""
    pool = _pool(caching, num_seqs * 64)
    rng = random.Random(seed)
    targets = [rng.randint(8, 64) for _ in range(num_seqs)]
    tables: list[list[int]] = [[] for _ in range(num_seqs)]
    allocs = frees = 0
    t0 = time.perf_counter()
    if batched:
        allocs, frees = _decode_batched(pool, tables, targets, rng, steps)
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


def _decode_batched(pool: BlockPool, tables: list[list[int]], targets: list[int],
                    rng: random.Random, steps: int) -> tuple[int, int]:
    """bench_decode's batched arm: one extend_tables call gives every sequence its block; a
    calendar (step -> sequences reaching their target then) keeps the harness's own
    bookkeeping O(finished). The blocks allocated and freed."""
    num_seqs = len(tables)
    allocs = frees = 0
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
    return allocs, frees


def bench_bulk(caching: bool, per=128, rounds=400) -> dict:
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
    m = BlockSpaceManager(CacheConfig(num_device_blocks=128 * 4, block_size=BS))
    cached, unseen = _prompts(2, 2)
    m.allocate([1], cached)
    m.mark_computed(1)
    hit_h, miss_h = m.hasher.hash_blocks(cached), m.hasher.hash_blocks(unseen)
    lookup = m.device_pool.index.lookup
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
        hashes = m.hasher.hash_blocks(p) if caching else None
        if caching:
            m.prompts.prefix_hits(hashes)
        assert m.admission([(len(p), hashes or ())]).status.value == "ok"
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
        with pool.writing():
            for b in ids:
                pool.index.register_block(b, b.to_bytes(32, "little"), 0)
        out["bytes_per_block_all_cached"] = (tracemalloc.get_traced_memory()[0] - base) / num_blocks
    tracemalloc.stop()
    del m
    return out


class Anchors:
    """The vLLM 0.33 and nano-vllm workloads, imported from ../shared/anchors/ into this
    process so that they alternate with kvpool's; either side is None when its anchor script
    or its external sources (setup_vllm_src.sh) are missing."""

    def __init__(self, enabled: bool) -> None:
        self.vllm = self.nano = None
        self.vllm_info: dict = {}
        if not enabled:
            return
        src = os.path.abspath(os.environ.get("VLLM_SRC", "/tmp/vllm_src"))
        if not os.path.isfile(os.path.join(src, "vllm", "v1", "core", "block_pool.py")):
            print(f"(vLLM sources not found under {src}: run ../shared/anchors/setup_vllm_src.sh;"
                  " vLLM baseline skipped)")
        elif (mod := load_anchor("bench_vllm_blockpool.py")) is not None:
            self.vllm = (mod, mod.install_vllm(src))
            self.vllm_info = {"vllm_version": mod.vllm_version(src), "src": src}
        nsrc = os.path.abspath(os.environ.get("NANOVLLM_SRC", "/tmp/nanovllm_src"))
        if not os.path.isfile(os.path.join(nsrc, "nanovllm", "engine", "block_manager.py")):
            print(f"(nano-vllm sources not found under {nsrc}; nano-vllm baseline skipped)")
        elif (mod := load_anchor("bench_nanovllm.py")) is not None:
            self.nano = (mod, *mod.install(nsrc))

    def v(self, name: str, *args, **kw):
        """A vLLM workload as a zero-argument callable (None without the anchor)."""
        if self.vllm is None:
            return None
        mod, mods = self.vllm
        fn = getattr(mod, name)
        return lambda: fn(mods, *args, **kw)

    def n(self, name: str, *args, **kw):
        if self.nano is None:
            return None
        mod, bm, seq = self.nano
        fn = getattr(mod, name)
        return lambda: fn(bm, seq, *args, **kw)


def _group(timing: Timing, **workloads) -> dict[str, list[dict]]:
    """Alternate the workloads that exist (baselines may be None)."""
    return alternate({k: fn for k, fn in workloads.items() if fn is not None}, timing)


@dataclasses.dataclass
class Figures:
    """What main collects: kvpool's figures (``res``, the JSON), the anchors' runs under their
    own keys (``vllm``, ``nano``) and the printed table's rows (key, ours, base, ratio, name)."""

    res: dict
    vllm: dict = dataclasses.field(default_factory=dict)
    nano: dict = dataclasses.field(default_factory=dict)
    rows: list = dataclasses.field(default_factory=list)

    def row(self, key, ours_runs, ours_field, base_runs, base_field, name) -> None:
        ours = stat(ours_runs, ours_field)
        if base_runs is None:
            self.rows.append((key, ours, None, None, name))
            return
        self.rows.append((key, ours, stat(base_runs, base_field),
                          ratio_stat(ours_runs, ours_field, base_runs, base_field), name))


def _decode_and_bulk(fig: Figures, timing: Timing, an: Anchors, steps: int,
                     rounds: int) -> None:
    """bench_decode (per sequence and batched) and bench_bulk, prefix caching on then off."""
    f = fig.res
    for caching in (True, False):
        sfx = "" if caching else ".nocache"
        g = _group(timing, per_seq=lambda c=caching: bench_decode(c, False, steps=steps),
                   batched=lambda c=caching: bench_decode(c, True, steps=steps),
                   vllm=an.v("bench_decode", caching, steps=steps),
                   nano=an.n("bench_decode", steps=steps) if caching else None)
        put(f, f"decode.per_seq_ops_per_s{sfx}", stat(g["per_seq"], "ops_per_s"))
        put(f, f"decode.batched_ops_per_s{sfx}", stat(g["batched"], "ops_per_s"))
        vname = f"vLLM caching={caching}"
        for kind in ("per_seq", "batched"):
            fig.row(f"decode.{kind}_ops_per_s{sfx}", g[kind], "ops_per_s", g.get("vllm"),
                    "ops_per_s", vname)
        if "vllm" in g:
            fig.vllm[f"i.decode_1blk_256seq.caching={caching}"] = g["vllm"]
        if "nano" in g:
            fig.nano["i.decode_1blk_256seq"] = g["nano"]
            fig.row("decode.per_seq_ops_per_s", g["per_seq"], "ops_per_s", g["nano"],
                    "ops_per_s", "nano-vllm")
        g = _group(timing, kv=lambda c=caching: bench_bulk(c, rounds=rounds),
                   vllm=an.v("bench_bulk", caching, rounds=rounds),
                   nano=an.n("bench_bulk", rounds=rounds) if caching else None)
        put(f, f"bulk.blocks_per_s{sfx}", stat(g["kv"], "blocks_per_s"))
        if "vllm" in g:
            fig.vllm[f"i.bulk_128blk.caching={caching}"] = g["vllm"]
        if "nano" in g:
            fig.nano["i.bulk_128blk(allocate)"] = g["nano"]
        if caching:
            fig.row("bulk.blocks_per_s", g["kv"], "blocks_per_s", g.get("vllm"),
                    "blocks_per_s_alloc_plus_free", vname)


def _hash_and_lookup(fig: Figures, timing: Timing, an: Anchors, k: float) -> None:
    """bench_hash (sha256) and bench_lookup (hits, misses)."""
    f = fig.res
    f["hash.algo"] = "sha256"
    reps = int(200 * k)
    g = _group(timing, kv=lambda: bench_hash(reps=reps),
               vllm=an.v("bench_hash", "sha256", reps=reps), nano=an.n("bench_hash", reps=reps))
    put(f, "hash.tokens_per_s", stat(g["kv"], "tokens_per_s"))
    fig.row("hash.tokens_per_s (sha256)", g["kv"], "tokens_per_s", g.get("vllm"),
            "tokens_hashed_per_s", "vLLM sha256")
    if "vllm" in g:
        fig.vllm["ii.hash_2048tok.sha256"] = g["vllm"]
    if "nano" in g:
        fig.nano["ii.hash_2048tok.xxh64"] = g["nano"]
        fig.row("hash.tokens_per_s (sha256) vs xxh64", g["kv"], "tokens_per_s", g["nano"],
                "tokens_hashed_per_s", "nano-vllm xxh64")

    reps = int(300 * k)
    g = _group(timing, kv=lambda: bench_lookup(reps=reps), vllm=an.v("bench_lookup", reps=reps),
               nano=an.n("bench_lookup", reps=reps))
    put(f, "lookup.hits_per_s", stat(g["kv"], "hits_per_s"))
    put(f, "lookup.misses_per_s", stat(g["kv"], "misses_per_s"))
    fig.row("lookup.hits_per_s", g["kv"], "hits_per_s", g.get("vllm"), "hit_lookups_per_s",
            "vLLM")
    fig.row("lookup.misses_per_s", g["kv"], "misses_per_s", g.get("vllm"),
            "miss_lookups_per_s", "vLLM")
    if "vllm" in g:
        fig.vllm["ii.lookup_get_cached_block.sha256"] = g["vllm"]
    if "nano" in g:
        fig.nano["ii.lookup"] = g["nano"]


def _cycles_and_memory(fig: Figures, timing: Timing, an: Anchors, k: float) -> None:
    """bench_cycle per scenario (unique, shared, nocache) and bench_memory."""
    f = fig.res
    n_req = int(64 * k)
    for sc in ("unique", "shared", "nocache"):
        g = _group(timing, kv=lambda s=sc: bench_cycle(s, n_req=n_req),
                   vllm=an.v("bench_manager", sc, n_req=n_req),
                   nano=an.n("bench_cycle", sc, n_req=n_req) if sc != "nocache" else None)
        put(f, f"cycle.{sc}.requests_per_s", stat(g["kv"], "requests_per_s"))
        fig.row(f"cycle.{sc}.requests_per_s", g["kv"], "requests_per_s", g.get("vllm"),
                "requests_per_s", "vLLM KVCacheManager")
        if "vllm" in g:
            fig.vllm[f"iii.kvcachemanager.{sc}"] = g["vllm"]
        if "nano" in g:
            fig.nano[f"iii.cycle.{sc}.bs16"] = g["nano"]
            fig.row(f"cycle.{sc}.requests_per_s", g["kv"], "requests_per_s", g["nano"],
                    "requests_per_s", "nano-vllm")

    mem = repeat(lambda: bench_memory(fill=not timing.quick), timing.repeats)
    put(f, "memory.bytes_per_block", stat(mem, "bytes_per_block"))
    if "bytes_per_block_all_cached" in mem[0]:
        put(f, "memory.bytes_per_block_all_cached", stat(mem, "bytes_per_block_all_cached"))


def _report(fig: Figures, timing: Timing, an: Anchors, json_path: str | None) -> None:
    """The baselines' and ratios' JSON sections, the printed table, the JSON file."""
    res = fig.res
    res["baselines"] = {
        "vllm": {**an.vllm_info, "results": {key: summary(r) for key, r in fig.vllm.items()}}
        if an.vllm else None,
        "nanovllm": {"results": {key: summary(r) for key, r in fig.nano.items()}}
        if an.nano else None}
    ratios: dict = {}
    for key, _ours, _base, ratio, name in fig.rows:
        if ratio is not None:
            put(ratios, f"{key} / {name}", ratio)
    res["ratios"] = ratios
    print(f"\n{timing.repeats} runs of >= {timing.min_seconds} s per figure; kvpool and "
          f"baselines alternate; ratio = median of per-round ratios")
    print_table(fig.rows)
    for key in ("memory.bytes_per_block", "memory.bytes_per_block_all_cached"):
        if key in res:
            print(f"{key} (1M blocks, prefix caching on): {res[key]:.1f} "
                  f"[{res[key + '.min']:.1f}-{res[key + '.max']:.1f}]")
    write_json(json_path, res)


def main(argv: list[str] | None = None) -> None:
    ap = bench_parser("pool", __doc__)
    ap.add_argument("--no-anchors", action="store_true")
    args = ap.parse_args(argv)
    timing = timing_from_args(args)
    k = 0.25 if timing.quick else 1.0
    an = Anchors(not args.no_anchors)
    fig = Figures({"machine": machine(), "timing": timing_info(timing)})
    _decode_and_bulk(fig, timing, an, steps=int(400 * k), rounds=int(400 * k))
    _hash_and_lookup(fig, timing, an, k)
    _cycles_and_memory(fig, timing, an, k)
    _report(fig, timing, an, args.json)


if __name__ == "__main__":
    main()
