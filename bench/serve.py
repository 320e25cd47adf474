"""bench/serve.py: kvpool's engine against transformers ``generate`` (../shared/BENCH.md).

    python -m bench.serve [--json FILE] [--quick] [--hf-batch 16] [--scrape-seqs 1000]
                          [--repeats N] [--min-seconds S]

64 requests, prompts 16..512 tokens and outputs 16..256 tokens (seeded), greedy, the built-in
tiny Llama in float32, one torch thread for both sides:

- kvpool: every request submitted at once to the EngineCore (continuous batching, paged KV,
  chunked prefill); output tokens / wall time.
- transformers: the same requests in static batches of ``--hf-batch`` (left-padded, sorted by
  arrival), each batch generating until its longest requested output; only the requested
  tokens count as output.
- kv.utilization: tokens stored / token slots allocated (paged), averaged over engine steps;
  kv.contiguous_utilization: tokens stored / slots a contiguous prompt+max_tokens reservation
  per running request would hold, over the same steps.
- scrape: /metrics render time (ms, p50/p99) on the event loop while the engine runs
  ``--scrape-seqs`` live sequences.
Engine and transformers runs alternate (bench.common): every figure is the median of
--repeats runs of at least --min-seconds, the ratio the median of per-round ratios, with
KEY.min / KEY.max in the JSON; each scrape run is 200 samples (20 with --quick). Never
pass/fail.
"""

from __future__ import annotations

import asyncio
import random
import statistics
import tempfile
import time

import torch

from bench.common import (alternate, ameasure, bench_parser, machine, print_runs, put, put_runs,
                          ratio_stat, timing_from_args, timing_info, write_json)
from kvpool.runtime.engine import AsyncEngine
from kvpool.runtime.engine_config import EngineConfig
from kvpool.runtime.engine_core import EngineCore
from kvpool.runtime.model import SamplingParams, save_tiny_model


def workload(n: int, seed: int = 0, max_prompt: int = 512, max_out: int = 256):
    rng = random.Random(seed)
    reqs = []
    for _ in range(n):
        p = rng.randint(16, max_prompt)
        reqs.append(([rng.randrange(3, 500) for _ in range(p)], rng.randint(16, max_out)))
    return reqs


def run_engine(reqs, num_blocks: int) -> dict:
    core = EngineCore(EngineConfig(num_device_blocks=num_blocks, num_host_blocks=0,
                                   max_num_seqs=len(reqs), max_num_batched_tokens=2048,
                                   max_model_len=1024))
    reserve = {}
    t0 = time.perf_counter()
    for i, (p, m) in enumerate(reqs):
        core.add_request(f"r{i}", p, SamplingParams(max_tokens=m, temperature=0.0,
                                                    ignore_eos=True))
        reserve[f"r{i}"] = len(p) + m
    out_tokens = 0
    util, contig = [], []
    mgr, sched = core.manager, core.scheduler
    while core.has_work():
        for o in core.step():
            out_tokens += sum(len(c.token_ids) for c in o.outputs)
        st = mgr.stats()
        used_blocks = st.device.num_used - st.device.num_reserved
        if used_blocks:
            util.append(st.used_slots / (used_blocks * mgr.block_size))
            running = [g.request_id for g in sched.running]
            held = sum(reserve[r] for r in running)
            if held:
                contig.append(st.used_slots / held)
    dt = time.perf_counter() - t0
    core.close()
    return {"seconds": dt, "output_tokens": out_tokens, "output_tokens_per_s": out_tokens / dt,
            "kv.utilization": statistics.fmean(util), "kv.contiguous_utilization":
            statistics.fmean(contig), "steps": core.steps}


def load_hf():
    """The same tiny Llama as transformers loads it (loaded once, outside any timing)."""
    import transformers
    with tempfile.TemporaryDirectory() as d:
        save_tiny_model(d)
        hf = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
    hf.generation_config.eos_token_id = None
    return hf


