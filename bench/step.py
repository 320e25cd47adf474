"""bench/step.py: one forward step of kvpool's model against transformers', per thread count
and dtype (the measurements behind ``kvpool serve``'s --num-threads and --dtype defaults).

    python -m bench.step --model DIR [--threads 1,2,0] [--dtypes float32,bfloat16]
                         [--batch 16] [--context 256] [--prefill 256] [--json FILE]

- decode: ``--batch`` sequences with ``--context`` cached tokens each, one new token each
  (kvpool: one PagedBatch over the paged pool; transformers: one forward over a DynamicCache
  cropped back to the context after every call); ms per step.
- prefill: one fresh prompt of ``--prefill`` tokens; ms per step.
Thread count 0 means os.cpu_count(). Both sides alternate (bench.common); medians of
--repeats runs. Never pass/fail. Runs done, their rate and an estimate of the time left go to
stderr when it is a terminal (``--progress`` forces it, ``--quiet`` silences it).
"""

from __future__ import annotations

import argparse
import gc
import os
import time

import torch

from bench.common import (add_timing_args, alternate, machine, print_stats, put, put_runs,
                          ratio_stat, timing_from_args, timing_info, write_json)
from kvpool.progress import Progress, add_progress_args
from kvpool.runtime.model import PagedBatch, allocate_kv_cache, load_model, resolve_dtype

BLOCK = 16


def kv_decode(model, batch: int, context: int):
    blocks = -(-(context + 1) // BLOCK)
    kv = allocate_kv_cache(batch * blocks, model.config, BLOCK, model.dtype)
    tables = [list(range(i * blocks, (i + 1) * blocks)) for i in range(batch)]
    pb = PagedBatch.from_lists([[5 + i] for i in range(batch)], [context] * batch, tables)

    def run() -> dict:
        t = time.perf_counter()
        model(pb, kv)
        return {"seconds": time.perf_counter() - t, "steps": 1}
    return run


def kv_prefill(model, length: int):
    blocks = -(-length // BLOCK)
    kv = allocate_kv_cache(blocks, model.config, BLOCK, model.dtype)
    pb = PagedBatch.from_lists([[5 + i % 400 for i in range(length)]], [0], [list(range(blocks))])

    def run() -> dict:
        t = time.perf_counter()
        model(pb, kv)
        return {"seconds": time.perf_counter() - t, "steps": 1}
    return run


def hf_decode(hf, batch: int, context: int):
    from transformers import DynamicCache
    ids = torch.full((batch, context), 7, dtype=torch.long)
    with torch.inference_mode():
        cache = DynamicCache(config=hf.config)
        hf(ids, past_key_values=cache, use_cache=True)
    step = torch.arange(batch)[:, None] + 5
    pos = torch.full((batch, 1), context, dtype=torch.long)

    def run() -> dict:
        with torch.inference_mode():
            t = time.perf_counter()
            hf(step, past_key_values=cache, position_ids=pos, use_cache=True,
               logits_to_keep=1)
            dt = time.perf_counter() - t
            cache.crop(-1)  # back to the context (a positive count is refused)
        return {"seconds": dt, "steps": 1}
    return run


def hf_prefill(hf, length: int):
    ids = torch.tensor([[5 + i % 400 for i in range(length)]])

    def run() -> dict:
        with torch.inference_mode():
            t = time.perf_counter()
            hf(ids, use_cache=True, logits_to_keep=1)
        return {"seconds": time.perf_counter() - t, "steps": 1}
    return run


def _args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", default="1,2,0")
    ap.add_argument("--dtypes", default="float32,bfloat16")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--prefill", type=int, default=256)
    ap.add_argument("--no-hf", action="store_true", help="kvpool only")
    ap.add_argument("--json")
    add_timing_args(ap)
    add_progress_args(ap)  # --progress / --quiet: runs done, rate, eta on stderr
    return ap.parse_args()


def _point(res: dict, key: str, ours, theirs, timing, progress: Progress) -> None:
    """One (dtype, threads, kind): kvpool's runs against transformers' (when loaded)."""
    ours()  # warm-up (allocator, oneDNN primitives)
    loads = {"kv": ours}
    if theirs:
        theirs()
        loads["hf"] = theirs
    runs = alternate(loads, timing, after_run=progress.advance)
    ms = [{"ms": 1e3 * r["seconds"] / r["steps"]} for r in runs["kv"]]
    put_runs(res, ms, {f"{key}.kv_ms": "ms"})
    if theirs:
        hms = [{"ms": 1e3 * r["seconds"] / r["steps"]} for r in runs["hf"]]
        put_runs(res, hms, {f"{key}.hf_ms": "ms"})
        put(res, f"{key}.hf_over_kv", ratio_stat(hms, "ms", ms, "ms"))
    print(f"{key}: kv {res[f'{key}.kv_ms']:.1f} ms"
          + (f", hf {res[f'{key}.hf_ms']:.1f} ms" if theirs else ""), flush=True)


def main() -> None:
    args = _args()
    timing = timing_from_args(args)
    import transformers
    transformers.utils.logging.disable_progress_bar()
    # the start-up heap (torch's and transformers' modules) frozen, as bench/sched.py and
    # kvpool serve do (NOTE(gc-freeze)): alternate()'s gc.collect() before every run walked
    # all of it, ~0.2 s a run; both arms run after it alike
    gc.collect()
    gc.freeze()
    res = {"machine": machine(), "timing": timing_info(timing),
           "cpu_capability": torch.backends.cpu.get_cpu_capability(), "batch": args.batch,
           "context": args.context, "prefill": args.prefill}
    threads = [int(x) or os.cpu_count() for x in args.threads.split(",")]
    dtypes = args.dtypes.split(",")
    runs = len(dtypes) * len(threads) * 2 * timing.repeats * (1 if args.no_hf else 2)
    progress = Progress(runs, "runs", prefix="bench.step: ", enabled=args.progress)
    for dname in dtypes:
        dtype = resolve_dtype(dname)
        model = load_model(args.model, dtype, "cpu")
        hf = None if args.no_hf else transformers.AutoModelForCausalLM.from_pretrained(
            args.model, dtype=dtype).eval()
        for n in threads:
            torch.set_num_threads(n)
            _point(res, f"{dname}.t{n}.decode", kv_decode(model, args.batch, args.context),
                   hf and hf_decode(hf, args.batch, args.context), timing, progress)
            _point(res, f"{dname}.t{n}.prefill", kv_prefill(model, args.prefill),
                   hf and hf_prefill(hf, args.prefill), timing, progress)
        del model, hf
    progress.close()
    print(f"\nload average {os.getloadavg()[0]:.2f} (2 cores shared: figures are noisy)")
    print_stats(res)
    write_json(args.json, res)


if __name__ == "__main__":
    main()
