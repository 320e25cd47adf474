"""Shared helpers for the benchmarks: repeated, alternating measurement; anchors; tables; JSON.

Every figure a benchmark reports is the median of ``repeats`` runs (default 5). One run calls
its workload again and again until the workload's own measured seconds add up to at least
``min_seconds`` (default 0.3 s) and reports the time-weighted mean of each figure (for a rate:
total work / total time), so a single ~50 ms timing never becomes a figure. Workloads that
are compared (kvpool against a baseline) run in the same round robin, ``k1 b1 k2 b2 ...``,
so that machine drift (other processes, thermal state, a noisy neighbour) hits both sides
alike; a ratio is the median of the per-round ratios, not the ratio of two medians.

A workload is a callable returning a dict ``{"seconds": measured time, figure: value, ...}``
(the time excludes its own setup). The JSON carries ``KEY``, ``KEY.min`` and ``KEY.max``.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from kvpool.outfile import write_text

SHARED = Path(os.environ.get("KVPOOL_SHARED", Path(__file__).resolve().parents[2] / "shared"))
# the Mooncake conversation trace (Apache-2.0) ships in the repo, so a fresh clone replays it
TRACE = (Path(__file__).resolve().parents[1] / "data" / "traces"
         / "mooncake_conversation_trace.jsonl")

DEFAULT_REPEATS = 5
DEFAULT_MIN_SECONDS = 0.3
# --quick: enough to exercise every code path (two rounds, so alternation happens), not to
# produce figures anyone should quote.
QUICK_REPEATS = 2
QUICK_MIN_SECONDS = 0.0

Workload = Callable[[], dict]


@dataclass(frozen=True)
class Timing:
    """How hard to measure: runs per figure and the least measured seconds per run."""
    repeats: int = DEFAULT_REPEATS
    min_seconds: float = DEFAULT_MIN_SECONDS
    quick: bool = False

    def __post_init__(self) -> None:
        if self.repeats < 1:
            raise ValueError(f"repeats must be >= 1, got {self.repeats}")
        if self.min_seconds < 0:
            raise ValueError(f"min_seconds must be >= 0, got {self.min_seconds}")


@dataclass(frozen=True)
class Stat:
    """Median and spread of one figure over the runs."""
    median: float
    min: float
    max: float
    values: tuple[float, ...]

    @classmethod
    def of(cls, values) -> Stat:
        vals = tuple(float(v) for v in values)
        if not vals:
            raise ValueError("no values")
        return cls(statistics.median(vals), min(vals), max(vals), vals)

    def spread(self, fmt: str = ",.0f") -> str:
        return f"{self.min:{fmt}}-{self.max:{fmt}}"


def add_timing_args(ap: argparse.ArgumentParser) -> None:
    """The flags every benchmark takes: --repeats, --min-seconds, --quick."""
    ap.add_argument("--repeats", type=int, default=None,
                    help=f"runs per figure, the median is reported (default "
                         f"{DEFAULT_REPEATS}; {QUICK_REPEATS} with --quick)")
    ap.add_argument("--min-seconds", type=float, default=None,
                    help=f"least measured seconds per run (default {DEFAULT_MIN_SECONDS}; "
                         f"{QUICK_MIN_SECONDS} with --quick)")
    ap.add_argument("--quick", action="store_true",
                    help="smaller workloads and fewer, shorter runs (smoke test)")


def bench_parser(name: str, doc: str | None, *, timing: bool = True) -> argparse.ArgumentParser:
    """``python -m bench.NAME``'s parser: its docstring's first line, ``--json PATH`` (its
    folder created) and, unless ``timing=False``, the timing flags."""
    ap = argparse.ArgumentParser(prog=f"python -m bench.{name}",
                                 description=(doc or "").strip().split("\n")[0])
    ap.add_argument("--json", default=None, metavar="PATH",
                    help="write the figures here as JSON (its folder is created)")
    if timing:
        add_timing_args(ap)
    return ap


def timing_from_args(args: argparse.Namespace) -> Timing:
    """Explicit --repeats / --min-seconds win over the --quick defaults."""
    quick = bool(getattr(args, "quick", False))
    rep = args.repeats if args.repeats is not None else (
        QUICK_REPEATS if quick else DEFAULT_REPEATS)
    sec = args.min_seconds if args.min_seconds is not None else (
        QUICK_MIN_SECONDS if quick else DEFAULT_MIN_SECONDS)
    return Timing(rep, sec, quick)


def run_for(fn: Workload, min_seconds: float) -> dict:
    """One run: call ``fn`` until its measured seconds add up to ``min_seconds`` (at least
    once) and combine the calls: every numeric figure becomes its time-weighted mean (for a
    rate that is total work / total time), ``seconds`` the total, ``calls`` the count."""
    samples: list[dict] = []
    total = 0.0
    while not samples or total < min_seconds:
        samples.append(fn())
        total = _add_seconds(total, samples[-1], min_seconds)
    return _combine(samples)


async def arun_for(fn: Callable[[], Awaitable[dict]], min_seconds: float) -> dict:
    """``run_for`` for a coroutine workload (one that must await the event loop)."""
    samples: list[dict] = []
    total = 0.0
    while not samples or total < min_seconds:
        samples.append(await fn())
        total = _add_seconds(total, samples[-1], min_seconds)
    return _combine(samples)


async def ameasure(fn: Callable[[], Awaitable[dict]], timing: Timing) -> list[dict]:
    """``measure`` for a coroutine workload."""
    runs = []
    for _ in range(timing.repeats):
        gc.collect()
        runs.append(await arun_for(fn, timing.min_seconds))
    return runs


def _add_seconds(total: float, sample: dict, min_seconds: float) -> float:
    s = float(sample["seconds"])
    if s < 0:
        raise ValueError(f"workload reported negative seconds: {s}")
    if s == 0 and total + s < min_seconds:
        raise ValueError("workload reported 0 seconds; it can never reach min_seconds")
    return total + s


def _combine(samples: list[dict]) -> dict:
    total = sum(float(r["seconds"]) for r in samples)
    out: dict = {"seconds": total, "calls": len(samples)}
    for key in samples[0]:
        if key == "seconds" or not all(_numeric(r.get(key)) for r in samples):
            continue
        if total > 0:
            out[key] = sum(r[key] * r["seconds"] for r in samples) / total
        else:  # min_seconds == 0 and a zero-time call: nothing to weight by
            out[key] = statistics.fmean(r[key] for r in samples)
    return out


def _numeric(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def alternate(workloads: Mapping[str, Workload], timing: Timing,
              after_run: Callable[[], None] | None = None) -> dict[str, list[dict]]:
    """``timing.repeats`` rounds; in each round every workload does one run, in the given
    order (k1 b1 k2 b2 ...). Returns the runs per workload name, in round order.
    ``after_run``: called after each run (progress), outside the timed part."""
    runs: dict[str, list[dict]] = {name: [] for name in workloads}
    for _ in range(timing.repeats):
        for name, fn in workloads.items():
            gc.collect()  # garbage of the previous run is not charged to this one
            runs[name].append(run_for(fn, timing.min_seconds))
            if after_run is not None:
                after_run()
    return runs


async def aalternate(workloads: Mapping[str, Callable[[], Awaitable[dict]]], timing: Timing
                     ) -> dict[str, list[dict]]:
    """``alternate`` for coroutine workloads (k1 b1 k2 b2 ... on one event loop)."""
    runs: dict[str, list[dict]] = {name: [] for name in workloads}
    for _ in range(timing.repeats):
        for name, fn in workloads.items():
            gc.collect()
            runs[name].append(await arun_for(fn, timing.min_seconds))
    return runs


def measure(fn: Workload, timing: Timing) -> list[dict]:
    """The runs of one workload with no baseline."""
    return alternate({"_": fn}, timing)["_"]


def repeat(fn: Callable[[], dict], n: int) -> list[dict]:
    """``n`` runs of a figure that is counted, not timed (bytes, utilisation): no seconds
    bound, but the same median/min/max treatment."""
    out = []
    for _ in range(n):
        gc.collect()
        out.append(fn())
    return out


def stat(runs: list[dict], key: str) -> Stat:
    return Stat.of(r[key] for r in runs)


def ratio_stat(ours: list[dict], ours_key: str, base: list[dict], base_key: str,
               invert: bool = False) -> Stat:
    """Median/min/max of the per-round ratios ours[i] / base[i] (base / ours if ``invert``,
    for figures where smaller is better)."""
    if len(ours) != len(base):
        raise ValueError(f"unpaired runs: {len(ours)} vs {len(base)}")
    pairs = [(a[ours_key], b[base_key]) for a, b in zip(ours, base)]
    return Stat.of((b / a) if invert else (a / b) for a, b in pairs)


def put(res: dict, key: str, s: Stat) -> None:
    """Write ``KEY`` (median), ``KEY.min`` and ``KEY.max`` into a result dict."""
    res[key], res[f"{key}.min"], res[f"{key}.max"] = s.median, s.min, s.max


def put_runs(res: dict, runs: list[dict], keys: Mapping[str, str]) -> None:
    """``put`` for several figures of the same runs: keys maps JSON key -> run field."""
    for out_key, field in keys.items():
        put(res, out_key, stat(runs, field))


def summary(runs: list[dict]) -> dict:
    """Every numeric field of the runs as ``field`` / ``field.min`` / ``field.max``."""
    out: dict = {}
    for key in runs[0]:
        if all(_numeric(r.get(key)) for r in runs):
            put(out, key, stat(runs, key))
    return out


def timing_info(timing: Timing) -> dict:
    return {"repeats": timing.repeats, "min_seconds": timing.min_seconds,
            "quick": timing.quick}


def machine() -> dict:
    return {"python": platform.python_version(), "machine": platform.machine(),
            "cpus": os.cpu_count(), "time": time.strftime("%Y-%m-%dT%H:%M:%S")}


def load_anchor(script: str) -> ModuleType | None:
    """Import one of ../shared/anchors/*.py as a module of this process (its code never
    enters this repo), so that its workloads can alternate with kvpool's. None if absent."""
    path = SHARED / "anchors" / script
    if not path.is_file():
        print(f"(anchor {script} not found under {SHARED}; skipped)")
        return None
    name = f"_kvpool_anchor_{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def fmt_stat(s: Stat | None, fmt: str = ",.0f") -> str:
    if s is None:
        return "-"
    return f"{s.median:{fmt}} [{s.spread(fmt)}]"


def print_table(rows: list[tuple[str, Stat | None, Stat | None, Stat | None, str]],
                fmt: str = ",.0f") -> None:
    """rows: (key, ours, baseline, per-round ratio, baseline name); each cell prints the
    median and [min-max] over the runs."""
    print(f"\n{'key':40s} {'kvpool median [min-max]':>34s} {'baseline median [min-max]':>34s} "
          f"{'ratio [min-max]':>18s}  baseline")
    for key, ours, base, ratio, name in rows:
        print(f"{key:40s} {fmt_stat(ours, fmt):>34s} {fmt_stat(base, fmt):>34s} "
              f"{fmt_stat(ratio, '.2f'):>18s}  {name}")


def print_runs(res: dict, timing: Timing, alternating: str, keys: list[str] | None = None,
               note: str = "ratio = median of per-round ratios") -> None:
    """The closing table of an alternating benchmark: how many runs of how long, which sides
    alternated, then ``print_stats(res, keys)``."""
    print(f"\n{timing.repeats} runs of >= {timing.min_seconds} s per figure, {alternating} "
          f"alternating; {note}")
    print_stats(res, keys)


def print_stats(res: dict, keys: list[str] | None = None) -> None:
    """A table of KEY: median [KEY.min-KEY.max] for figures without a baseline column (all
    keys that have a KEY.min when ``keys`` is None)."""
    if keys is None:
        keys = [k for k in res if f"{k}.min" in res]
    print(f"\n{'key':40s} {'median':>14s}  [min-max]")
    for key in keys:
        if key not in res:
            continue
        v = res[key]
        fmt = ",.4f" if abs(v) < 100 else ",.0f"
        lo, hi = res.get(f"{key}.min"), res.get(f"{key}.max")
        spread = f"  [{lo:{fmt}}-{hi:{fmt}}]" if lo is not None and hi is not None else ""
        print(f"{key:40s} {v:>14{fmt}}{spread}")


def write_json(path: str | None, data: dict) -> None:
    if path:
        write_text(path, json.dumps(data, indent=1, sort_keys=True))  # out/x.json makes out/
        print(f"wrote {path}")
