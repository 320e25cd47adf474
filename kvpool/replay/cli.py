"""``kvpool replay TRACE``: replay a request trace (timed, or ``--instant``).

Formats (``--trace-format``, detected by default; kvpool/replay/formats.py): Mooncake and
Alibaba Bailian JSONL (hash ids of 512 and 16 tokens), Azure LLM inference and BurstGPT CSV
(no prefix information: every prompt unique).

    kvpool replay TRACE --instant --policy lru --capacity-blocks 16000 --json out.json
    kvpool replay TRACE --limit 2000 --num-blocks 32768 --json timed.json --plot timed.png
    kvpool replay TRACE --limit 2000 --arrival-scale 2 --prefill-tokens-per-s 60000

``--instant``: cache-policy replay with the semantics of docs/benchmarks.md "Trace replay"
(see ``replay_instant``); JSON key ``hit_rate``. Otherwise a timed discrete-event replay
through the real Scheduler (see ``replay_timed``): TTFT / queueing (p50, p99), throughput,
prefix hit rate, preemptions by mode, swaps, peak usage. The step-time cost model defaults to
an 8B Llama on one H200-class GPU (``replay_timed.StepCost``); the Mooncake trace was served by
a cluster, so at its own rate one such GPU queues: ``--arrival-scale`` stretches the arrivals
and the cost flags describe another engine.

The JSON report is deterministic (same trace, options and seed give identical bytes); wall
time goes to stdout, progress with an estimate of the time left to stderr (kvpool/progress.py:
on when stderr is a terminal, ``--progress`` forces it, ``--quiet`` silences it).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from kvpool.errors import ConfigError
from kvpool.outfile import write_text
from kvpool.progress import Progress, add_progress_args

from kvpool.replay.report import import_pyplot, plot
from kvpool.replay.formats import FORMATS
from kvpool.replay.trace import read_trace, trace_summary


class BadOption(Exception):
    """An option value the replay cannot run with (exit status 2)."""


HELP = "replay a request trace through the scheduler (or --instant: cache policy only)"


def _add_trace_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("trace", help="trace file: Mooncake or Bailian JSONL, Azure LLM inference "
                                 "or BurstGPT CSV (see --trace-format)")
    p.add_argument("--trace-format", choices=("auto",) + FORMATS, default="auto",
                   help="auto (default): detected from the first record / CSV header; "
                        "mooncake: timestamp ms, 512-token hash ids; bailian: timestamp s, "
                        "16-token hash ids; azure, burstgpt: CSV without prefix information "
                        "(every prompt unique; BurstGPT rows with 0 response tokens, failures, "
                        "are dropped)")
    p.add_argument("--trace-block-size", type=int, default=None, metavar="TOKENS",
                   help="tokens per trace hash id (default: the format's, 512 mooncake, "
                        "16 bailian, 16 azure / burstgpt)")


def add_arguments(p: argparse.ArgumentParser) -> None:
    _add_trace_args(p)
    p.add_argument("--instant", action="store_true",
                   help="pure cache-policy replay: hit rate per policy and capacity")
    p.add_argument("--policy", default="lru", help="eviction policy (kvpool.core.eviction)")
    p.add_argument("--capacity-blocks", type=int, default=None,
                   help="instant: cache capacity in trace blocks (one per hash id, of the "
                        "format's --trace-block-size tokens: 512 mooncake, 16 bailian); timed: "
                        "--num-blocks given in trace blocks")
    p.add_argument("--num-blocks", type=int, default=None,
                   help="timed: device pool blocks of --block-size tokens (default 32768)")
    p.add_argument("--block-size", type=int, default=16, help="tokens per pool block")
    p.add_argument("--num-host-blocks", type=int, default=8192,
                   help="timed: host swap blocks (0 disables swap)")
    p.add_argument("--max-num-seqs", type=int, default=256)
    p.add_argument("--max-num-batched-tokens", type=int, default=8192)
    p.add_argument("--max-model-len", type=int, default=131072)
    p.add_argument("--preemption-mode", choices=("swap", "recompute", "auto"), default="auto",
                   help="force a preemption mode (auto: cheaper by the cost model)")
    p.add_argument("--defrag-threshold", type=float, default=None,
                   help="timed: defragment when external fragmentation exceeds this")
    p.add_argument("--limit", type=int, default=None, help="replay only the first N requests")
    p.add_argument("--seed", type=int, default=0, help="token synthesis and sampling seed")
    p.add_argument("--json", dest="json_path", default=None, help="write the report here")
    p.add_argument("--plot", default=None, help="write a PNG plot here")
    c = p.add_argument_group("timed replay cost model (defaults: an 8B Llama on one H200-class "
                             "GPU) and load")
    c.add_argument("--prefill-tokens-per-s", type=float, default=None,
                   help="prompt tokens computed per second (default 40000)")
    c.add_argument("--decode-s-per-seq", type=float, default=None,
                   help="seconds each decoding sequence adds to a step (default 0.0001)")
    c.add_argument("--step-overhead-s", type=float, default=None,
                   help="fixed seconds per step (default 0.004)")
    c.add_argument("--copy-gbps", type=float, default=None,
                   help="swap / copy bandwidth in GB/s (default 25)")
    c.add_argument("--kv-bytes-per-token", type=int, default=None,
                   help="KV bytes of one token over all layers (default 131072)")
    c.add_argument("--arrival-scale", type=float, default=1.0,
                   help="multiply the trace's arrival times (2: half the request rate)")
    add_progress_args(p)  # --progress / --quiet: done/total, rate, eta on stderr


def _instant(args, reqs, bar) -> dict:
    from kvpool.replay.instant import InstantReplay

    if args.capacity_blocks is None:
        raise BadOption("--instant needs --capacity-blocks C")
    try:  # NOTE(clean-options): --capacity-blocks 0, --policy nosuch printed a traceback
        replay = InstantReplay(args.capacity_blocks, args.policy)
    except ValueError as e:  # ConfigError (an unknown policy) is one
        raise BadOption(str(e)) from None
    return replay.run(reqs, progress=bar.update)


def _cost(args):
    """The StepCost the flags ask for (unset flags keep StepCost's defaults)."""
    from dataclasses import replace

    from kvpool.replay.timed import StepCost

    base = StepCost()
    per_token = (base.kv_bytes_per_block // 16 if args.kv_bytes_per_token is None
                 else args.kv_bytes_per_token)
    given = {"step_overhead_s": args.step_overhead_s,
             "prefill_tokens_per_s": args.prefill_tokens_per_s,
             "decode_s_per_seq": args.decode_s_per_seq,
             "copy_bytes_per_s": None if args.copy_gbps is None else args.copy_gbps * 1e9}
    return replace(base, kv_bytes_per_block=per_token * args.block_size,
                   **{k: v for k, v in given.items() if v is not None})


def _timed(args, trace, bar) -> dict:
    from kvpool.replay.timed import DEFAULT_NUM_BLOCKS, TimedOptions, TimedReplay

    num_blocks = args.num_blocks
    if num_blocks is None:  # --capacity-blocks: trace blocks, rounded up to pool blocks
        num_blocks = (-(-args.capacity_blocks * trace.block // args.block_size)
                      if args.capacity_blocks is not None else DEFAULT_NUM_BLOCKS)
    opts = TimedOptions(
        block_size=args.block_size, num_blocks=num_blocks,
        num_host_blocks=args.num_host_blocks, max_num_seqs=args.max_num_seqs,
        max_num_batched_tokens=args.max_num_batched_tokens, max_model_len=args.max_model_len,
        policy=args.policy,
        preemption_mode=None if args.preemption_mode == "auto" else args.preemption_mode,
        seed=args.seed, defrag_threshold=args.defrag_threshold, arrival_scale=args.arrival_scale,
        trace_block=trace.block)
    try:
        replay = TimedReplay(opts, _cost(args))
        replay.arrivals(trace.requests)  # finite under --arrival-scale (NOTE(finite-clock))
    except ValueError as e:  # a bad option value: name it, no traceback
        raise BadOption(str(e)) from None
    return replay.run(trace.requests, progress=bar.update)


def _print_summary(report: dict, wall: float) -> None:
    if report["mode"] == "instant":
        print(f"policy={report['policy']} capacity={report['capacity_blocks']} "
              f"requests={report['requests']} hit_rate={report['hit_rate']:.4f} "
              f"({wall:.1f}s wall)")
        return
    r = report
    print(f"requests={r['requests']} completed={r['completed']} ignored={r['ignored']} "
          f"steps={r['steps']} makespan={r['makespan_s']:.1f}s ({wall:.1f}s wall)")
    print(f"TTFT p50={r['ttft_s']['p50']}s p99={r['ttft_s']['p99']}s  "
          f"queueing p50={r['queueing_s']['p50']}s p99={r['queueing_s']['p99']}s")
    print(f"throughput {r['throughput']['output_tokens_per_s']} out tok/s  "
          f"prefix hit rate {r['prefix_hit_rate']:.4f}  preemptions {r['preemptions']}  "
          f"swap out/in blocks {r['swap_out_blocks']}/{r['swap_in_blocks']}  "
          f"peak usage {r['peak_usage']:.3f}")


def _load(args):
    """The trace the flags name, or None after saying why not on stderr."""
    try:
        trace = read_trace(args.trace, args.limit, args.trace_format, args.trace_block_size)
    except ValueError as e:  # unknown format, a malformed record: file and line named
        print(f"kvpool replay: {e}", file=sys.stderr)
        return None
    if not trace.requests:
        print(f"kvpool replay: {args.trace} holds no request", file=sys.stderr)
        return None
    if trace.reordered:  # NOTE(time-order) in trace.py: replayed sorted, and said so
        print(f"kvpool replay: {args.trace}:{trace.first_back}: {trace.reordered} record(s) "
              "arrive before a record above them; replaying in arrival order", file=sys.stderr)
    return trace


def _trace_report(args, trace) -> dict:
    """The report's ``trace`` section: the file, how it was read, and what it holds."""
    return {"file": Path(args.trace).name, "format": trace.format, "block_tokens": trace.block,
            "prefix_info": trace.prefix_info, "dropped": trace.dropped,
            "reordered": trace.reordered, **trace_summary(trace.requests)}


def run(args: argparse.Namespace) -> int:
    if not Path(args.trace).is_file():
        print(f"kvpool replay: no such trace file: {args.trace}", file=sys.stderr)
        return 2
    if args.limit is not None and args.limit < 1:
        print("kvpool replay: --limit must be >= 1", file=sys.stderr)
        return 2
    if args.plot:  # before a long replay, not after it
        try:
            import_pyplot()
        except ConfigError as e:
            print(f"kvpool replay: {e}", file=sys.stderr)
            return 2
    t0 = time.perf_counter()
    trace = _load(args)
    if trace is None:
        return 2
    reqs = trace.requests
    bar = Progress(len(reqs), prefix="kvpool replay: ", enabled=args.progress)
    try:
        report = _instant(args, reqs, bar) if args.instant else _timed(args, trace, bar)
    except BadOption as e:
        print(f"kvpool replay: {e}", file=sys.stderr)
        return 2
    bar.close()
    report["trace"] = _trace_report(args, trace)
    report["seed"] = args.seed
    wall = time.perf_counter() - t0
    _print_summary(report, wall)
    if args.json_path:
        write_text(args.json_path, json.dumps(report, indent=1, sort_keys=True) + "\n")
        print(f"wrote {args.json_path}")
    if args.plot:
        title = (f"{report['trace']['file']}: {report['mode']} replay, policy {args.policy}")
        plot(report["timeline"], args.plot, title,
             "requests replayed" if args.instant else "simulated seconds")
        print(f"wrote {args.plot}")
    return 0
