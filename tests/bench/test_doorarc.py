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
from kvpool.core.eviction import POLICIES, LRUPolicy, make_policy, simulate
from kvpool.errors import ConfigError, InvariantError
from tests.core.policy_helpers import key

# (op, block, content): 0 = release new content, 1 = revive (hit + re-release), 2 = evict
OPS = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 15), st.integers(0, 40)),
               max_size=120)


def _drive(ops, policies, before_evict=None):
    """Apply ``ops`` to every policy in ``policies`` alike; yields each evict's victims."""
    content: dict[int, bytes] = {}
    for op, b, h in ops:
        first = policies[0]
        if op == 0 and b not in first:
            if b in content:  # the block's old content was evicted: it is free again
                content.pop(b)
            content[b] = key(h)
            for p in policies:
                p.insert(b, key(h), 0, 0.0)
        elif op == 1 and b in first:
            for p in policies:
                p.on_hit(content[b])
                p.remove(b)
                p.insert(b, content[b], 0, 0.0)
        elif op == 2 and len(first):
            if before_evict is not None:
                before_evict()
            yield [p.evict() for p in policies]


@settings(max_examples=300, deadline=None)
@given(ops=OPS)
def test_at_zero_biases_the_order_is_exactly_lru(ops):
    """Both biases at 0 make every key the release stamp: LRU's order, whatever the queues."""
    d, lru = DoorARCPolicy(16, sketch_min_bits=8), LRUPolicy(16)

    def neutral():
        d.bias = d.cbias = 0.0

    for got, want in _drive(ops, [d, lru], neutral):
        assert got == want
    d.check_invariants()
    assert len(d) == len(lru)


@settings(max_examples=80, deadline=None)
@given(ops=OPS)
def test_evict_returns_members_and_invariants_hold(ops):
    d = DoorARCPolicy(16, sketch_min_bits=8)
    members: set[int] = set()
    for op, b, h in ops:
        if op == 0 and b not in d:
            d.insert(b, key(h), 0, 0.0)
            members.add(b)
        elif op == 1 and b in d:
            d.remove(b)
            assert b not in d and len(d) == len(members) - 1
            d.insert(b, key(h), 0, 0.0)  # another content after the revival: a plain insert
        elif op == 2 and members:
            v = d.evict()
            assert v in members
            members.discard(v)
        assert len(d) == len(members) and d.bias >= 0 and d.cbias >= 0
    d.check_invariants()


def test_a_chain_is_evicted_child_first():
    """A revived chain released tail first, then a flood of new content: the chain's blocks
    leave deepest first, so no cached block is ever orphaned of its prefix."""
    d = DoorARCPolicy(64, sketch_min_bits=8)
    chain = [0, 1, 2, 3]  # block i holds content 100 + i, depth i
    for rnd in range(3):
        for b in reversed(chain):
            if rnd:
                d.on_hit(key(100 + b))
                d.remove(b)
            d.insert(b, key(100 + b), b, 0.0)
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
