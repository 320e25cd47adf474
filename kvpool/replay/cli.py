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
time goes to stdout (stderr under ``--json -``: NOTE(json-stdout)), progress with an estimate
of the time left to stderr (kvpool/progress.py: on when stderr is a terminal, ``--progress``
forces it, ``--quiet`` silences it).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from dataclasses import replace
from pathlib import Path

from kvpool.errors import ConfigError
from kvpool.outfile import check_writable, write_text
from kvpool.progress import Progress, add_progress_args

from kvpool.replay.report import import_pyplot, plot
from kvpool.replay.formats import FORMATS
from kvpool.replay.notices import trace_notices
from kvpool.replay.trace import read_trace, trace_summary


class BadOption(Exception):
    """An option value the replay cannot run with (exit status 2)."""


# NOTE(mode-flags): the flags only the timed replay reads (their argparse default is None, so
# "given" is "not None", and TimedOptions / StepCost hold the defaults); --instant names the
# ones given in one warning instead of ignoring them silently (docs/benchmarks.md "Trace replay")
_TIMED_OPTIONS = ("block_size", "num_host_blocks", "max_num_seqs", "max_num_batched_tokens",
                  "max_model_len", "preemption_mode", "defrag_threshold", "arrival_scale")
_TIMED_ONLY = ("num_blocks", *_TIMED_OPTIONS, "prefill_tokens_per_s", "decode_s_per_seq",
               "step_overhead_s", "copy_gbps", "kv_bytes_per_token")


# NOTE(flag-bounds): the integer flags' upper bounds, far past any real run (2**31 blocks of 16
# tokens are 32 Gi tokens of KV; a 400B model's token is under 1 MiB of it), checked before the
# run: 10**12 blocks was a MemoryError traceback allocating the pool, a 400-digit
# --kv-bytes-per-token an OverflowError in the float cost model (docs/benchmarks.md)
MAX_BLOCKS = 1 << 31
_BOUNDS = {"capacity_blocks": MAX_BLOCKS, "num_blocks": MAX_BLOCKS,
           "num_host_blocks": MAX_BLOCKS, "kv_bytes_per_token": 1 << 30,
           "block_size": 1 << 24, "trace_block_size": 1 << 24, "max_num_seqs": MAX_BLOCKS,
           "max_num_batched_tokens": MAX_BLOCKS, "max_model_len": MAX_BLOCKS}
# NOTE(json-stdout): --json - (or /dev/stdout) writes the report to stdout and the summary
# lines to stderr, so `kvpool replay T --json - | jq` reads JSON alone (docs/benchmarks.md)
_STDOUT = ("-", "/dev/stdout", "/dev/fd/1", "/proc/self/fd/1")


def _flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


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
    from kvpool.core.eviction import POLICIES

    p.add_argument("--policy", default="lru",
                   help=f"eviction policy: {', '.join(sorted(POLICIES))} (default lru)")
    p.add_argument("--capacity-blocks", type=int, default=None,
                   help="instant: cache capacity in trace blocks (one per hash id, of the "
                        "format's --trace-block-size tokens: 512 mooncake, 16 bailian); timed: "
                        "--num-blocks given in trace blocks")
    p.add_argument("--num-blocks", type=int, default=None,
                   help="timed: device pool blocks of --block-size tokens (default 32768; "
                        "not with --capacity-blocks)")
    p.add_argument("--block-size", type=int, default=None,
                   help="timed: tokens per pool block (default 16)")
    p.add_argument("--num-host-blocks", type=int, default=None,
                   help="timed: host swap blocks (default 8192; 0 disables swap)")
    p.add_argument("--max-num-seqs", type=int, default=None, help="timed: default 256")
    p.add_argument("--max-num-batched-tokens", type=int, default=None, help="timed: default 8192")
    p.add_argument("--max-model-len", type=int, default=None, help="timed: default 131072")
    p.add_argument("--preemption-mode", choices=("swap", "recompute", "auto"), default=None,
                   help="timed: force a preemption mode (default auto: cheaper by the cost "
                        "model)")
    p.add_argument("--defrag-threshold", type=float, default=None,
                   help="timed: defragment when external fragmentation exceeds this")
    p.add_argument("--limit", type=int, default=None, help="replay only the first N requests")
    p.add_argument("--seed", type=int, default=0, help="token synthesis and sampling seed")
    p.add_argument("--json", dest="json_path", default=None,
                   help="write the report here (-: to stdout, the summary then to stderr)")
    p.add_argument("--plot", default=None, help="write a PNG plot here (a file)")
    _add_cost_args(p)
    add_progress_args(p)  # --progress / --quiet: done/total, rate, eta on stderr


def _add_cost_args(p: argparse.ArgumentParser) -> None:
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
    c.add_argument("--arrival-scale", type=float, default=None,
                   help="multiply the trace's arrival times (default 1; 2: half the request "
                        "rate)")


