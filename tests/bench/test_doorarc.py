"""bench.doorarc (a research policy) and its GhostFilter: properties of the structure (the
generic model-checking machine in tests/core/test_eviction.py also drives doorarc through
every PrefixIndex call), and bench.policies reporting it as a candidate."""

from __future__ import annotations

from zlib import crc32

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.doorarc import DoorARCPolicy
from bench.doorarc_ghosts import GhostFilter
from bench.policies import CANDIDATES, main
from kvpool.core.eviction import POLICIES, make_policy
from kvpool.errors import ConfigError, InvariantError
from kvpool.replay.loop import simulate
from tests.bench.policy_ops import OPS, evict_members, evicts_like_lru, revive_chain
from tests.core.policy_helpers import key

@settings(max_examples=300, deadline=None)
@given(ops=OPS)
def test_at_zero_biases_the_order_is_exactly_lru(ops):
    """Both biases at 0 make every key the release stamp: LRU's order, whatever the queues."""
    d = DoorARCPolicy(16, sketch_min_bits=8)

    def neutral():
        d.bias = d.cbias = 0.0

    evicts_like_lru(d, ops, neutral)


@settings(max_examples=80, deadline=None)
@given(ops=OPS)
def test_evict_returns_members_and_invariants_hold(ops):
    # a revival without on_hit: another content after it, a plain insert
    evict_members(DoorARCPolicy(16, sketch_min_bits=8), ops, hit=False, check=lambda d, m: (
        len(d) == len(m) and d.bias >= 0 and d.cbias >= 0))


def test_a_chain_is_evicted_child_first():
    """A revived chain released tail first, then a flood of new content: the chain's blocks
    leave deepest first, so no cached block is ever orphaned of its prefix."""
    d = DoorARCPolicy(64, sketch_min_bits=8)
    chain = [0, 1, 2, 3]  # block i holds content 100 + i, depth i
    revive_chain(d, chain)
    for b in range(10, 40):
        d.insert(b, key(b), 0, 0.0)
    order = [d.evict() for _ in range(len(d))]
    chain_order = [b for b in order if b in chain]
    assert chain_order == [3, 2, 1, 0]


def test_ghost_hits_move_the_biases_the_arc_way():
    """A ghost of R coming back lowers F's bias; a ghost of F raises it."""
    d = DoorARCPolicy(4, sketch_min_bits=8)
    for b in range(4):  # four blocks of F content (each revived once)
        d.insert(b, key(b), 0, 0.0)
        d.on_hit(key(b))
        d.remove(b)
        d.insert(b, key(b), 0, 0.0)
    for i in range(4):  # new content pushes them out (into F's ghosts)
        victim = d.evict()
        d.insert(victim, key(50 + i), 0, 0.0)
    assert d.bias == 0.0
    # content 50 leaves R; content 0 left F one horizon (4 evictions) ago and is forgotten,
    # content 1 left F three evictions ago: a ghost of F
    d.insert(d.evict(), key(1), 0, 0.0)
    raised = d.bias
    assert raised > 0.0
    d.insert(d.evict(), key(51 - 1), 0, 0.0)  # R's oldest goes; content 50 was R's ghost
    assert d.bias < raised
    d.check_invariants()


def test_ghost_filter_remembers_one_horizon_and_each_ghost_once():
    g = GhostFilter(8)
    g.add(crc32(b"a"), 0)
    g.add(crc32(b"b"), 1)
    assert g.count == [1, 1, 0]
    assert g.take(crc32(b"a")) == 0
    assert g.take(crc32(b"a")) == -1  # taken: no longer a ghost
    assert g.count == [0, 1, 0]
    for i in range(8):  # a horizon of further evictions: b is forgotten
        g.add(crc32(b"x%d" % i), 2)
    assert g.take(crc32(b"b")) == -1
    assert g.count == [0, 0, 8]
    g.check_invariants()


@settings(max_examples=60, deadline=None)
@given(ops=st.lists(st.tuples(st.booleans(), st.integers(0, 30), st.integers(0, 2)),
                    max_size=200), cap=st.integers(1, 40))
def test_ghost_counts_match_the_ring(ops, cap):
    g = GhostFilter(cap)
    for add, h, q in ops:
        c = crc32(h.to_bytes(4, "little"))
        if add:
            g.add(c, q)
        else:
            assert g.take(c) in (-1, 0, 1, 2)
        assert 0 <= g.count[0] + g.count[1] + g.count[2] <= g.horizon
    g.check_invariants()


def test_ghost_filter_check_catches_a_bad_count():
    g = GhostFilter(8)
    g.add(1, 0)
    g.count[0] += 1
    with pytest.raises(InvariantError):
        g.check_invariants()


def test_doorarc_replay_keeps_invariants():
    reqs = [[i % 7, 100 + i % 13, 1000 + i] for i in range(600)]
    p = DoorARCPolicy(30, sketch_min_bits=8)
    hits, blocks = simulate(reqs, p, 30)
    assert 0 < hits <= blocks and len(p) == 30
    p.check_invariants()


def test_doorarc_is_a_research_candidate_not_a_product_choice():
    assert CANDIDATES["doorarc"] is DoorARCPolicy and "doorarc" not in POLICIES
    with pytest.raises(ConfigError):  # --eviction-policy doorarc names the valid choices
        make_policy("doorarc", 8)


def test_bench_policies_reports_doorarc_with_its_costs(tmp_path, capsys):
    res = main(["--traces", "scan_mix", "--seeds", "3", "--capacities", "200",
                "--policies", "lru", "--baselines", "--candidates", "doorarc", "--no-opt",
                "--salts", "2", "--quick", "--json", str(tmp_path / "p.json")])
    rates = res["traces"]["scan_mix@3"]["hit_rate"]
    assert set(rates) == {"lru", "doorarc"} and 0.0 < rates["doorarc"][200] <= 1.0
    assert set(res["traces"]["scan_mix@3"]["salt_spread"]) == {"doorarc"}
    assert set(res["ops"]) == {"lru", "doorarc"}  # per-call cost of the block protocol
    assert "doorarc" in capsys.readouterr().out
