"""A small bench/remote_faults.py run: one real replica behind the real router, stress http
through the router, Redis SIGSTOPped, SIGCONTed, killed -9 and restarted empty.

Asserts what must hold on any machine: no failed request, no leaked block, no invariant
violation, greedy outputs unchanged, the breaker opened for each fault and closed again. The
only time bounds are generous ones (a loaded 2-core box); the figures are bench output."""

from __future__ import annotations

import os

import pytest

from bench import remote_faults
from bench.redis_servers import REDIS_SERVER


def test_redis_faults_under_load_fail_nothing_and_leak_nothing():
    if not os.path.exists(REDIS_SERVER):
        pytest.fail(f"{REDIS_SERVER} is missing: apt-get install redis-server (.ci/run does)")
    # alone on 2 cores: the breaker opens ~0.3 s into the stop and closes ~1.0 s after the
    # restart; the load runs baseline + stop + 2 * after + down + 1 s
    args = remote_faults.argparse.Namespace(replicas=1, clients=2, baseline=1.0, stop=1.5,
                                            after=2.0, down=1.0, probe_interval=0.1, seed=0,
                                            json=None)
    r = remote_faults.run(args)
    assert r["failed_requests"] == 0, r["stress"]["failure_details"]
    assert r["stress"]["unexpected_5xx"] == 0
    assert r["stress"]["ok"] > 0 and r["faults"]["baseline_probes"] > 0
    assert r["leaked_blocks"] == 0, r["drain"]
    assert r["drain"]["invariant_violations"] == 0
    assert r["drain"]["requests_after_drain"] == r["drain"]["queue_slots_after_drain"] == 0
    assert r["stress"]["greedy_mismatches"] == 0
    f = r["faults"]
    for fault in ("stop", "kill"):
        assert f[f"{fault}_breaker_open_after_s"] is not None, f  # the breaker did open
        assert f[f"{fault}_recovery_s"] is not None and f[f"{fault}_recovery_s"] < 10, f
    # the hung Redis costs each caller one deadline, not redis-py's 30 s
    assert f["stop_opening_ttft_max_ms"] is None or f["stop_opening_ttft_max_ms"] < 10_000
