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
"""

from __future__ import annotations

import random
import time

from bench.common import (bench_parser, machine, measure, summary, timing_from_args, timing_info,
                          write_json)
from kvpool.config import CacheConfig
from kvpool.core import BlockSpaceManager
from kvpool.sched import RequestParams, Scheduler, SchedulerConfig

BS = 16


def _sampled(out) -> dict[int, int]:
    s = {d.seq_id: 5 for d in out.decodes}
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
        sampled = {d.seq_id: 5 for d in out.decodes}
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


def bench_mixed(num_seqs: int, steps: int) -> dict:
    """Arrivals, finishes, decode preemption (swap / recompute by cost) and swap-in."""
    rng = random.Random(1)
    worst = num_seqs * (512 + 256) // BS
    device = int(worst * 0.3)
    mgr = BlockSpaceManager(CacheConfig(num_device_blocks=device, block_size=BS,
                                        num_host_blocks=device // 32, watermark=0.0))
    # cost figures where swap wins on cost; recompute happens when the host pool is full
    sched = Scheduler(mgr, SchedulerConfig(
        max_num_seqs=num_seqs, max_num_batched_tokens=4096, max_model_len=4096,
        kv_bytes_per_block=1 << 20, copy_bytes_per_s=8e9, prefill_tokens_per_s=3000.0))
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
    st = sched.stats()
    return {"seconds": elapsed, "seq_steps": seqs, "us_per_seq_step": 1e6 * elapsed / seqs,
            "preemptions_swap": st.preemptions["swap"] - base.preemptions["swap"],
            "preemptions_recompute": (st.preemptions["recompute"]
                                      - base.preemptions["recompute"]),
            "swap_out_blocks": st.swap_out_blocks - base.swap_out_blocks,
            "swap_in_blocks": st.swap_in_blocks - base.swap_in_blocks,
            "finished": st.finished - base.finished}


def main(argv: list[str] | None = None) -> None:
    ap = bench_parser("sched", __doc__)
    args = ap.parse_args(argv)
    timing = timing_from_args(args)
    steps = 30 if timing.quick else 200
    res: dict = {"machine": machine(), "timing": timing_info(timing)}
    for n in (256, 1024):
        r = summary(measure(lambda n=n: bench_decode(n, steps), timing))
        res[f"decode{n}"] = r
        print(f"decode {n:5d} seqs: {r['us_per_seq_step']:6.2f} us/seq/step "
              f"[{r['us_per_seq_step.min']:.2f}-{r['us_per_seq_step.max']:.2f}]  (schedule "
              f"{r['schedule_us']:.2f}, on_step_done {r['step_done_us']:.2f})")
    r = summary(measure(lambda: bench_mixed(256, steps), timing))
    res["mixed256"] = r
    print(f"mixed 256 seqs: {r['us_per_seq_step']:6.2f} us/seq/step "
          f"[{r['us_per_seq_step.min']:.2f}-{r['us_per_seq_step.max']:.2f}]  preemptions swap "
          f"{r['preemptions_swap']:.0f} recompute {r['preemptions_recompute']:.0f}, swap out/in "
          f"blocks {r['swap_out_blocks']:.0f}/{r['swap_in_blocks']:.0f}, finished "
          f"{r['finished']:.0f}")
    write_json(args.json, res)


if __name__ == "__main__":
    main()