def _instant(args, reqs, bar) -> dict:
    from kvpool.replay.instant import InstantReplay

    if args.capacity_blocks is None:
        raise BadOption("--instant needs --capacity-blocks C")
    ignored = [_flag(d) for d in _TIMED_ONLY if getattr(args, d) is not None]
    if ignored:  # NOTE(mode-flags)
        print(f"kvpool replay: --instant ignores {', '.join(ignored)} (timed replay flags; "
              "drop them or drop --instant)", file=sys.stderr)
    try:  # NOTE(clean-options): --capacity-blocks 0, --policy nosuch printed a traceback
        replay = InstantReplay(args.capacity_blocks, args.policy)
    except ValueError as e:  # ConfigError (an unknown policy) is one
        raise BadOption(str(e)) from None
    except MemoryError:  # under NOTE(flag-bounds) yet more than this machine holds
        raise BadOption(f"--capacity-blocks {args.capacity_blocks}: not enough memory for "
                        "the pool; give fewer blocks") from None
    return replay.run(reqs, progress=bar.update)


def _cost(args, block_size: int):
    """The StepCost the flags ask for (unset flags keep StepCost's defaults)."""
    from kvpool.replay.timed import StepCost

    base = StepCost()
    per_token = (base.kv_bytes_per_block // 16 if args.kv_bytes_per_token is None
                 else args.kv_bytes_per_token)
    if per_token < 1:  # before it is folded into kv_bytes_per_block, whose name is no flag
        raise ValueError(f"--kv-bytes-per-token must be >= 1, got {per_token}")
    given = {"step_overhead_s": args.step_overhead_s,
             "prefill_tokens_per_s": args.prefill_tokens_per_s,
             "decode_s_per_seq": args.decode_s_per_seq,
             "copy_bytes_per_s": None if args.copy_gbps is None else args.copy_gbps * 1e9}
    return replace(base, kv_bytes_per_block=per_token * block_size,
                   **{k: v for k, v in given.items() if v is not None})


