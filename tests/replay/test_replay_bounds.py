"""What the replay keeps is bounded by the trace, never by the run: the report's trace summary
counts distinct ids without a set of every id (trace.py NOTE(summary-ids)), and the timed
replay's timeline is downsampled as it runs (report.py NOTE(bounded-timeline)) and keeps of a
finished request only what the report counts. Bounds are checked structurally or with
tracemalloc (deterministic), never by time or RSS."""

from __future__ import annotations

import tracemalloc

from kvpool.replay.report import Timeline
from kvpool.replay.timed import TimedOptions, TimedReplay
from kvpool.replay.formats import ID_LIMIT
from kvpool.replay.trace import TraceRequest, trace_summary

FRESH = 2 * ID_LIMIT  # where the replayer's fresh ids start (trace.py): no trace id is there


def _peak(fn, *args):
    """(fn(*args), the peak of memory it allocated, in bytes)."""
    tracemalloc.start()
    try:
        out = fn(*args)
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_ids_fresh_by_construction_are_counted_without_a_set():
    """An Azure / BurstGPT trace: every id a range of fresh ids. The summary made a set of
    all of them after the replay: 2.2 GB for 200k rows (~90 bytes an id)."""
    per, n = 500, 400
    reqs = [TraceRequest(i, float(i), per * 16, 1, range(FRESH + i * per, FRESH + i * per + per))
            for i in range(n)]
    summary, peak = _peak(trace_summary, reqs)
    assert summary["trace_blocks"] == summary["unique_trace_blocks"] == per * n
    assert peak < 64 * 1024  # nothing per id (a set of 200k ids is megabytes)


def test_listed_ids_are_counted_in_a_few_bytes_each():
    """A prefix trace: a shared prefix, distinct ids and padding (a tuple ending in fresh ids,
    and a range). A set of the listed ids alone took 40-80 bytes an id."""
    n = 4000
    reqs = [TraceRequest(i, float(i), 16 * 25, 1, (0, 1, *range(2 + 23 * i, 25 + 23 * i)))
            for i in range(n)]  # ids 0 .. 23 n + 1, every record sharing 0 and 1
    reqs.append(TraceRequest(n, float(n), 16 * 3, 1, (0, FRESH, FRESH + 1)))
    reqs.append(TraceRequest(n + 1, float(n), 16 * 2, 1, range(FRESH + 2, FRESH + 4)))
    summary, peak = _peak(trace_summary, reqs)
    assert summary["unique_trace_blocks"] == (23 * n + 2) + 2 + 2
    ids = summary["trace_blocks"]
    assert ids == 25 * n + 5 and peak < 12 * ids  # an array of 8 bytes an id, and a mask


def test_the_timeline_stays_within_its_cap_and_evenly_spaced():
    tl = Timeline(cap=64)
    for i in range(100_000):
        tl.add(float(i), 0.5, 0.25, i % 3)
        assert len(tl.x) <= 64
    assert tl.x == [float(i * tl.every) for i in range(len(tl.x))]  # points 0, k, 2k...
    rep = tl.downsample()
    assert rep["x"][-1] == 99_999.0 and rep["waiting"][-1] == 99_999 % 3  # the last point
    assert len({len(v) for v in rep.values()}) == 1 and 32 <= len(rep["x"]) <= 65
    short = Timeline()  # a run under the cap reports as before: every ceil(n / 500)-th point
    for i in range(1001):
        short.add(float(i), 0.0, 0.0)
    assert short.downsample()["x"] == [float(i) for i in range(0, 1001, 3)] + [1000.0]


def test_a_long_timed_run_keeps_a_bounded_timeline_and_only_counts():
    """3000 simulated steps (one request decoding 3000 tokens): the timeline held a point
    per step, and ``finished`` every request with its output token ids, until the end."""
    replay = TimedReplay(TimedOptions(num_blocks=400, max_model_len=8192))
    replay.timeline = Timeline(cap=64)
    stored = []
    report = replay.run([TraceRequest(0, 0.0, 5, 3000, (1,)),
                         TraceRequest(1, 0.0, 40, 2, (2, 3, 4))],
                        progress=lambda done, _: stored.append(len(replay.timeline.x)))
    assert report["steps"] == replay.timeline.added == len(stored) >= 3000
    assert max(stored) <= 64
    assert report["timeline"]["x"][-1] == report["makespan_s"]
    kept = replay.outcomes
    assert (len(kept.ttft), kept.ignored, kept.output_tokens) == (2, 0, 3002)
    assert all(type(v) is float for v in kept.ttft + kept.queue + kept.e2e)
    assert not hasattr(kept, "__dict__")  # slots: nothing else, no request, is held
