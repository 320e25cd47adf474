"""bench/s3fifo_diag.py: per-request hits add up to each policy's replayed hits, and every
attribution (per kind, per gap) sums to those totals (docs/benchmarks.md "`call_center`: what
S3-FIFO keeps")."""

from __future__ import annotations

import functools

import pytest

from bench import s3fifo_diag as diag
from bench.heldout_call_center import generate
from bench.policies import hits

CAP = 200


@functools.cache
def _cell():
    return diag.diag_cell(1, CAP, 0.01)


def _fresh(pol):
    """A fresh policy of ``pol``'s kind, built here rather than by ``new_cache``."""
    return {"lru": lambda: diag.make_policy("lru", CAP),
            "bonus4": lambda: diag.AdaptivePolicy(CAP, cfg=diag.BONUS4),
            "s3fifo1": lambda: diag.S3FIFO1(CAP), "s3fifo": lambda: diag.S3FIFO(CAP)}[pol]()


@functools.cache
def _totals():
    """Each policy's hits by ``bench.policies.hits`` (``simulate`` / ``replay``)."""
    reqs = generate(1, 0.01).trace
    return {p: hits(reqs, _fresh(p), CAP)[0] for p in diag.POLICIES}


@pytest.mark.parametrize("pol", diag.POLICIES)
def test_request_hits_sum_to_the_replay_loops(pol):
    """``request_hits`` is the replay loop per request: its sum is ``bench.policies.hits``
    on a fresh policy of the same kind."""
    reqs = generate(1, 0.01).trace
    per = diag.request_hits(reqs, diag.new_cache(pol, CAP))
    assert len(per) == len(reqs)
    assert all(0 <= h <= len(r) for h, r in zip(per, reqs))
    assert sum(per) == _totals()[pol] > 0
    if pol in ("lru", "bonus4"):  # a bare block policy is wrapped the same way
        assert diag.request_hits(reqs, _fresh(pol), CAP) == per


@pytest.mark.parametrize("table", ["kind", "prefix_gap", "head_gap"])
def test_attribution_sums_to_each_policys_hits(table):
    """Every table's rows add up to the cell's requests, blocks and each policy's hits."""
    res = _cell()
    rows = res[table]
    assert len(rows) >= 3
    assert sum(r["requests"] for r in rows.values()) == res["requests"]
    assert sum(r["blocks"] for r in rows.values()) == res["blocks"]
    for p in diag.POLICIES:
        assert sum(r[p] for r in rows.values()) == res["hits"][p] == _totals()[p]
        assert all(r[p] <= r["blocks"] for r in rows.values())
    if table != "kind":
        assert set(rows) <= set(diag.GAPS)
        assert all(rows["new"][p] == 0 for p in diag.POLICIES)  # nothing sent before


def test_buckets():
    assert [diag.bucket(g) for g in (None, 0.0, 59.9, 60.0, 3599.0, 86399.0, 86400.0)] == [
        "new", "< 1 min", "< 1 min", "< 1 h", "< 1 h", "< 1 day", "more"]


def test_prefix_gap_times_the_deepest_block_sent_before():
    """Request 2 re-sends request 0's prefix [1, 2] (last sent at t=0, then 1 again at t=5
    by request 1): its gap is 10 - 0, not 10 - 5; its head's gap is 10 - 5."""
    reqs = [[1, 2, 3], [1, 9], [1, 2, 7]]
    times = [0.0, 5.0, 10.0]
    assert diag.prefix_gaps(reqs, times) == [None, 5.0, 10.0]
    assert diag.head_gaps(reqs, times) == [None, 5.0, 5.0]


@pytest.mark.parametrize("table", ["segment", "segment_gap"])
def test_segment_hits_sum_to_each_policys_hits(table):
    """Per segment kind (overall and per prefix gap), the blocks add up to the cell's blocks
    and each policy's hits to its total; every kind is one the module names."""
    res = _cell()
    rows = res[table]
    assert {"system", "persona", "sop", "crm", "transcript"} <= {k.split()[0] for k in rows}
    assert all(k.split()[0] in diag.SEG_KINDS for k in rows)
    assert sum(r["blocks"] for r in rows.values()) == res["blocks"]
    for p in diag.POLICIES:
        assert sum(r[p] for r in rows.values()) == res["hits"][p] == _totals()[p]
        assert all(0 <= r[p] <= r["blocks"] for r in rows.values())
    if table == "segment_gap":
        assert all(k.split(" ", 1)[1] in diag.GAPS for k in rows)
        assert all(r[p] == 0 for k, r in rows.items() if k.endswith(" new")
                   for p in diag.POLICIES)


def test_block_runs_follow_the_segments():
    """Each request's runs end at its full blocks (check_full_blocks' count); a block goes to
    the segment holding its last token, so a 20-token system prompt and a 30-token persona
    make blocks [system, persona, persona] for 50 tokens (3 full blocks)."""
    from bench import s3fifo_segments as seg
    run = generate(1, 0.01)
    kinds = seg.segment_kinds(run)
    for ids, m in zip(run.trace, run.meta):
        runs = seg.block_runs(m[3], kinds)
        assert (runs[-1][0] if runs else 0) == len(ids)
    sys_id, per_id = run.system["voice"][0], run.clients[0].persona.current[0][0]
    runs = seg.block_runs([(sys_id, 20), (per_id, 30)], kinds)
    assert runs == [(1, "system"), (3, "persona")]
    assert seg.cut(runs, 2) == {"system": 1, "persona": 1}
    assert seg.cut(runs, 0) == {}
