"""bench/sched.py: scheduler overhead per scheduled sequence per step.

    python -m bench.sched [--json FILE] [--quick] [--repeats N] [--min-seconds S]

Workloads (block size 16, prefix caching on, fake runtime sampling constant tokens):

decode{N}   N running sequences (prompt 128, endless outputs), decode steady state:
            schedule() + on_step_done() per step, microseconds per scheduled sequence
            (`us_per_seq_step`, split into `schedule_us` and `step_done_us`); N = 256, 1024
mixed256    a 256-sequence target over a pool holding 30 % of their worst case (no
            watermark) and a host pool of 1/32 of that: requests of 64..512 prompt tokens
            and 32..256 outputs arrive as others finish, so decode preemption (mode by
            cost; recompute when the host is full), swap-in and admission all happen
            (`us_per_seq_step` plus the counts)

Each figure is the median of --repeats runs of at least --min-seconds (bench.common), with
FIELD.min / FIELD.max beside it. Never pass/fail; compare runs on the same machine only.
decode256 and decode1024 run in the same rounds, so ``decode1024_over_decode256`` (the growth
of the cost per sequence with the batch; ``vllm_decode1024_over_decode256`` for vLLM's) is
the median of per-round ratios, with .min / .max.

vLLM's scheduler beside it: when ../shared/anchors/bench_vllm_scheduler.py exists, the vLLM
sources were unpacked (``$VLLM_SRC``, default /tmp/vllm_src: setup_vllm_src.sh) and vLLM
imports in this interpreter (a venv with the packages the anchor's docstring lists, kvpool
installed there with ``pip install --no-deps -e .``), the anchor's workloads (vLLM v1's own
Scheduler, KVCacheManager and BlockPool on the same loads) run in the same rounds as kvpool's,
alternating, and each workload adds ``vllm_us_per_seq_step`` and ``vs_vllm`` (vLLM / kvpool,
the median of the per-round ratios), with .min / .max. Without it kvpool runs alone and says
so. The start-up heap is ``gc.freeze()``d either way (both servers do so), so that neither
side pays collections over the imported modules.

nano-vllm's scheduler beside them: when its sources are under ``--nanovllm-src`` (default
``$NANOVLLM_SRC`` or /tmp/nanovllm_src) and import here (numpy, xxhash, transformers), its own
``Scheduler`` (with its ``BlockManager`` and ``Sequence``, unmodified; bench/sched_nano.py says
what is set: 256-token blocks, the smallest its Config accepts) runs the same token streams in
the same rounds, and each workload adds ``nanovllm_us_per_seq_step`` and ``vs_nanovllm``
(nano-vllm / kvpool, the median of the per-round ratios) with .min / .max, and what it did:
``nanovllm_seqs_per_step`` and ``nanovllm_short_steps`` (decode steps that left a sequence out:
0) or ``nanovllm_preemptions_recompute`` and ``nanovllm_finished`` (mixed). Without the
sources it says so and runs without it.
"""

from __future__ import annotations

import gc
import os
import random
import time
from types import SimpleNamespace

from bench import sched_nano
from bench.common import (Stat, Timing, alternate, bench_parser, load_anchor, machine, put,
                          ratio_stat, stat, summary, timing_from_args, timing_info, write_json)
from kvpool.config import CacheConfig
from kvpool.core import BlockSpaceManager
from kvpool.sched import RequestParams, Scheduler, SchedulerConfig

BS = 16


def _sampled(out) -> dict[int, int]:
    s = dict.fromkeys(out.decodes.seq_ids, 5)
    for p in out.prefills:
        if p.is_last:
            for i in p.seq_ids:
                s[i] = 5
    return s


