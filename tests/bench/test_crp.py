"""bench.crp (a research policy): the product's ``adaptive`` whose sketch counts a return, not
every use: a revival within ``CRP`` pool turnovers of the block's release counts nothing."""

from __future__ import annotations

import random
from zlib import crc32

from hypothesis import given, settings

from bench.crp import CRPAgePolicy, CRPClassPolicy, CRPPolicy
from bench.policies import CANDIDATES
from kvpool.core.eviction import POLICIES
from kvpool.core.eviction.adaptive import AdaptivePolicy
from kvpool.replay.loop import simulate
from tests.bench.policy_ops import OPS, evict_members
from tests.core.policy_helpers import key

FIXED = (4.0, 1.0, False)  # bonus 4, no window: the class is what the sketch counts


class NoPeriod(CRPPolicy):
    CRP = -1.0  # every revival is a return, even of the last block released: the product's
    # count, moved from on_hit to insert


@settings(max_examples=40, deadline=None)
@given(ops=OPS)
def test_it_evicts_members_and_keeps_invariants(ops):
    evict_members(CRPPolicy(16, sketch_min_bits=8), ops, check=lambda p, m: len(p) == len(m))


def revive(p: AdaptivePolicy, b: int, content: bytes) -> None:
    """A prefix hit takes block ``b`` back and its sequence releases it again."""
    p.on_hit(content)
    p.remove(b)
    p.insert(b, content, 0, 0.0)


def uses(p: AdaptivePolicy, content: bytes) -> int:
    return p._sketch.estimate(crc32(content))


def test_uses_within_the_period_count_once_and_a_return_counts_again():
    crp, product = CRPPolicy(100, cfg=FIXED), AdaptivePolicy(100, cfg=FIXED)
    for p in (crp, product):
        p.insert(0, key(1), 0, 0.0)
        for _ in range(4):  # a burst: four hits right after the release (0.05 * 100 = 5)
            revive(p, 0, key(1))
    assert (uses(crp, key(1)), uses(product, key(1))) == (1, 5)
    for b in range(1, 7):  # six other releases: block 0's last release is 6 inserts old
        crp.insert(b, key(100 + b), 0, 0.0)
    revive(crp, 0, key(1))
    assert uses(crp, key(1)) == 2


def test_hits_on_a_held_block_fold_into_its_release():
    """Hits while a sequence still holds the block (no remove) count nothing; the release
    after them counts one use when the block's last release is past the period."""
    p = CRPPolicy(100, cfg=FIXED)
    p.insert(0, key(1), 0, 0.0)
    p.remove(0)
    for b in range(1, 7):
        p.insert(b, key(100 + b), 0, 0.0)
    for _ in range(3):
        p.on_hit(key(1))
    assert uses(p, key(1)) == 1
    p.insert(0, key(1), 0, 0.0)
    assert uses(p, key(1)) == 2


def test_a_class_from_returns_keeps_a_returning_head_over_a_burst():
    """Content A (block 0) returns three times, far apart; content B (block 1) is hit eight
    times in one burst. The product counts B more and keeps it; crp keeps A."""
    victims = []
    for p in (CRPPolicy(40, cfg=FIXED), AdaptivePolicy(40, cfg=FIXED)):
        p.insert(0, key(1), 0, 0.0)
        fill = 10
        for _ in range(3):
            for _ in range(3):  # three other releases between A's returns (> 0.05 * 40)
                p.insert(fill, key(100 + fill), 0, 0.0)
                fill += 1
            revive(p, 0, key(1))
        p.insert(1, key(2), 0, 0.0)
        for _ in range(8):
            revive(p, 1, key(2))
        for b in range(10, fill):
            p.remove(b)
        victims.append(p.evict())
    assert victims == [1, 0]


def test_with_no_period_it_replays_as_the_product():
    """A negative CRP counts every revival where the product counts its hit: same hits, same tuning."""
    rnd = random.Random(5)
    reqs = [[rnd.randrange(40)] + [rnd.randrange(300) + 100 for _ in range(rnd.randrange(1, 5))]
            for _ in range(4000)]
    for cap in (32, 128):
        assert simulate(reqs, NoPeriod(cap), cap) == simulate(reqs, AdaptivePolicy(cap), cap)


def test_crpclass_duel_counts_every_use_and_classes_count_returns():
    """At 100 blocks and at 20000 (where the product shares one sketch) the duel's sketch
    counts the burst's hits; the classes' sketch counts the burst once."""
    for cap in (100, 20000):
        p = CRPClassPolicy(cap)
        p.insert(0, key(1), 0, 0.0)
        for _ in range(4):
            revive(p, 0, key(1))
        assert p._duel is not p._sketch
        assert (uses(p, key(1)), p._duel.estimate(crc32(key(1)))) == (1, 5)
        p.check_invariants()


@settings(max_examples=30, deadline=None)
@given(ops=OPS)
def test_crpclass_evicts_members_and_keeps_invariants(ops):
    evict_members(CRPClassPolicy(16, sketch_min_bits=8), ops,
                  check=lambda p, m: len(p) == len(m))


def test_crpage_folded_uses_still_age_the_sketch():
    """600 revivals in one burst: the product adds 601 uses (two halvings of a 256-addition
    period), crp one (none); crpage counts one and halves on the product's schedule."""
    halvings = []
    for cls in (AdaptivePolicy, CRPPolicy, CRPAgePolicy):
        p = cls(100, sketch_min_bits=4, cfg=FIXED)
        p.insert(0, key(1), 0, 0.0)
        for _ in range(600):
            revive(p, 0, key(1))
        halvings.append((p._sketch.halvings, p._sketch.left))
        p.check_invariants()
    assert halvings[0] == halvings[2] != halvings[1]


def test_crp_replays_and_is_a_research_candidate():
    reqs = [[i % 97, i % 89 + 100] for i in range(3000)]
    p = CRPPolicy(64)
    hits, blocks = simulate(reqs, p, 64)
    p.check_invariants()
    assert 0 < hits < blocks == 6000
    assert CANDIDATES["crp"] is CRPPolicy and "crp" not in POLICIES
    assert CANDIDATES["crpclass"] is CRPClassPolicy
