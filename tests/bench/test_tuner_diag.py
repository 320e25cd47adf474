"""bench.tuner_diag (research): three one-change variants of classlru's tuner. Their structure
under random operations, and for each the one behaviour it changes, which the product does
not have."""

from __future__ import annotations

import pytest
from hypothesis import given, settings

from bench.policies import CANDIDATES
from bench.tuner_diag import (KeyReleasePolicy, RetreatPolicy, RetreatTuner, WarmStartPolicy,
                              WarmTuner)
from kvpool.core.eviction import POLICIES, ClassLRUPolicy
from kvpool.core.eviction.tuner import NO_MISS, BonusTuner
from tests.bench.policy_ops import OPS, evict_members
from tests.core.policy_helpers import key


@pytest.mark.parametrize("cls", [RetreatPolicy, KeyReleasePolicy, WarmStartPolicy])
@settings(max_examples=40, deadline=None)
@given(ops=OPS)
def test_it_evicts_members_and_keeps_invariants(cls, ops):
    evict_members(cls(16, sketch_min_bits=8), ops, check=lambda p, m: len(p) == len(m))


def feed(t: BonusTuner, hits: list[int]) -> bool:
    """One tuning period in which miniature i found ``hits[i]`` of the period's accesses."""
    for s, h in zip(t.shadows, hits, strict=True):
        s.hits = h
    return t.tick(t.period)


def steps_back_to_lru(t: BonusTuner) -> int:
    """60 periods where bonus 0.25 beats LRU by a wide margin, then (on 0.25) periods where
    LRU wins by a smaller one: how many until the tuner is back on LRU."""
    for _ in range(60):
        feed(t, [100, 100 + t.period // 8, 100, 100, 100, 100, 100])
    t.current = 1  # on 0.25 now, with the slow window full of its gain
    for step in range(1, 400):
        if feed(t, [100 + t.period // 16, 100, 100, 100, 100, 100, 100]):
            return step
    return 400


def test_retreat_returns_to_lru_on_the_fast_window_alone():
    quick, plain = RetreatTuner(1024, 5), RetreatTuner.__mro__[1](1024, 5)
    assert type(plain) is BonusTuner
    back, slow = steps_back_to_lru(quick), steps_back_to_lru(plain)
    assert quick.current == 0 and quick.retreats >= 1
    assert back < slow, (back, slow)  # the slow window held the product on 0.25 longer


def test_keyrelease_fixes_a_blocks_key_at_its_release():
    """Block 0 (content used twice: class 1) is released under bonus 0, block 1 (class 0)
    after a switch to bonus 1. The product applies the new bonus to both, so block 1 goes
    first; keyrelease keeps block 0's key from its release, and block 0 goes first."""
    victims = []
    for p in (ClassLRUPolicy(8, bonus=0.0), KeyReleasePolicy(8, bonus=0.0)):
        p.on_hit(key(7))  # a use before its release: class 1 at its release
        p.insert(0, key(7), 0, 0.0)
        p._set_bonus(1.0)
        p.insert(1, key(8), 0, 0.0)
        victims.append(p.evict())
        p.check_invariants()
    assert victims == [1, 0]


def test_warmstart_takes_no_step_until_the_miniatures_are_full():
    warm, plain = WarmTuner(1 << 20, 5), BonusTuner(1 << 20, 5)  # 2048 held, 256 a period
    size = warm.shadows[0].capacity
    for t in (warm, plain):
        for i in range(size - 1):  # one short of full: every miniature holds the same blocks
            t.access_run([(key(i), 0, 0)], NO_MISS)
    assert plain.steps >= 1 and warm.steps == 0 and warm.cold == plain.steps
    cold = warm.cold
    for i in range(warm.period + 1):  # the miniatures fill: every period from here is a step
        warm.access_run([(key(size + i), 0, 0)], NO_MISS)
    assert warm.steps >= 1 and warm.cold == cold
    warm.check_invariants()


def test_they_are_research_candidates_not_product_choices():
    for cls in (RetreatPolicy, KeyReleasePolicy, WarmStartPolicy):
        assert CANDIDATES[cls.name] is cls and cls.name not in POLICIES
