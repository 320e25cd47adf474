"""Progress lines of long runs (kvpool/progress.py): done/total, rate and an estimate of the
time left, at most one line per interval plus the all-done line; on by default only when the
stream is a terminal; and ``kvpool replay`` / ``python -m bench.step`` print them when
forced with --progress, not when their stderr is a pipe or with --quiet."""

from __future__ import annotations

import io
import re
import subprocess
import sys
from pathlib import Path

import pytest

from kvpool.progress import Progress, eta_text
from tests.replay.traces import write_trace

REPO = Path(__file__).resolve().parents[1]
LINE = re.compile(r"^(?P<prefix>[\w. ]+: )?(?P<done>\d+)/(?P<total>\d+) (?P<label>\w+) "
                  r"\((?P<pct>[\d.]+)%\), (?P<rate>[\d.]+) \w+/s, eta (?P<eta>\S+)")


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_lines_carry_rate_and_eta_once_per_interval():
    clock, out = Clock(), io.StringIO()
    p = Progress(1000, prefix="job: ", stream=out, enabled=True, interval=3.0, clock=clock)
    for second in range(1, 10):  # 50 requests a second
        clock.now = 100.0 + second
        p.update(50 * second, extra="t=  1.0s")
    lines = out.getvalue().splitlines()
    assert len(lines) == 3  # at 3, 6 and 9 seconds
    assert lines[0] == "job: 150/1000 requests (15.0%), 50.0 requests/s, eta 17s  t=  1.0s"
    assert lines[2].startswith("job: 450/1000 requests (45.0%), 50.0 requests/s, eta 11s")
    clock.now += 1
    p.update(1000)  # all done: written at once, whatever the interval
    p.close()  # and not again
    lines = out.getvalue().splitlines()
    assert len(lines) == 4 and lines[-1].startswith("job: 1000/1000 requests (100.0%)")
    assert LINE.match(lines[-1])["eta"] == "0s"


def test_default_is_on_for_a_terminal_only_and_quiet_writes_nothing():
    pipe, tty = io.StringIO(), Terminal()
    for stream in (pipe, tty):
        p = Progress(10, stream=stream, interval=0.0)
        p.update(10)
        p.close()
    assert pipe.getvalue() == "" and LINE.match(tty.getvalue())
    quiet = Terminal()
    p = Progress(10, stream=quiet, enabled=False)
    p.update(10)
    p.close()
    assert quiet.getvalue() == ""


def test_eta_text():
    assert [eta_text(s) for s in (None, 0, 12.4, 185, 3725)] == ["?", "0s", "12s", "3m05s",
                                                                  "1h02m"]


def run(*argv: str) -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, *argv], cwd=REPO, capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    return r


@pytest.mark.parametrize("mode", [["--instant", "--capacity-blocks", "25"],
                                  ["--num-blocks", "2000"]])
def test_kvpool_replay_progress_when_forced(tmp_path, mode):
    trace = tmp_path / "t.jsonl"
    write_trace(trace, n=60, seed=3)
    replay = ["-m", "kvpool", "replay", str(trace), *mode]
    lines = [m for m in map(LINE.match, run(*replay, "--progress").stderr.splitlines()) if m]
    assert lines and lines[-1]["prefix"] == "kvpool replay: "
    assert (lines[-1]["done"], lines[-1]["total"], lines[-1]["eta"]) == ("60", "60", "0s")
    for quiet in ([], ["--quiet"], ["--no-progress"]):  # stderr is a pipe here
        assert not any(map(LINE.match, run(*replay, *quiet).stderr.splitlines())), quiet


def test_bench_step_progress_when_forced(tmp_path):
    pytest.importorskip("transformers")
    from tests.runtime.model.helpers import save_hf_model

    d = save_hf_model(tmp_path / "m", "llama")
    step = ["-m", "bench.step", "--model", str(d), "--threads", "1", "--dtypes", "float32",
            "--batch", "2", "--context", "16", "--prefill", "16", "--repeats", "2",
            "--min-seconds", "0.01"]
    r = run(*step, "--progress")
    lines = [m for m in map(LINE.match, r.stderr.splitlines()) if m]
    # 1 dtype x 1 thread count x (decode, prefill) x 2 repeats x (kvpool, transformers)
    assert lines and lines[-1]["prefix"] == "bench.step: " and lines[-1]["label"] == "runs"
    assert (lines[-1]["done"], lines[-1]["total"]) == ("8", "8")
    # the last --repeats counts; kvpool's runs alone (--no-hf) print through the same
    # Progress, and skip the transformers model's runs, which are seconds of CI time
    quiet = run(*step, "--quiet", "--repeats", "1", "--no-hf")
    assert not any(map(LINE.match, quiet.stderr.splitlines()))
