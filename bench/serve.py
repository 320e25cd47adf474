"""bench/serve.py: kvpool's engine against transformers ``generate`` (docs/benchmarks.md).

    python -m bench.serve [--json FILE] [--quick] [--hf-batch 16] [--scrape-seqs 1000]
                          [--repeats N] [--min-seconds S]
    python -m bench.serve --model DIR [--workload chat] [--dtype auto] [--threads 1]
                          [--requests 24] [--max-prompt 384] [--max-out 96] [--ttft 8,32]

Default: 64 requests, prompts 16..512 tokens and outputs 16..256 tokens (seeded, ``uniform``),
greedy, the built-in tiny Llama in float32, one torch thread for both sides. ``--model DIR``
(e.g. one written by ``python -m bench.qwen_shape DIR``) serves that checkpoint on both sides
in the dtype ``--dtype auto`` picks for this CPU, with the ``chat`` workload (shared system
prompts, multi-turn continuations; bench/serve_workload.py) unless --workload says otherwise.
The engine is built once (outside timing); every run salts its requests' prefix-cache hashes,
so a run never hits blocks an earlier run left:

- kvpool: every request submitted at once to the EngineCore (continuous batching, paged KV,
  chunked prefill); output tokens / wall time.
- transformers: the same requests in static batches of ``--hf-batch`` (left-padded, sorted by
  arrival), each batch generating until its longest requested output; only the requested
  tokens count as output.
- kv.utilization: tokens stored / token slots allocated (paged), averaged over engine steps;
  kv.contiguous_utilization: tokens stored / slots a contiguous prompt+max_tokens reservation
  per running request would hold, over the same steps.
- ttft (--ttft C1,C2): closed loop on the engine, C requests in flight (a finished one is
  replaced by the next), TTFT p50/p99 in seconds (arrival to first token) and output tok/s.
- scrape: /metrics render time (ms, p50/p99) on the event loop while the engine runs
  ``--scrape-seqs`` live sequences.
Engine and transformers runs alternate (bench.common): every figure is the median of
--repeats runs of at least --min-seconds, the ratio the median of per-round ratios, with
KEY.min / KEY.max in the JSON; each scrape run is 200 samples (20 with --quick). Never
pass/fail.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import statistics
import sys
import tempfile
import time

import torch

from bench.common import (Timing, alternate, ameasure, bench_parser, machine, print_runs, put,
                          put_runs, ratio_stat, timing_from_args, timing_info, write_json)
from kvpool.runtime.engine.async_engine import AsyncEngine
from kvpool.runtime.engine.config import EngineConfig
from kvpool.runtime.engine.core import EngineCore
from bench import serve_workload
from kvpool.runtime.model import SamplingParams, resolve_dtype, save_tiny_model
from kvpool.runtime.model.dtype_policy import checkpoint_dtype, choose_dtype
from kvpool.server.process_tuning import SWITCH_INTERVAL

GREEDY = dict(temperature=0.0, ignore_eos=True)


class Salter:
    """A fresh prefix-cache salt per run: runs over one long-lived engine stay independent."""

    def __init__(self) -> None:
        self.n = 0

    def __call__(self) -> str:
        self.n += 1
        return f"run{self.n}"


def build_core(reqs, num_blocks: int, model: str | None, dtype: str,
               budget: int) -> EngineCore:
    return EngineCore(EngineConfig(model=model, dtype=dtype, num_device_blocks=num_blocks,
                                   num_host_blocks=0, max_num_seqs=max(len(reqs), 1),
                                   max_num_batched_tokens=budget, max_model_len=1024))


def run_engine(core: EngineCore, reqs, salt: str) -> dict:
    reserve = {}
    steps0 = core.steps
    t0 = time.perf_counter()
    for i, (p, m) in enumerate(reqs):
        core.add_request(f"{salt}-{i}", p, SamplingParams(max_tokens=m, **GREEDY),
                         cache_salt=salt)
        reserve[f"{salt}-{i}"] = len(p) + m
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
            running = [g.request_id for g in sched.state.running]
            held = sum(reserve[r] for r in running)
            if held:
                contig.append(st.used_slots / held)
    dt = time.perf_counter() - t0
    return {"seconds": dt, "output_tokens": out_tokens, "output_tokens_per_s": out_tokens / dt,
            "kv.utilization": statistics.fmean(util), "kv.contiguous_utilization":
            statistics.fmean(contig), "steps": core.steps - steps0}


def run_ttft(core: EngineCore, reqs, concurrency: int, salt: str) -> dict:
    """Closed loop: ``concurrency`` requests in flight; TTFT from each request's arrival."""
    queue = list(enumerate(reqs))[::-1]
    live: set[str] = set()
    ttfts: list[float] = []
    out_tokens = 0
    t0 = time.perf_counter()
    while queue or live:
        while queue and len(live) < concurrency:
            i, (p, m) = queue.pop()
            rid = f"{salt}-{i}"
            core.add_request(rid, p, SamplingParams(max_tokens=m, **GREEDY), cache_salt=salt)
            live.add(rid)
        for o in core.step():
            out_tokens += sum(len(c.token_ids) for c in o.outputs)
            if o.finished:
                live.discard(o.request_id)
                ttfts.append(o.metrics["ttft"])
    dt = time.perf_counter() - t0
    ttfts.sort()
    return {"seconds": dt, "ttft_p50_s": ttfts[len(ttfts) // 2],
            "ttft_p99_s": ttfts[max(0, -(-len(ttfts) * 99 // 100) - 1)],
            "output_tokens_per_s": out_tokens / dt}


def load_hf(model: str | None, dtype: torch.dtype):
    """The same model as transformers loads it (loaded once, outside any timing)."""
    import transformers
    transformers.utils.logging.disable_progress_bar()
    with tempfile.TemporaryDirectory() as d:
        path = model or save_tiny_model(d)
        hf = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=dtype).eval()
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


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = bench_parser("serve", __doc__)
    ap.add_argument("--requests", type=int, default=64)
    ap.add_argument("--hf-batch", type=int, default=16)
    ap.add_argument("--scrape-seqs", type=int, default=1000, help="0: skip the scrape figures")
    ap.add_argument("--model", help="HF model directory (default: the built-in tiny model)")
    ap.add_argument("--workload", choices=("uniform", "chat"),
                    help="default: uniform for the tiny model, chat with --model")
    ap.add_argument("--dtype", default="auto", help="both sides (auto: as kvpool serve picks)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads, both sides")
    ap.add_argument("--max-prompt", type=int, default=512)
    ap.add_argument("--max-out", type=int, default=256)
    ap.add_argument("--budget", type=int, default=2048, help="--max-num-batched-tokens")
    ap.add_argument("--ttft", default="", help="concurrency levels for the TTFT loop, e.g. 8,32")
    return ap.parse_args(argv)


def _header(args: argparse.Namespace, timing: Timing, kind: str, reqs: list, dtype: str,
            why: str) -> dict:
    """The result's description of the run (printed as one line)."""
    n = len(reqs)
    res = {"machine": machine(), "timing": timing_info(timing), "requests": n,
           "hf_batch": args.hf_batch, "model": args.model or "tiny", "workload": kind,
           "dtype": dtype, "dtype_reason": why, "threads": args.threads,
           "budget": args.budget, "prefix_share": serve_workload.prefix_share(reqs),
           "prompt_tokens": sum(len(p) for p, _ in reqs),
           "output_tokens": sum(m for _, m in reqs)}
    print(f"{n} {kind} requests, {res['prompt_tokens']} prompt / {res['output_tokens']} output "
          f"tokens, prefix share {res['prefix_share']:.2f}; dtype {dtype} ({why}); "
          f"{args.threads} thread(s); load average {os.getloadavg()[0]:.2f}", flush=True)
    return res


def _engine_vs_hf(res: dict, core: EngineCore, hf, reqs: list, hf_batch: int, timing: Timing,
                  salt: Salter) -> None:
    """The engine and transformers alternating on the same requests."""
    runs = alternate({"engine": lambda: run_engine(core, reqs, salt()),
                      "hf": lambda: run_hf(hf, reqs, hf_batch)}, timing)
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


def main(argv: list[str] | None = None) -> None:
    args = _parse_args(argv)
    timing = timing_from_args(args)
    torch.set_num_threads(args.threads)
    quick = timing.quick
    n = 16 if quick else args.requests
    kind = args.workload or ("chat" if args.model else "uniform")
    reqs = getattr(serve_workload, kind)(n, max_prompt=128 if quick else args.max_prompt,
                                         max_out=64 if quick else args.max_out)
    dtype, why, _ = choose_dtype(args.dtype, "cpu", checkpoint_dtype(args.model))
    res = _header(args, timing, kind, reqs, dtype, why)
    # the start-up heap frozen for the engine and transformers runs (NOTE(gc-freeze), as
    # bench/sched.py): bench.common's gc.collect() before each run walked it, ~0.2 s a run
    gc.collect()
    gc.freeze()
    hf = load_hf(args.model, resolve_dtype(dtype))
    blocks = sum(-(-(len(p) + m) // 16) for p, m in reqs) + 64
    core = build_core(reqs, blocks, args.model, dtype, args.budget)
    salt = Salter()
    _engine_vs_hf(res, core, hf, reqs, args.hf_batch, timing, salt)
    for c in (int(x) for x in args.ttft.split(",") if x):
        tt = [run_ttft(core, reqs, c, salt()) for _ in range(timing.repeats)]
        put_runs(res, tt, {f"ttft.c{c}.{k}": k for k in ("ttft_p50_s", "ttft_p99_s",
                                                         "output_tokens_per_s")})
    core.close()
    gc.unfreeze()  # the scrape runs see the heap they always had
    if args.scrape_seqs:
        sys.setswitchinterval(SWITCH_INTERVAL)  # as kvpool serve's entry point sets it
        sc = run_scrape(100 if quick else args.scrape_seqs, timing,
                        samples=20 if quick else 200)
        put_runs(res, sc, {f"scrape.{k}": k for k in ("live_seqs", "p50_ms", "p99_ms",
                                                      "max_ms")})
    res["load_average"] = os.getloadavg()[0]
    print_runs(res, timing, "engine and transformers")
    write_json(args.json, res)


if __name__ == "__main__":
    main()
