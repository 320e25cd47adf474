"""bench.sched's nano-vllm arm: with nano-vllm's sources (``$NANOVLLM_SRC``, default
/tmp/nanovllm_src) its own Scheduler runs beside kvpool's in --quick mode, writes the figures as
KEY / KEY.min / KEY.max and scheduled every sequence on every decode step; without them the
bench says so and runs kvpool alone. Nothing here is timed."""

import importlib.util
import os
from pathlib import Path

import pytest

from tests.bench.runs import run_bench

SRC = Path(os.environ.get("NANOVLLM_SRC", "/tmp/nanovllm_src"))
DEPS = ("numpy", "xxhash", "transformers")  # what nano-vllm's engine modules import


def _skip_reason() -> str | None:
    if not (SRC / "nanovllm" / "engine" / "scheduler.py").is_file():
        return f"nano-vllm sources not under {SRC} (set NANOVLLM_SRC); the arm is optional"
    missing = [m for m in DEPS if importlib.util.find_spec(m) is None]
    return f"nano-vllm's engine needs {', '.join(missing)}" if missing else None


@pytest.mark.skipif(_skip_reason() is not None, reason=_skip_reason() or "")
def test_nanovllm_arm_quick(tmp_path):
    res, out = run_bench("bench.sched", tmp_path / "sched.json", "--no-vllm",
                         "--nanovllm-src", str(SRC))
    assert res["nanovllm"]["kvcache_block_size"] == 256
    assert "nano-vllm/kvpool" in out
    for name in ("decode256", "decode1024", "mixed256"):
        r = res[name]
        for key in ("nanovllm_us_per_seq_step", "vs_nanovllm"):
            assert r[f"{key}.min"] <= r[key] <= r[f"{key}.max"], (name, key)
            assert r[key] > 0, (name, key)
    for name, n in (("decode256", 256), ("decode1024", 1024)):
        # every timed step was a decode step over all n sequences, in every run
        assert res[name]["nanovllm_seqs_per_step.min"] == n, name
        assert res[name]["nanovllm_seqs_per_step.max"] == n, name
        assert res[name]["nanovllm_short_steps.max"] == 0, name
    assert res["mixed256"]["nanovllm_finished"] > 0


def test_without_nanovllm_sources_the_bench_says_so(tmp_path):
    res, out = run_bench("bench.sched", tmp_path / "sched.json", "--no-vllm",
                         "--nanovllm-src", str(tmp_path / "absent"))
    assert res["nanovllm"] is None
    assert "nano-vllm sources not found" in out
    assert "vs_nanovllm" not in res["decode256"]
