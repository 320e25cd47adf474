"""bench.admitlru (a research policy): properties of the structure for every configuration the
tuner may choose, its miniatures, and bench.policies reporting it as a candidate."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.admitlru import AdmitLRUPolicy, AdmitTuner
from bench.baselines import LRU
from bench.policies import CANDIDATES
from kvpool.core.eviction import POLICIES, ClassLRUPolicy, LRUPolicy, make_policy
from kvpool.core.eviction.admit_tuner import WIN, MiniAdmit
from kvpool.errors import ConfigError
from kvpool.replay.loop import simulate
from tests.bench.policy_ops import (OPS, assert_chain_leaves_deepest_first, drive, evict_members,
                                     evicts_like_lru)

CFGS = st.sampled_from(AdmitTuner.GRID)


@settings(max_examples=200, deadline=None)
@given(ops=OPS)
def test_no_window_and_no_bonus_is_exactly_lru(ops):
    evicts_like_lru(AdmitLRUPolicy(16, sketch_min_bits=8, cfg=(0.0, 1.0, False)), ops)


@settings(max_examples=100, deadline=None)
@given(ops=OPS, bonus=st.sampled_from([0.25, 1.0, 8.0]))
def test_no_window_is_classlru_with_that_bonus(ops, bonus):
    a = AdmitLRUPolicy(16, sketch_min_bits=8, cfg=(bonus, 1.0, False))
    c = ClassLRUPolicy(16, sketch_min_bits=8, bonus=bonus)
    for got, want in drive(ops, [a, c]):
        assert got == want


@settings(max_examples=150, deadline=None)
@given(ops=OPS, cfg=CFGS)
def test_every_configuration_evicts_members_and_keeps_invariants(ops, cfg):
    evict_members(AdmitLRUPolicy(16, sketch_min_bits=8, cfg=cfg), ops,
                  check=lambda p, m: len(p) == len(m) and p._nw == len(p.queue(WIN)))


@settings(max_examples=60, deadline=None)
@given(ops=OPS)
def test_tuned_it_evicts_members_and_keeps_invariants(ops):
    evict_members(AdmitLRUPolicy(16, sketch_min_bits=8), ops, check=lambda p, m: len(p) == len(m))


@pytest.mark.parametrize("cfg", AdmitTuner.GRID)
def test_a_chain_is_evicted_child_first(cfg):
    """A chain revived twice, released tail first, then new content floods the pool: its
    blocks leave deepest first under every configuration, never orphaning a cached block."""
    assert_chain_leaves_deepest_first(AdmitLRUPolicy(64, sketch_min_bits=8, cfg=cfg))


def test_the_duel_keeps_part_of_a_loop_longer_than_the_pool():
    reqs = [[i % 300] for i in range(3000)]  # a loop of 300 ids through 100 blocks
    assert simulate(reqs, LRUPolicy(100), 100)[0] == 0
    hits, _ = simulate(reqs, AdmitLRUPolicy(100, sketch_min_bits=12, cfg=(0.0, 0.01, True)),
                       100)
    assert hits > 0.2 * len(reqs)  # the incumbent wins the tie: main is frozen


def test_the_filter_keeps_a_hot_set_under_a_scan():
    """A hot set reused every other request survives a stream of one-off blocks in main,
    where LRU flushes it."""
    reqs = []
    for i in range(4000):
        reqs.append([i // 2 % 40] if i % 2 else [10_000 + i])
    lru, _ = simulate(reqs, LRUPolicy(50), 50)
    hits, _ = simulate(reqs, AdmitLRUPolicy(50, sketch_min_bits=12, cfg=(0.0, 0.1, False)), 50)
    assert lru == 0 and hits > 0.8 * 2000


@settings(max_examples=60, deadline=None)
@given(ids=st.lists(st.integers(0, 30), max_size=300), cap=st.integers(2, 12))
def test_the_lru_miniature_is_lru(ids, cap):
    mini = MiniAdmit(cap, (0.0, 1.0, False), lambda c: 0)
    ref = LRU(cap)
    hits = 0
    for h in ids:
        hit = h in ref
        assert mini.access(h, 0) == hit
        hits += hit
        ref.access(h)
    assert mini.hits == hits
    mini.check_invariants()


@settings(max_examples=40, deadline=None)
@given(ids=st.lists(st.integers(0, 40), max_size=300), cfg=CFGS, cap=st.integers(1, 12))
def test_miniatures_stay_within_capacity(ids, cfg, cap):
    counts: dict[int, int] = {}
    mini = MiniAdmit(cap, cfg, lambda c: counts.get(c, 0))
    for h in ids:
        counts[h] = counts.get(h, 0) + 1
        mini.access(h, min(4, counts[h] - 1))
        assert len(mini.where) <= cap
    mini.check_invariants()


def test_tuned_it_leaves_lru_for_the_duel_on_a_loop():
    reqs = [[i % 3000 * 7, i % 3000 * 7 + 1] for i in range(40000)]
    p = AdmitLRUPolicy(2000, sketch_min_bits=12)
    hits, _ = simulate(reqs, p, 2000)
    assert p.duel and p.share < 1.0 and hits > 0
    p.check_invariants()


def test_a_window_configuration_is_chosen_only_while_it_leads_every_plain_one():
    """NOTE(lead): the duel passes against LRU, but a bonus configuration is ahead of it in
    the fast window, so the tuner stays; once the duel leads every plain one, the duel."""
    t = AdmitTuner(4000, lambda c: 0)
    duel = AdmitTuner.GRID.index((0.0, 0.01, True))
    passed = [i == duel for i in range(len(AdmitTuner.GRID))]
    gain = [0.0] * len(passed)
    for i in range(len(passed)):
        t._mean[0][duel][i] = 1.0
    t._mean[0][duel][6] = -1.0  # bonus 8 is ahead of the duel
    assert t._nearest(passed, gain, 0) == 0
    t._mean[0][duel][6] = 1.0
    assert t._nearest(passed, gain, 0) == duel


def test_admitlru_is_a_research_candidate_not_a_product_choice():
    assert CANDIDATES["admitlru"] is AdmitLRUPolicy and "admitlru" not in POLICIES
    assert all(g[2] is not None for g in AdmitTuner.GRID)  # no ghost filter in its grid
    with pytest.raises(ConfigError):
        make_policy("admitlru", 8)
