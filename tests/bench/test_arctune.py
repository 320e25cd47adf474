"""bench.arctune (a research policy): its ARC mode, ghosts and miniature, and every tuner
configuration's invariants (the generic model-checking machine in tests/core/test_eviction.py
also drives it, tuned, through every PrefixIndex call)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.arctune import ARC_CFG, ArcTunePolicy, ArcTuner, MiniARC, ghost_filter
from bench.baselines import ARC
from bench.policies import CANDIDATES
from bench.wintune import PROTECTED, WINDOW
from kvpool.core.eviction import POLICIES, make_policy
from kvpool.errors import ConfigError
from tests.bench.policy_ops import OPS, evict_members, evicts_like_lru, same_hits
from tests.core.policy_helpers import key


@settings(max_examples=150, deadline=None)
@given(ops=OPS, cfg=st.sampled_from(ArcTuner.GRID))
def test_every_configuration_evicts_members_and_keeps_invariants(ops, cfg):
    evict_members(ArcTunePolicy(16, sketch_min_bits=8, cfg=cfg), ops,
                  check=lambda p, m: len(p) == len(m) == sum(p._n) and p._p >= 0)


@settings(max_examples=100, deadline=None)
@given(ops=OPS)
def test_lru_first_is_exactly_lru(ops):
    evicts_like_lru(ArcTunePolicy(16, sketch_min_bits=8, cfg=(1.0, False)), ops)


def test_in_arc_mode_a_ghost_returns_to_main_and_moves_the_target():
    p = ArcTunePolicy(8, sketch_min_bits=8, cfg=ARC_CFG)
    for b in range(8):
        p.insert(b, key(b), 0, 0.0)
    for h in range(100, 104):  # contents 0..3 leave the window: window ghosts
        p.insert(p.evict(), key(h), 0, 0.0)
    assert p._p == 0.0
    b = p.evict()
    p.insert(b, key(1), 0, 0.0)  # a window ghost comes back: to main, the target grows
    assert p._where[b] == PROTECTED and p._p >= 1.0
    raised = p._p
    order = [p.evict() for _ in range(8)]  # the window drains first, main's block last
    assert order[-1] == b
    p.insert(b, key(1), 0, 0.0)  # now a ghost of main: the window's target shrinks
    assert p._where[b] == PROTECTED and p._p < raised
    p.check_invariants()


def test_a_revival_from_the_window_goes_to_main_in_arc_mode_only():
    for cfg, want in ((ARC_CFG, PROTECTED), ((1.0, False), WINDOW), ((0.05, True), WINDOW)):
        p = ArcTunePolicy(8, sketch_min_bits=8, cfg=cfg)
        p.insert(0, key(5), 0, 0.0)
        p.on_hit(key(5))
        p.remove(0)
        p.insert(0, key(5), 0, 0.0)
        assert p._where[0] == want, cfg


@settings(max_examples=60, deadline=None)
@given(ids=st.lists(st.integers(0, 30), max_size=300), cap=st.integers(1, 12))
def test_the_arc_miniature_is_bench_baselines_arc(ids, cap):
    same_hits(MiniARC(cap), ARC(cap), ids)


def test_ghosts_remember_one_pool_of_evictions_in_a_wider_table():
    g = ghost_filter(1000)
    assert g.horizon == 1000 and len(g.table) >= 2000 and len(g.ring) == 1000
    g.add(7, WINDOW)
    assert g.take(7) == WINDOW and g.take(7) == -1
    g.check_invariants()


def test_arctune_is_a_research_candidate_not_a_product_choice():
    assert CANDIDATES["arctune"] is ArcTunePolicy and "arctune" not in POLICIES
    with pytest.raises(ConfigError):
        make_policy("arctune", 8)
