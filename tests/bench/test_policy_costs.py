"""bench.policy_costs: interleaved per-call costs and memory after a turnover (figures are
checked for shape and order, never for speed)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from bench.policies import bytes_per_block, op_costs
from bench.policy_costs import OPS, main, op_costs_at


def test_main_reports_a_median_and_spread_per_call_and_policy(tmp_path, capsys):
    out = tmp_path / "costs.json"
    res = main(["--policies", "lru", "adaptive", "--capacities", "300", "--rounds", "2",
                "--memory-blocks", "400", "--json", str(out)])
    assert json.loads(out.read_text()) == json.loads(json.dumps(res))
    for pol in ("lru", "adaptive"):
        for op in OPS:
            k = f"{pol}@300.{op}_ns"
            assert 0 < res[f"{k}.min"] <= res[k] <= res[f"{k}.max"], k
        assert res[f"{pol}.bytes_per_block_after_turnover"] > 0
    assert "round 2 of 2" in capsys.readouterr().out


def test_the_exact_ghost_costs_more_memory_than_the_table():
    """After a turnover the exact ghost holds a pool's worth of CRCs; the GhostTable holds
    three bytes per block whether full or not."""
    n = 20000
    assert bytes_per_block("ghostpair", n, 1) > bytes_per_block("adaptive", n, 1) + 40
    assert bytes_per_block("lru", n, 1) < 20


def test_baseline_runs_both_checkouts_in_fresh_interpreters_in_the_same_rounds(tmp_path):
    """--baseline DIR: each arm runs in its own interpreter per round on its own checkout;
    here DIR is this checkout, so both arms report every call (never compared for speed)."""
    root = str(Path(__file__).resolve().parents[2])
    res = main(["--policies", "lru", "--capacities", "300", "--rounds", "2",
                "--memory-blocks", "0", "--baseline", root])
    for arm in ("lru@300", "lru@300@base"):
        for op in OPS:
            k = f"{arm}.{op}_ns"
            assert 0 < res[f"{k}.min"] <= res[k] <= res[f"{k}.max"], k
    assert "lru.bytes_per_block_after_turnover" not in res


def test_op_costs_at_reads_the_named_checkout(tmp_path):
    """A checkout without bench.policies fails loudly instead of measuring this one."""
    with pytest.raises(subprocess.CalledProcessError):
        op_costs_at(str(tmp_path), "lru", 300, 150, 0)


def test_warm_keys_time_adaptive_as_lru_and_the_default_on_the_cold_duel():
    """op_costs fills with one-off content: the first eviction comes before any hit, so
    adaptive runs on NOTE(cold)'s duel; warm, a hit comes first and it stays LRU. --warm
    reports both states in the same rounds."""
    assert op_costs("adaptive", 300, 150, 0)["cfg"] == [0.0, 0.01, True]
    assert op_costs("adaptive", 300, 150, 0, warm=1)["cfg"] == [0.0, 1.0, False]
    assert "cfg" not in op_costs("lru", 300, 150, 0)
    res = main(["--policies", "adaptive", "--capacities", "300", "--rounds", "2",
                "--memory-blocks", "0", "--warm"])
    for arm in ("adaptive@300", "adaptive@300@warm"):
        for op in OPS:
            assert 0 < res[f"{arm}.{op}_ns.min"] <= res[f"{arm}.{op}_ns.max"], arm
