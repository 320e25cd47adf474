"""bench/fault_hits.py's windows: the pairs of each fault window, split at ``early`` seconds
(before the cluster's own failover), failed pairs counted apart from misses."""

from __future__ import annotations

from bench.fault_hits import HitProbe


def test_windows_split_each_fault_and_keep_failures_apart():
    p = HitProbe(["http://127.0.0.1:1", "http://127.0.0.1:2"])
    marks = {"sigstop": 10.0, "sigcont": 15.0, "kill": 30.0, "restart": 35.0}
    p.samples = [(1.0, True), (2.0, True), (9.9, False),  # baseline
                 (10.5, True), (11.0, False), (11.9, None),  # first 2 s of the SIGSTOP
                 (12.0, True), (14.9, True),  # the rest of it
                 (20.0, False),  # between the faults: in no window
                 (30.0, False), (34.0, True), (35.0, True)]  # the kill; 35.0 is past it
    w = p.windows(marks, early=2.0)
    assert w["baseline"] == {"pairs": 3, "hits": 2, "failed": 0, "hit_ratio": 0.667}
    assert w["stop_first_2s"] == {"pairs": 3, "hits": 1, "failed": 1, "hit_ratio": 0.5}
    assert w["stop_rest"] == {"pairs": 2, "hits": 2, "failed": 0, "hit_ratio": 1.0}
    assert w["kill_first_2s"] == {"pairs": 1, "hits": 0, "failed": 0, "hit_ratio": 0.0}
    assert w["kill_rest"] == {"pairs": 1, "hits": 1, "failed": 0, "hit_ratio": 1.0}


def test_an_empty_window_has_no_ratio():
    p = HitProbe(["http://127.0.0.1:1", "http://127.0.0.1:2"])
    assert p.window(0.0, 1.0) == {"pairs": 0, "hits": 0, "failed": 0, "hit_ratio": None}
