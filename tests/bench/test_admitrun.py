"""bench.admitrun (a research policy): admitlru whose miniatures score release runs as the
pool's lookup does; its structure under random operations, the run scoring, and the trace
where block-by-block scoring went below LRU."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from bench.admitlru import AdmitLRUPolicy, AdmitTuner
from bench.admitrun import AdmitRunPolicy
from bench.policies import CANDIDATES
from kvpool.core.eviction import POLICIES, LRUPolicy
from kvpool.core.eviction.admit_tuner import MiniAdmit
from kvpool.core.eviction.classlru import NO_MISS
from kvpool.replay.loop import simulate
from tests.bench.policy_ops import OPS, assert_chain_leaves_deepest_first, evict_members
from tests.core.test_tuner import stranded


@settings(max_examples=80, deadline=None)
@given(ops=OPS)
def test_tuned_it_evicts_members_and_keeps_invariants(ops):
    evict_members(AdmitRunPolicy(16, sketch_min_bits=8), ops,
                  check=lambda p, m: len(p) == len(m))


@pytest.mark.parametrize("cfg", [AdmitTuner.GRID[0], AdmitTuner.GRID[-1]])
def test_a_chain_is_evicted_child_first(cfg):
    assert_chain_leaves_deepest_first(AdmitRunPolicy(64, sketch_min_bits=8, cfg=cfg))


@pytest.mark.parametrize("cfg", [(0.0, 1.0, False), (0.0, 0.2, True)])
def test_a_miniature_counts_a_runs_leading_hits_only(cfg):
    """Tail first in, hits from the head up to the first block missing, none past ``miss``:
    the pool's lookup, whatever the window does with the blocks afterwards."""
    m = MiniAdmit(8, cfg, lambda c: 2)
    assert m.access_run([(2, 1, 2), (0, 1, 0)], NO_MISS) == 0  # holds 0 and 2 now
    assert m.access_run([(2, 1, 2), (1, 1, 1), (0, 1, 0)], NO_MISS) == 1  # 1 is missing
    assert m.access_run([(2, 1, 2), (1, 1, 1), (0, 1, 0)], NO_MISS) == 3
    assert m.access_run([(2, 1, 2), (1, 1, 1), (0, 1, 0)], 1) == 2  # depth 2 is new content
    assert m.hits == 6
    m.check_invariants()


@pytest.mark.parametrize("cap", [128, 256])
def test_content_no_request_can_reach_buys_no_configuration(cap):
    """tests/core/test_tuner.py's trace: popular documents behind fresh first blocks.
    admitlru, scoring block by block, left LRU for them (327 hits against LRU's 1304 at
    128 blocks); admitrun, scoring runs, keeps at least LRU's hits."""
    reqs = stranded()
    lru = simulate(reqs, LRUPolicy(cap), cap)[0]
    p = AdmitRunPolicy(cap)
    assert simulate(reqs, p, cap)[0] >= lru
    assert simulate(reqs, AdmitLRUPolicy(cap), cap)[0] < lru
    p.check_invariants()


def test_admitrun_is_a_research_candidate_not_a_product_choice():
    assert CANDIDATES["admitrun"] is AdmitRunPolicy and "admitrun" not in POLICIES