def _options(args, trace):
    """The TimedOptions the flags ask for (unset flags keep TimedOptions' defaults)."""
    from kvpool.replay.timed import TimedOptions

    given = {d: getattr(args, d) for d in _TIMED_OPTIONS if getattr(args, d) is not None}
    if given.get("preemption_mode") == "auto":
        del given["preemption_mode"]  # None: by cost
    opts = TimedOptions(policy=args.policy, seed=args.seed, trace_block=trace.block, **given)
    if opts.block_size < 1:  # checked here too: --capacity-blocks divides by it
        raise ValueError(f"--block-size must be >= 1, got {opts.block_size}")
    if args.num_blocks is not None and args.capacity_blocks is not None:
        raise ValueError("--num-blocks and --capacity-blocks both size the device pool "
                         "(in pool blocks / in trace blocks): give one of them")
    if args.capacity_blocks is not None:  # trace blocks, rounded up to pool blocks
        if args.capacity_blocks < 1:
            raise ValueError(f"--capacity-blocks must be >= 1, got {args.capacity_blocks}")
        blocks = -(-args.capacity_blocks * trace.block // opts.block_size)
        if blocks > MAX_BLOCKS:  # NOTE(flag-bounds), in pool blocks
            raise ValueError(f"--capacity-blocks {args.capacity_blocks} is {blocks} pool "
                             f"blocks of --block-size {opts.block_size}: at most {MAX_BLOCKS}")
        return replace(opts, num_blocks=blocks)
    return opts if args.num_blocks is None else replace(opts, num_blocks=args.num_blocks)


def _timed(args, trace, bar) -> dict:
    from kvpool.replay.timed import TimedReplay

    try:
        opts = _options(args, trace)
        replay = TimedReplay(opts, _cost(args, opts.block_size))
        replay.arrivals(trace.requests)  # finite under --arrival-scale (NOTE(finite-clock))
    except ValueError as e:  # a bad option value: name it, no traceback
        raise BadOption(str(e)) from None
    except MemoryError:  # under NOTE(flag-bounds) yet more than this machine holds
        raise BadOption("not enough memory for the pool: give fewer --num-blocks / "
                        "--capacity-blocks / --num-host-blocks") from None
    return replay.run(trace.requests, progress=bar.update)


def _secs(v: float | None) -> str:
    """A percentile for the summary: ``n/a`` when no request was served (None), not "Nones"."""
    return "n/a" if v is None else f"{v}s"


def _print_summary(report: dict, wall: float, out) -> None:
    if report["mode"] == "instant":
        print(f"policy={report['policy']} capacity={report['capacity_blocks']} "
              f"requests={report['requests']} hit_rate={report['hit_rate']:.4f} "
              f"({wall:.1f}s wall)", file=out)
        return
    r = report
    print(f"requests={r['requests']} completed={r['completed']} ignored={r['ignored']} "
          f"steps={r['steps']} makespan={r['makespan_s']:.1f}s ({wall:.1f}s wall)", file=out)
    ttft, queue = r["ttft_s"], r["queueing_s"]
    print(f"TTFT p50={_secs(ttft['p50'])} p99={_secs(ttft['p99'])}  "
          f"queueing p50={_secs(queue['p50'])} p99={_secs(queue['p99'])}", file=out)
    print(f"throughput {r['throughput']['output_tokens_per_s']} out tok/s  "
          f"prefix hit rate {r['prefix_hit_rate']:.4f}  preemptions {r['preemptions']}  "
          f"swap out/in blocks {r['swap_out_blocks']}/{r['swap_in_blocks']}  "
          f"peak usage {r['peak_usage']:.3f}", file=out)


def _load(args):
    """The trace the flags name, or None after saying why not on stderr."""
    try:
        trace = read_trace(args.trace, args.limit, args.trace_format, args.trace_block_size)
    except ValueError as e:  # unknown format, a malformed record: file and line named
        print(f"kvpool replay: {e}", file=sys.stderr)
        return None
    except OSError as e:  # unreadable, a directory, an I/O error
        print(f"kvpool replay: cannot read {args.trace}: {e.strerror or e}", file=sys.stderr)
        return None
    if not trace.requests:
        why = ("0 prompt tokens, or 0 response tokens: a failed request" if trace.format
               == "burstgpt" else "0 prompt tokens: the scheduler refuses an empty prompt")
        print(f"kvpool replay: {args.trace} holds no request" + (
            f": all {trace.dropped} record(s) were dropped ({why})" if trace.dropped else ""),
            file=sys.stderr)
        return None
    for line in trace_notices(args.trace, trace):  # NOTE(format-hints) in notices.py
        print(f"kvpool replay: {line}", file=sys.stderr)
    return trace


def _trace_report(args, trace) -> dict:
    """The report's ``trace`` section: the file, how it was read, and what it holds."""
    return {"file": Path(args.trace).name, "format": trace.format, "block_tokens": trace.block,
            "prefix_info": trace.prefix_info, "dropped": trace.dropped,
            "reordered": trace.reordered, "trimmed": trace.trimmed, "padded": trace.padded,
            "lacking_bailian_keys": trace.clues.unkeyed,
            "fractional_ms_timestamps": trace.clues.fractional_ms,
            **trace_summary(trace.requests)}


def _finite(v):
    """``v`` with every non-finite float made None: the report is strict JSON (RFC 8259 has
    no NaN / Infinity), even where finite flags overflow (``--step-overhead-s 1e308``)."""
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, dict):
        return {k: _finite(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_finite(x) for x in v]
    return v


def _check(args) -> str | None:
    """Why the flags cannot run, checked before a long replay (not after it); None if they can."""
    if not Path(args.trace).exists():
        return f"no such trace file: {args.trace}"
    if args.limit is not None and args.limit < 1:
        return "--limit must be >= 1"
    for dest, bound in _BOUNDS.items():  # NOTE(flag-bounds)
        if (getattr(args, dest) or 0) > bound:
            return f"{_flag(dest)} must be <= {bound} (2**{bound.bit_length() - 1})"
    if args.plot in _STDOUT:
        return f"--plot {args.plot}: a PNG is not written to stdout; name a file"
    try:
        if args.json_path and args.json_path not in _STDOUT:  # NOTE(check-before-run) in
            check_writable(args.json_path, "--json", (args.trace,))  # kvpool/outfile.py
        if args.plot:
            check_writable(args.plot, "--plot", (args.trace,))
            import_pyplot()
    except ConfigError as e:
        return str(e)
    return None


def _write(args, report: dict, out) -> None:
    """The --json and --plot files (OSError: written elsewhere meanwhile, a full disk), each
    said on ``out`` (stderr when the report goes to stdout: NOTE(json-stdout))."""
    if args.json_path:
        text = json.dumps(_finite(report), indent=1, sort_keys=True, allow_nan=False) + "\n"
        if args.json_path in _STDOUT:
            sys.stdout.write(text)
            sys.stdout.flush()
        else:
            write_text(args.json_path, text)
            print(f"wrote {args.json_path}", file=out)
    if args.plot:
        title = (f"{report['trace']['file']}: {report['mode']} replay, policy {args.policy}")
        plot(report["timeline"], args.plot, title,
             "requests replayed" if args.instant else "simulated seconds")
        print(f"wrote {args.plot}", file=out)


def run(args: argparse.Namespace) -> int:
    why = _check(args)
    if why is not None:
        print(f"kvpool replay: {why}", file=sys.stderr)
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
    out = sys.stderr if args.json_path in _STDOUT else sys.stdout  # NOTE(json-stdout)
    _print_summary(report, time.perf_counter() - t0, out)
    try:
        _write(args, report, out)
    except OSError as e:
        print(f"kvpool replay: cannot write {e.filename}: {e.strerror or e}", file=sys.stderr)
        return 2
    return 0
