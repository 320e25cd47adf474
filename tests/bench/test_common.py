"""bench.common: the repeat / median / alternation machinery every benchmark uses.

Workloads here are deterministic: they report fake measured seconds, so nothing is timed."""

import argparse
import asyncio
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.common import (DEFAULT_MIN_SECONDS, DEFAULT_REPEATS, Stat, Timing, add_timing_args,
                          alternate, ameasure, measure, put, ratio_stat, run_for, summary,
                          timing_from_args, write_json)


class FakeWorkload:
    """Reports ``seconds`` from a script (cycled) and a rate of ``ops / seconds``; records
    every call into a shared log so the call order can be checked."""

    def __init__(self, name, log, seconds=(0.07,), ops=7.0):
        self.name, self.log, self.seconds, self.ops, self.calls = name, log, seconds, ops, 0

    def __call__(self) -> dict:
        s = self.seconds[self.calls % len(self.seconds)]
        self.calls += 1
        self.log.append(self.name)
        return {"seconds": s, "ops_per_s": self.ops / s, "label": "not a number"}


def test_run_for_repeats_until_the_bound():
    w = FakeWorkload("k", [], seconds=(0.07,))
    r = run_for(w, 0.3)
    # 4 calls are 0.28 s (< 0.3), the fifth reaches 0.35
    assert w.calls == 5 and r["calls"] == 5
    assert r["seconds"] == pytest.approx(0.35)


def test_run_for_calls_once_with_no_bound_and_stops_at_exact_bound():
    w = FakeWorkload("k", [], seconds=(0.1,))
    assert run_for(w, 0.0)["calls"] == 1
    w = FakeWorkload("k", [], seconds=(0.25,))
    assert run_for(w, 0.5)["calls"] == 2  # 0.5 reached exactly: no third call


def test_run_for_rate_is_total_work_over_total_time():
    # 1 s at 10 ops/s then 3 s at 2 ops/s: 16 ops in 4 s = 4 ops/s (a plain mean says 6)
    script = iter([{"seconds": 1.0, "ops_per_s": 10.0}, {"seconds": 3.0, "ops_per_s": 2.0}])
    r = run_for(lambda: next(script), 4.0)
    assert r["ops_per_s"] == pytest.approx(4.0)
    assert r["seconds"] == pytest.approx(4.0)


def test_run_for_drops_non_numeric_fields():
    r = run_for(FakeWorkload("k", []), 0.0)
    assert "label" not in r and "ops_per_s" in r


def test_run_for_rejects_workloads_that_cannot_reach_the_bound():
    with pytest.raises(ValueError, match="0 seconds"):
        run_for(lambda: {"seconds": 0.0}, 0.3)
    with pytest.raises(ValueError, match="negative"):
        run_for(lambda: {"seconds": -1.0}, 0.3)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.floats(0.01, 2.0), st.floats(0.0, 1e9)), min_size=1,
                max_size=30),
       st.floats(0.0, 3.0))
def test_run_for_property(script, min_seconds):
    calls = []

    def fn():
        s, rate = script[len(calls) % len(script)]
        calls.append((s, rate))
        return {"seconds": s, "ops_per_s": rate}

    r = run_for(fn, min_seconds)
    total = sum(s for s, _ in calls)
    # the bound is met, and the last call was needed to meet it
    assert total >= min_seconds - 1e-12
    assert len(calls) == 1 or total - calls[-1][0] < min_seconds
    assert r["calls"] == len(calls)
    assert r["ops_per_s"] == pytest.approx(sum(s * x for s, x in calls) / total, rel=1e-9,
                                           abs=1e-6)
    lo, hi = min(x for _, x in calls), max(x for _, x in calls)
    assert lo * (1 - 1e-9) - 1e-6 <= r["ops_per_s"] <= hi * (1 + 1e-9) + 1e-6


