"""bench.wintune (a research policy): properties of the structure for every configuration the
tuner may choose (the generic model-checking machine in tests/core/test_eviction.py also
drives it, tuned, through every PrefixIndex call), its miniatures, and bench.policies and
bench.heldout reporting it as a candidate."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.baselines import LRU, WTinyLFU, replay
from bench.heldout import main as heldout_main
from bench.policies import CANDIDATES
from bench.wintune import MiniWTinyLFU, WindowTuner, WinTunePolicy
from kvpool.core.eviction import POLICIES, LRUPolicy, make_policy
from kvpool.errors import ConfigError
from kvpool.replay.loop import simulate
from tests.bench.policy_ops import (OPS, assert_chain_leaves_deepest_first, evict_members,
                                     evicts_like_lru, same_hits)

CFGS = st.sampled_from(WindowTuner.GRID)


@settings(max_examples=200, deadline=None)
@given(ops=OPS)
def test_a_full_window_without_the_duel_is_exactly_lru(ops):
    evicts_like_lru(WinTunePolicy(16, sketch_min_bits=8, cfg=(1.0, False)), ops)


@settings(max_examples=150, deadline=None)
@given(ops=OPS, cfg=CFGS)
def test_every_configuration_evicts_members_and_keeps_invariants(ops, cfg):
    evict_members(WinTunePolicy(16, sketch_min_bits=8, cfg=cfg), ops,
                  check=lambda p, m: len(p) == len(m) == sum(p._n))


@pytest.mark.parametrize("cfg", WindowTuner.GRID)
def test_a_chain_is_evicted_child_first(cfg):
    """A chain revived twice, released tail first, then new content floods the pool: its
    blocks leave deepest first under every configuration, never orphaning a cached block."""
    assert_chain_leaves_deepest_first(WinTunePolicy(64, sketch_min_bits=8, cfg=cfg))


def test_the_duel_keeps_part_of_a_loop_longer_than_the_pool():
    reqs = [[i % 300] for i in range(3000)]  # a loop of 300 ids through 100 blocks
    assert simulate(reqs, LRUPolicy(100), 100)[0] == 0
    hits, _ = simulate(reqs, WinTunePolicy(100, sketch_min_bits=12, cfg=(0.01, True)), 100)
    assert hits > 0.2 * len(reqs)  # the incumbent wins the tie: main is frozen


@settings(max_examples=60, deadline=None)
@given(ids=st.lists(st.integers(0, 30), max_size=300), cap=st.integers(2, 12))
def test_a_full_window_miniature_is_lru(ids, cap):
    same_hits(MiniWTinyLFU(cap, (1.0, False), lambda c: 0), LRU(cap), ids)


@settings(max_examples=40, deadline=None)
@given(ids=st.lists(st.integers(0, 40), max_size=300), cfg=CFGS, cap=st.integers(1, 12))
def test_miniatures_stay_within_capacity(ids, cfg, cap):
    counts: dict[int, int] = {}
    mini = MiniWTinyLFU(cap, cfg, lambda c: counts.get(c, 0))
    for h in ids:
        counts[h] = counts.get(h, 0) + 1
        mini.access(h)
        assert len(mini.win) + len(mini.prob) + len(mini.prot) <= cap
    mini.check_invariants()


def test_tuned_it_leaves_lru_for_the_duel_on_a_loop():
    """LRU hits nothing on a loop longer than the pool; the tuner moves to a duelling window
    (late: a quarter of W-TinyLFU's hits here, the start spent as LRU)."""
    reqs = [[i % 3000 * 7, i % 3000 * 7 + 1] for i in range(40000)]
    p = WinTunePolicy(2000, sketch_min_bits=12)
    hits, _ = simulate(reqs, p, 2000)
    assert p.duel and p.share < 1.0
    assert 0 < hits < replay(reqs, WTinyLFU(2000))[0]
    p.check_invariants()


def test_wintune_is_a_research_candidate_not_a_product_choice():
    assert CANDIDATES["wintune"] is WinTunePolicy and "wintune" not in POLICIES
    with pytest.raises(ConfigError):
        make_policy("wintune", 8)


def test_bench_heldout_reports_only_the_named_candidates(tmp_path, capsys):
    res = heldout_main(["--shapes", "tool_agent", "--seeds", "1", "--capacities", "300",
                        "--scale", "0.05", "--candidates", "wintune",
                        "--json", str(tmp_path / "h.json")])
    rates = res["cells"]["tool_agent@1@300"]
    assert "wintune" in rates and "follow" not in rates and 0.0 <= rates["wintune"] <= 1.0
    assert set(res["below_lru"]) == {*POLICIES, "wintune"} - {"lru"}
    assert "wintune below lru" in capsys.readouterr().out
