"""Shared helpers for the benchmarks: best-of timing, anchor subprocesses, tables, JSON."""

from __future__ import annotations

import gc
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

SHARED = Path(os.environ.get("KVPOOL_SHARED", Path(__file__).resolve().parents[2] / "shared"))


def best_of(repeats: int, fn: Callable[[], dict]) -> dict:
    """Run ``fn`` ``repeats`` times (gc between) and keep the fastest result."""
    best = None
    for _ in range(max(1, repeats)):
        gc.collect()
        r = fn()
        if best is None or r["seconds"] < best["seconds"]:
            best = r
    return best


def timed(fn: Callable[[], int]) -> dict:
    """Time ``fn`` (which returns an operation count): seconds and ops."""
    t0 = time.perf_counter()
    ops = fn()
    return {"seconds": time.perf_counter() - t0, "ops": ops}


def machine() -> dict:
    return {"python": platform.python_version(), "machine": platform.machine(),
            "cpus": os.cpu_count(), "time": time.strftime("%Y-%m-%dT%H:%M:%S")}


def run_anchor(script: str, extra_args: list[str], env_src: str | None = None) -> dict | None:
    """Run one of ../shared/anchors/*.py in a subprocess (their code never enters this repo)
    and return its JSON, or None when the anchor or its external sources are missing."""
    path = SHARED / "anchors" / script
    if not path.is_file():
        print(f"(anchor {script} not found under {SHARED}; skipped)")
        return None
    with tempfile.TemporaryDirectory() as d:
        out = Path(d) / "anchor.json"
        cmd = [sys.executable, str(path), "--json", str(out), *extra_args]
        print("running anchor:", " ".join(cmd), flush=True)
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0 or not out.is_file():
            tail = (r.stdout + r.stderr).strip().splitlines()[-3:]
            print(f"(anchor {script} failed: {' | '.join(tail)})")
            return None
        print(r.stdout.rstrip())
        return json.loads(out.read_text())


def print_table(rows: list[tuple[str, float | None, float | None, str]]) -> None:
    """rows: (key, ours, baseline, baseline name)."""
    print(f"\n{'key':44s} {'kvpool':>14s} {'baseline':>14s} {'ratio':>7s}  baseline")
    for key, ours, base, name in rows:
        o = f"{ours:14,.0f}" if ours is not None else f"{'-':>14s}"
        b = f"{base:14,.0f}" if base else f"{'-':>14s}"
        ratio = f"{ours / base:7.2f}" if ours and base else f"{'-':>7s}"
        print(f"{key:44s} {o} {b} {ratio}  {name}")


def write_json(path: str | None, data: dict) -> None:
    if path:
        Path(path).write_text(json.dumps(data, indent=1, sort_keys=True))
        print(f"wrote {path}")