def test_alternate_interleaves_runs_k1_b1_k2_b2():
    log: list[str] = []
    k = FakeWorkload("k", log, seconds=(0.2,))  # 2 calls per run of >= 0.3 s
    b = FakeWorkload("b", log, seconds=(0.4,))  # 1 call per run
    runs = alternate({"k": k, "b": b}, Timing(repeats=3, min_seconds=0.3))
    assert log == ["k", "k", "b"] * 3
    assert [r["calls"] for r in runs["k"]] == [2, 2, 2]
    assert [r["calls"] for r in runs["b"]] == [1, 1, 1]
    assert len(runs["k"]) == len(runs["b"]) == 3


def test_measure_gives_one_entry_per_repeat():
    runs = measure(FakeWorkload("k", [], seconds=(0.1, 0.3)), Timing(4, 0.0))
    assert [r["seconds"] for r in runs] == pytest.approx([0.1, 0.3, 0.1, 0.3])


def test_stat_median_min_max():
    s = Stat.of([5, 1, 4, 2, 3])
    assert (s.median, s.min, s.max) == (3, 1, 5)
    assert Stat.of([4, 1, 2, 3]).median == 2.5  # even count: mean of the middle two
    with pytest.raises(ValueError):
        Stat.of([])


def test_ratio_is_the_median_of_per_round_ratios():
    ours = [{"r": 1.0}, {"r": 2.0}, {"r": 9.0}]
    base = [{"r": 1.0}, {"r": 4.0}, {"r": 3.0}]
    s = ratio_stat(ours, "r", base, "r")
    # per round 1, 0.5, 3 -> median 1 (the ratio of medians would be 2/3)
    assert (s.median, s.min, s.max) == (1.0, 0.5, 3.0)
    inv = ratio_stat(ours, "r", base, "r", invert=True)
    assert (inv.median, inv.min, inv.max) == (1.0, 1 / 3, 2.0)
    with pytest.raises(ValueError, match="unpaired"):
        ratio_stat(ours, "r", base[:2], "r")


def test_put_and_summary_write_key_min_max():
    res: dict = {}
    put(res, "x.per_s", Stat.of([3, 1, 2]))
    assert res == {"x.per_s": 2, "x.per_s.min": 1, "x.per_s.max": 3}
    out = summary([{"a": 1.0, "b": "s"}, {"a": 3.0, "b": "t"}, {"a": 2.0, "b": "u"}])
    assert out == {"a": 2.0, "a.min": 1.0, "a.max": 3.0}


def _args(*argv):
    ap = argparse.ArgumentParser()
    add_timing_args(ap)
    return timing_from_args(ap.parse_args(list(argv)))


def test_timing_flags():
    t = _args()
    assert (t.repeats, t.min_seconds, t.quick) == (DEFAULT_REPEATS, DEFAULT_MIN_SECONDS, False)
    assert (DEFAULT_REPEATS, DEFAULT_MIN_SECONDS) == (5, 0.3)
    q = _args("--quick")
    assert q.quick and q.repeats < DEFAULT_REPEATS and q.min_seconds < DEFAULT_MIN_SECONDS
    e = _args("--quick", "--repeats", "7", "--min-seconds", "1.5")
    assert (e.repeats, e.min_seconds, e.quick) == (7, 1.5, True)  # explicit flags win
    with pytest.raises(ValueError):
        _args("--repeats", "0")


def test_ameasure_runs_a_coroutine_workload():
    log: list[str] = []
    w = FakeWorkload("a", log, seconds=(0.2,))

    async def fn():
        await asyncio.sleep(0)
        return w()

    runs = asyncio.run(ameasure(fn, Timing(3, 0.3)))
    assert [r["calls"] for r in runs] == [2, 2, 2] and len(log) == 6


def test_write_json_creates_the_folder(tmp_path):
    path = tmp_path / "out" / "deeper" / "x.json"
    write_json(str(path), {"k": 1})
    assert json.loads(path.read_text()) == {"k": 1}