def bench_decode(num_seqs: int, steps: int) -> dict:
    """Steady-state decode of ``num_seqs`` sequences."""
    mgr = BlockSpaceManager(CacheConfig(num_device_blocks=num_seqs * (8 + steps // BS + 4),
                                        block_size=BS))
    sched = Scheduler(mgr, SchedulerConfig(max_num_seqs=num_seqs,
                                           max_num_batched_tokens=max(8192, num_seqs),
                                           max_model_len=1 << 20))
    rng = random.Random(0)
    for i in range(num_seqs):
        sched.add_request(str(i), [rng.randrange(32000) for _ in range(128)],
                          RequestParams(max_tokens=1 << 20))
    while True:  # prefill everything
        out = sched.schedule()
        sched.on_step_done(out, _sampled(out))
        if len(out.decodes) == num_seqs:
            break
    t_sched = t_done = 0.0
    seqs = 0
    for _ in range(steps):
        t0 = time.perf_counter()
        out = sched.schedule()
        t1 = time.perf_counter()
        sampled = dict.fromkeys(out.decodes.seq_ids, 5)
        t2 = time.perf_counter()
        sched.on_step_done(out, sampled)
        t3 = time.perf_counter()
        t_sched += t1 - t0
        t_done += t3 - t2
        seqs += len(out.decodes)
    total = t_sched + t_done
    return {"seconds": total, "seq_steps": seqs,
            "us_per_seq_step": 1e6 * total / seqs, "schedule_us": 1e6 * t_sched / seqs,
            "step_done_us": 1e6 * t_done / seqs}


def _mixed_scheduler(num_seqs: int) -> Scheduler:
    """bench_mixed's scheduler: a device pool of 30 % of the worst case, a host pool of 1/32
    of that, no watermark."""
    worst = num_seqs * (512 + 256) // BS
    device = int(worst * 0.3)
    mgr = BlockSpaceManager(CacheConfig(num_device_blocks=device, block_size=BS,
                                        num_host_blocks=device // 32, watermark=0.0))
    # cost figures where swap wins on cost; recompute happens when the host pool is full
    return Scheduler(mgr, SchedulerConfig(
        max_num_seqs=num_seqs, max_num_batched_tokens=4096, max_model_len=4096,
        kv_bytes_per_block=1 << 20, copy_bytes_per_s=8e9, prefill_tokens_per_s=3000.0))


def bench_mixed(num_seqs: int, steps: int) -> dict:
    """Arrivals, finishes, decode preemption (swap / recompute by cost) and swap-in."""
    rng = random.Random(1)
    sched = _mixed_scheduler(num_seqs)
    next_id = 0

    def top_up() -> None:
        nonlocal next_id
        while sum(sched.num_requests().values()) < num_seqs + num_seqs // 4:
            sched.add_request(str(next_id), [rng.randrange(32000)
                                             for _ in range(rng.randint(64, 512))],
                              RequestParams(max_tokens=rng.randint(32, 256)))
            next_id += 1

    for _ in range(150):  # warm up into a full pool
        top_up()
        out = sched.schedule()
        sched.on_step_done(out, _sampled(out))
    base = sched.stats()
    elapsed = 0.0
    seqs = 0
    for _ in range(steps):
        top_up()
        t0 = time.perf_counter()
        out = sched.schedule()
        sched.on_step_done(out, _sampled(out))
        elapsed += time.perf_counter() - t0
        seqs += out.num_seqs
    return _mixed_figures(elapsed, seqs, base, sched.stats())


def _mixed_figures(elapsed: float, seqs: int, base, st) -> dict:
    """bench_mixed's figures: the timed steps, and what the scheduler did during them (its
    stats at the end less those at the start)."""
    return {"seconds": elapsed, "seq_steps": seqs, "us_per_seq_step": 1e6 * elapsed / seqs,
            "preemptions_swap": st.preemptions["swap"] - base.preemptions["swap"],
            "preemptions_recompute": (st.preemptions["recompute"]
                                      - base.preemptions["recompute"]),
            "swap_out_blocks": st.swap_out_blocks - base.swap_out_blocks,
            "swap_in_blocks": st.swap_in_blocks - base.swap_in_blocks,
            "finished": st.finished - base.finished}


def vllm_anchor() -> SimpleNamespace | None:
    """The anchor module and its installed vLLM classes, or None (with the reason printed)."""
    src = os.path.abspath(os.environ.get("VLLM_SRC", "/tmp/vllm_src"))
    if not os.path.isfile(os.path.join(src, "vllm", "v1", "core", "sched", "scheduler.py")):
        print(f"(vLLM sources not found under {src}: vLLM's scheduler skipped)")
        return None
    mod = load_anchor("bench_vllm_scheduler.py")
    if mod is None:
        return None
    try:
        m = mod.install(src)
    except Exception as e:  # noqa: BLE001  (the baseline is optional; its deps may be absent)
        print(f"(vLLM does not import here: {e!r}; vLLM's scheduler skipped)")
        return None
    return SimpleNamespace(mod=mod, m=m, info={"version": m.version, "src": src,
                                               **mod.config_info(m)})


def _nano_load(name: str, n: int, steps: int, nano: SimpleNamespace):
    """nano-vllm's run of ``name``: kvpool's capacity (bench_decode / bench_mixed) in tokens."""
    if name.startswith("decode"):
        return lambda: sched_nano.bench_decode(nano, n, steps, BS)
    device_tokens = int(n * (512 + 256) // BS * 0.3) * BS
    return lambda: sched_nano.bench_mixed(nano, n, steps, device_tokens)


def _loads(name: str, steps: int, anchor: SimpleNamespace | None,
           nano: SimpleNamespace | None) -> dict:
    """The runs of workload ``name``: kvpool's, vLLM's when ``anchor``, nano-vllm's when
    ``nano``."""
    n = int(name.removeprefix("decode").removeprefix("mixed"))
    ours = bench_decode if name.startswith("decode") else bench_mixed
    loads = {"kvpool": lambda: ours(n, steps)}
    if anchor is not None:
        theirs = anchor.mod.bench_decode if name.startswith("decode") else anchor.mod.bench_mixed
        loads["vllm"] = lambda: theirs(anchor.m, n, steps)
    if nano is not None:
        loads["nanovllm"] = _nano_load(name, n, steps, nano)
    return loads


def run_workloads(names: list[str], steps: int, timing: Timing,
                  anchor: SimpleNamespace | None, nano: SimpleNamespace | None = None
                  ) -> tuple[dict, dict]:
    """Every run of ``names`` in the same alternating rounds (each workload's kvpool,
    vLLM and nano-vllm runs, then the next workload's), summarised per workload, and the
    raw runs by (workload, arm) for ratios across workloads."""
    loads = {(name, arm): fn for name in names
             for arm, fn in _loads(name, steps, anchor, nano).items()}
    runs = alternate(loads, timing)
    out = {}
    for name in names:
        r = summary(runs[name, "kvpool"])
        for base in ("vllm", "nanovllm"):
            if (name, base) in runs:
                put(r, f"{base}_us_per_seq_step", stat(runs[name, base], "us_per_seq_step"))
                put(r, f"vs_{base}", ratio_stat(runs[name, base], "us_per_seq_step",
                                                runs[name, "kvpool"], "us_per_seq_step"))
        for key in ("seqs_per_step", "short_steps", "preemptions_recompute", "finished"):
            if (name, "nanovllm") in runs and key in runs[name, "nanovllm"][0]:
                put(r, f"nanovllm_{key}", stat(runs[name, "nanovllm"], key))
        out[name] = r
    return out, runs


def _growth(res: dict, runs: dict) -> str:
    """``decode1024_over_decode256`` (and vLLM's, when it ran): the median [min, max] of the
    per-round ratios of the cost per sequence, both sizes run in the same rounds."""
    line = "decode1024 / decode256 per sequence:"
    for arm, key in (("kvpool", "decode1024_over_decode256"),
                     ("vllm", "vllm_decode1024_over_decode256")):
        if ("decode256", arm) in runs:
            g = ratio_stat(runs["decode1024", arm], "us_per_seq_step", runs["decode256", arm],
                           "us_per_seq_step")
            put(res, key, g)
            line += f" {arm} {g.median:.2f} [{g.spread('.2f')}]"
    return line


def _line(name: str, r: dict) -> str:
    k = Stat(r["us_per_seq_step"], r["us_per_seq_step.min"], r["us_per_seq_step.max"], ())
    line = f"{name:11s} kvpool {k.median:6.2f} us/seq/step [{k.spread('.2f')}]"
    if "schedule_us" in r:
        line += f" (schedule {r['schedule_us']:.2f}, on_step_done {r['step_done_us']:.2f})"
    else:
        line += (f" preemptions swap {r['preemptions_swap']:.0f} recompute "
                 f"{r['preemptions_recompute']:.0f}, swap out/in blocks "
                 f"{r['swap_out_blocks']:.0f}/{r['swap_in_blocks']:.0f}, finished "
                 f"{r['finished']:.0f}")
    if "vs_vllm" in r:
        line += (f" | vLLM {r['vllm_us_per_seq_step']:.2f} [{r['vllm_us_per_seq_step.min']:.2f}-"
                 f"{r['vllm_us_per_seq_step.max']:.2f}], vLLM/kvpool {r['vs_vllm']:.2f} "
                 f"[{r['vs_vllm.min']:.2f}-{r['vs_vllm.max']:.2f}]")
    if "vs_nanovllm" in r:
        line += (f" | nano-vllm {r['nanovllm_us_per_seq_step']:.2f} "
                 f"[{r['nanovllm_us_per_seq_step.min']:.2f}-"
                 f"{r['nanovllm_us_per_seq_step.max']:.2f}], nano-vllm/kvpool "
                 f"{r['vs_nanovllm']:.2f} [{r['vs_nanovllm.min']:.2f}-{r['vs_nanovllm.max']:.2f}]")
    return line


def main(argv: list[str] | None = None) -> None:
    ap = bench_parser("sched", __doc__)
    ap.add_argument("--no-vllm", action="store_true", help="without vLLM's scheduler")
    ap.add_argument("--nanovllm-src", default=os.environ.get("NANOVLLM_SRC", "/tmp/nanovllm_src"),
                    help="nano-vllm's sources (default $NANOVLLM_SRC or /tmp/nanovllm_src)")
    ap.add_argument("--nanovllm-block-size", type=int, default=sched_nano.BLOCK,
                    help="nano-vllm's block size (default 256, the smallest its Config accepts)")
    ap.add_argument("--no-nanovllm", action="store_true", help="without nano-vllm's scheduler")
    args = ap.parse_args(argv)
    timing = timing_from_args(args)
    steps = 30 if timing.quick else 200
    anchor = None if args.no_vllm else vllm_anchor()
    nano = None if args.no_nanovllm else sched_nano.load(args.nanovllm_src,
                                                           args.nanovllm_block_size)
    gc.collect()
    gc.freeze()  # the start-up heap (and the baselines' modules): see the module docstring
    res: dict = {"machine": machine(), "timing": timing_info(timing),
                 "load_average": list(os.getloadavg()),
                 "vllm": None if anchor is None else anchor.info,
                 "nanovllm": None if nano is None else nano.info}
    arms = ["kvpool"] + ["vLLM"] * (anchor is not None) + ["nano-vllm"] * (nano is not None)
    print(f"{timing.repeats} rounds of >= {timing.min_seconds} s per figure, {steps} steps per "
          f"call, {' / '.join(arms)}" + (" alternating" if len(arms) > 1 else " alone"))
    runs: dict = {}
    for names in (["decode256", "decode1024"], ["mixed256"]):  # both sizes in the same rounds
        got, more = run_workloads(names, steps, timing, anchor, nano)
        runs.update(more)
        for name in names:
            res[name] = got[name]
            print(_line(name, res[name]), flush=True)
    print(f"{_growth(res, runs)}; load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    write_json(args.json, res)


if __name__ == "__main__":
    main()
