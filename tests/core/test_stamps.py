"""NOTE(stamps) in kvpool/core/eviction/base.py: classlru's and adaptive's 4-byte release
stamps are moved down before the clock outgrows them, without changing which block goes
first."""

from __future__ import annotations

import random

import pytest

from kvpool.core.eviction import AdaptivePolicy, ClassLRUPolicy
from kvpool.core.eviction.admit_tuner import LRU, AdmitTuner
from tests.core.policy_helpers import key


class SmallClassLRU(ClassLRUPolicy):
    STAMP_LIMIT, STAMP_KEEP = 40, 30


class SmallAdaptive(AdaptivePolicy):
    STAMP_LIMIT, STAMP_KEEP = 40, 30


# LRU order: under churn no block stays evictable for STAMP_KEEP inserts, so a rebase only
# translates the stamps and the victims must match exactly
PAIRS = [(lambda: ClassLRUPolicy(8, 8, bonus=0.0), lambda: SmallClassLRU(8, 8, bonus=0.0)),
         (lambda: AdaptivePolicy(8, 8, cfg=LRU), lambda: SmallAdaptive(8, 8, cfg=LRU))]


def churn(p, rng: random.Random, steps: int) -> list[int]:
    """A full pool of 8 blocks: each step evicts one and refills it with new content, or
    revives a random member and releases it again. The victims, in order."""
    for b in range(8):
        p.insert(b, key(b), 0, 0.0)
    victims, content = [], 100
    for _ in range(steps):
        if rng.random() < 0.7:
            b = p.evict()
            victims.append(b)
            content += 1
            p.insert(b, key(content), 0, 0.0)
        else:
            b = rng.choice([x for x in range(8) if x in p])
            h = p._hash[b]
            p.remove(b)
            p.on_hit(h)
            p.insert(b, h, 0, 0.0)
        p.check_invariants()
    return victims


@pytest.mark.parametrize("make, make_small", PAIRS)
def test_rebasing_keeps_the_eviction_order(make, make_small):
    for seed in range(5):
        big, small = make(), make_small()
        assert churn(big, random.Random(seed), 300) == churn(small, random.Random(seed), 300)
        assert big._clock > 300 and small._clock < SmallClassLRU.STAMP_LIMIT


@pytest.mark.parametrize("cfg", [g for g in AdmitTuner.GRID if g != LRU])
def test_every_configuration_stays_valid_through_rebases(cfg):
    """Bonuses and duels keep some blocks evictable past STAMP_KEEP; they are clamped to the
    oldest stamp and every invariant still holds (churn checks them after each step)."""
    p = SmallAdaptive(8, 8, cfg=cfg)
    assert len(churn(p, random.Random(1), 400)) > 200
    assert p._clock < SmallAdaptive.STAMP_LIMIT


def test_a_block_evictable_for_longer_than_keep_becomes_the_oldest():
    p = SmallClassLRU(4, 8, bonus=0.0)
    p.insert(0, key(0), 0, 0.0)  # stays evictable through many rebases
    for i in range(200):
        p.insert(1, key(1000 + i), 0, 0.0)
        p.remove(1)
    p.insert(2, key(2), 0, 0.0)
    p.check_invariants()
    assert p._stamp[0] == 0 < p._stamp[2] and p.evict() == 0 and p.evict() == 2


def test_stamps_take_four_bytes():
    assert ClassLRUPolicy(16)._stamp.itemsize == AdaptivePolicy(16)._stamp.itemsize == 4
