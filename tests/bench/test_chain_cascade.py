"""bench/chain_cascade.py: the unreachable count, and the cascade variants' invariant (at every
request boundary no held id has an ancestor missing), on generated chain-id traces."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.baselines import S3FIFO1, WTinyLFU
from bench.cascade_cache import CascadePolicyCache
from bench.chain_cascade import Cascade, cell, children_of, held_ids, parents, unreachable
from bench.heldout import SHAPES
from bench.policies import new_policy
from bench.policy_traces import GENERATED
from kvpool.replay.loop import PolicyCache, replay


def test_parents_counts_ids_with_another_parent():
    assert parents([[1, 2, 3], [1, 2, 4]]) == ({2: 1, 3: 2, 4: 2}, 0)
    assert parents([[1, 2, 3], [5, 2]])[1] == 1  # 2 follows 1 and 5
    assert parents([[1, 2], [2, 7]])[1] == 1  # 2 is a root and a child
    with pytest.raises(ValueError, match="more than one parent"):
        cell([[1, 2], [5, 2]], 2)


def test_unreachable_counts_ids_behind_a_missing_ancestor():
    parent = {2: 1, 3: 2, 4: 3, 6: 5}
    assert unreachable({1, 2, 3, 4}, parent) == 0
    assert unreachable({1, 3, 4, 6}, parent) == 3  # 3 and 4 lost 2; 6 lost 5
    assert unreachable(set(), parent) == 0


@st.composite
def chain_traces(draw) -> list[list[int]]:
    """Requests over a growing forest of chains: a prefix of an earlier request, extended by
    fresh ids (one id per prefix and block, as a Mooncake trace's hash ids)."""
    reqs: list[list[int]] = []
    fresh = 0
    for _ in range(draw(st.integers(1, 40))):
        base: list[int] = []
        if reqs and draw(st.booleans()):
            old = reqs[draw(st.integers(0, len(reqs) - 1))]
            base = old[:draw(st.integers(1, len(old)))]
        n = draw(st.integers(0 if base else 1, 6))
        reqs.append(base + list(range(fresh, fresh + n)))
        fresh += n
    return reqs


@settings(max_examples=120, deadline=None)
@given(reqs=chain_traces(), cap=st.integers(1, 12), wtiny=st.booleans())
def test_a_cascade_holds_no_unreachable_id_between_requests(reqs, cap, wtiny):
    parent, multi = parents(reqs)
    assert multi == 0
    inner = WTinyLFU(cap) if wtiny else S3FIFO1(cap)
    cache = Cascade(inner, children_of(parent))
    for ids in reqs:
        replay([ids], cache)
        held = set(held_ids(inner))
        assert len(held) == len(cache) <= cap
        assert ids[0] in held  # the head, touched last (tail first), stays
        assert unreachable(held, parent) == 0, (ids, sorted(held))


@settings(max_examples=80, deadline=None)
@given(reqs=chain_traces(), cap=st.integers(1, 12),
       name=st.sampled_from(["lru", "classlru", "admitrun"]))
def test_a_block_policy_cascade_holds_no_unreachable_id_between_requests(reqs, cap, name):
    parent = parents(reqs)[0]
    cache = CascadePolicyCache(new_policy(name, cap), cap, children_of(parent))
    for ids in reqs:
        replay([ids], cache)
        cache.check_invariants()  # blocks free or cached, the policy holds the cached ones
        assert ids[0] in cache.where
        assert unreachable(cache.where.keys(), parent) == 0


def test_the_block_cascade_frees_what_admitrun_strands():
    # popular prefixes under one-off tails in a small pool: admitrun's duel keeps deep
    # blocks whose parent lost; the cascade hands their blocks back
    reqs = GENERATED["zipf_prefix"](seed=1)[:1500]
    parent = parents(reqs)[0]
    plain = PolicyCache(new_policy("admitrun", 100), 100)
    cascaded = CascadePolicyCache(new_policy("admitrun", 100), 100, children_of(parent))
    stranded = 0
    for ids in reqs:
        replay([ids], plain)
        replay([ids], cascaded)
        stranded += unreachable(plain.where.keys(), parent)
        assert unreachable(cascaded.where.keys(), parent) == 0
    assert stranded > 0 and cascaded.dropped > 0


@pytest.mark.parametrize("cls, reqs, cap", [
    # new turns of returning chats win their duels while a parent turn loses its own
    (WTinyLFU, lambda: GENERATED["multiturn"](seed=1)[:800], 100),
    # a growing agent context: a parent leaves S on a count its child beat
    (S3FIFO1, lambda: SHAPES["agent"](1, 0.1)[:800], 50)])
def test_a_plain_classic_holds_unreachable_ids_its_cascade_drops(cls, reqs, cap):
    reqs = reqs()
    parent = parents(reqs)[0]
    plain, cascaded = cls(cap), cls(cap)
    cache = Cascade(cascaded, children_of(parent))
    orphans = 0
    for ids in reqs:
        replay([ids], plain)
        replay([ids], cache)
        orphans += unreachable(set(held_ids(plain)), parent)
        assert unreachable(set(held_ids(cascaded)), parent) == 0
    assert orphans > 0


def test_cell_reports_every_policy():
    reqs = [[0, 1, 2], [0, 1, 3], [4, 5], [0, 1, 2]] * 40
    out = cell(reqs, 4)
    assert set(out) == {"lru", "classlru", "classlru+cascade", "s3fifo1", "wtinylfu",
                        "s3fifo1+cascade", "wtinylfu+cascade"}
    for v in out.values():
        assert 0.0 < v["hit_rate"] < 1.0 and 0.0 <= v["unreachable"] <= 1.0