def run_hf(hf, reqs, batch: int) -> dict:
    t0 = time.perf_counter()
    useful = 0
    for i in range(0, len(reqs), batch):
        chunk = reqs[i:i + batch]
        width = max(len(p) for p, _ in chunk)
        new = max(m for _, m in chunk)
        ids = torch.full((len(chunk), width), 2, dtype=torch.long)
        mask = torch.zeros_like(ids)
        for j, (p, _) in enumerate(chunk):  # left padding
            ids[j, width - len(p):] = torch.tensor(p)
            mask[j, width - len(p):] = 1
        with torch.inference_mode():
            hf.generate(ids, attention_mask=mask, do_sample=False, max_new_tokens=new,
                        min_new_tokens=new, pad_token_id=2)
        useful += sum(m for _, m in chunk)
    dt = time.perf_counter() - t0
    return {"seconds": dt, "output_tokens": useful, "output_tokens_per_s": useful / dt}


def run_scrape(num_seqs: int, timing, samples: int = 200) -> list[dict]:
    async def main():
        eng = AsyncEngine(EngineConfig(num_device_blocks=num_seqs * 4 + 64, num_host_blocks=0,
                                       max_num_seqs=num_seqs, max_num_batched_tokens=4096,
                                       max_model_len=512, max_queue=num_seqs + 10))
        await eng.start()
        streams = [eng.generate(None, [5 + i % 400] * 24, SamplingParams(
            max_tokens=200, temperature=0.0, ignore_eos=True)) for i in range(num_seqs)]
        # wait until the sequences are live (admitted and decoding)
        while eng.core.scheduler.stats().num_running_seqs < num_seqs * 0.9:
            await asyncio.sleep(0.05)

        async def sample() -> dict:
            live = eng.core.scheduler.stats().num_running_seqs
            times = []
            t0 = time.perf_counter()
            for _ in range(samples):
                t = time.perf_counter()
                eng.metrics.render()
                times.append((time.perf_counter() - t) * 1e3)
                await asyncio.sleep(0.005)
            times.sort()
            return {"seconds": time.perf_counter() - t0, "live_seqs": live,
                    "p50_ms": times[len(times) // 2],
                    "p99_ms": times[max(0, int(len(times) * 0.99) - 1)], "max_ms": times[-1]}

        try:
            return await ameasure(sample, timing)
        finally:
            for s in streams:
                await s.aclose()
            await eng.shutdown(timeout=5)

    return asyncio.run(main())


def main(argv: list[str] | None = None) -> None:
    ap = bench_parser("serve", __doc__)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--hf-batch", type=int, default=16)
    ap.add_argument("--scrape-seqs", type=int, default=1000)
    args = ap.parse_args(argv)
    timing = timing_from_args(args)
    torch.set_num_threads(1)
    quick = timing.quick
    n = 16 if quick else args.requests
    reqs = workload(n, max_prompt=128 if quick else 512, max_out=64 if quick else 256)
    res = {"machine": machine(), "timing": timing_info(timing), "requests": n,
           "hf_batch": args.hf_batch}
    hf = load_hf()
    runs = alternate({"engine": lambda: run_engine(reqs, num_blocks=n * 48 + 64),
                      "hf": lambda: run_hf(hf, reqs, args.hf_batch)}, timing)
    eng, hfr = runs["engine"], runs["hf"]
    put_runs(res, eng, {"engine.output_tokens_per_s": "output_tokens_per_s",
                        "kv.utilization": "kv.utilization",
                        "kv.contiguous_utilization": "kv.contiguous_utilization",
                        "engine.steps": "steps"})
    put_runs(res, hfr, {"hf.output_tokens_per_s": "output_tokens_per_s"})
    put(res, "ratio", ratio_stat(eng, "output_tokens_per_s", hfr, "output_tokens_per_s"))
    # one pass over the requests (a run may repeat it to reach --min-seconds)
    put_runs(res, [{"s": r["seconds"] / r["calls"]} for r in eng], {"engine.seconds": "s"})
    put_runs(res, [{"s": r["seconds"] / r["calls"]} for r in hfr], {"hf.seconds": "s"})
    sc = run_scrape(100 if quick else args.scrape_seqs, timing, samples=20 if quick else 200)
    put_runs(res, sc, {f"scrape.{k}": k for k in ("live_seqs", "p50_ms", "p99_ms", "max_ms")})
    print_runs(res, timing, "engine and transformers")
    write_json(args.json, res)


if __name__ == "__main__":
    main()
