"""bench.loadgen: guidellm (its own venv, never a test dependency) driving kvpool serve.

The end-to-end run needs guidellm: it runs when bench.loadgen finds one ($KVPOOL_GUIDELLM,
PATH or /opt/guidellm/bin/guidellm) and skips otherwise. About 30 s: one guidellm process, 8
requests. Nothing is timed: figures are checked for shape and order only."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from bench.loadgen import FIGURES, find_guidellm

ROOT = Path(__file__).resolve().parents[2]


def run_loadgen(*args: str, timeout: float = 300,
                **env_extra: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), **env_extra}
    return subprocess.run([sys.executable, "-m", "bench.loadgen", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=timeout)


def test_a_missing_guidellm_is_a_clear_error_naming_the_venv(tmp_path):
    # an explicit path that is not an executable never falls back to another guidellm
    bogus = tmp_path / "guidellm"
    bogus.write_text("#!/bin/sh\nexit 0\n")  # not executable
    # (a working executable is on offer: a fallback to it would start a server and fail later)
    r = run_loadgen("--guidellm", str(bogus), "--json", str(tmp_path / "x.json"), timeout=60,
                    KVPOOL_GUIDELLM="/bin/true")
    assert r.returncode == 2
    assert f"--guidellm {bogus} is not an executable file" in r.stderr
    assert "python -m venv --system-site-packages /opt/guidellm" in r.stderr
    assert "listening" not in r.stdout and not (tmp_path / "x.json").exists()


@pytest.mark.skipif(find_guidellm(None) is None,
                    reason="no guidellm (set KVPOOL_GUIDELLM to its venv's executable)")
def test_guidellm_drives_the_server_and_the_figures_come_back(tmp_path):
    out = tmp_path / "out" / "loadgen.json"
    r = run_loadgen("--quick", "--repeats", "1", "--concurrency", "2", "--json", str(out))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    res = json.loads(out.read_text())
    for key in FIGURES:
        k = f"c2.{key}"
        assert res[f"{k}.min"] <= res[k] <= res[f"{k}.max"], k
        assert res[k] > 0, k
    # every request guidellm sent came back whole, and each run's prompts were new to the cache
    assert res["c2.requests.successful"] == 8 and res["c2.requests.errored"] == 0
    assert res["prefix_cache.hit_share"] < 0.5
    assert "stopped; 1024 device blocks free" in r.stdout  # no block leaked
