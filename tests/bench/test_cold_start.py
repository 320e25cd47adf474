"""bench/cold_start.py: its variants differ from the product only where NOTE(cold) says."""

from __future__ import annotations

from bench.cold_start import ColdFollow, ColdOff, ColdStay, FirstHit, scans
from kvpool.core.eviction import AdaptivePolicy
from kvpool.core.eviction.admit_tuner import LRU
from kvpool.replay.loop import PolicyCache, replay


def after_a_cold_fill_and_a_hit(cls: type[AdaptivePolicy]) -> AdaptivePolicy:
    p = cls(200)
    c = PolicyCache(p, 200)
    replay([[i + 1] for i in range(400)], c)
    replay([[100]], c)  # kept from the fill: a hit
    return p


def test_the_variants_part_at_a_deep_hit_after_a_cold_fill():
    """The hit finds content kept from the fill: the product, cold_stay and cold_follow stay
    on the duel, first_hit (the product before NOTE(cold)'s depth test) returns to LRU."""
    assert after_a_cold_fill_and_a_hit(FirstHit).cfg == LRU
    assert after_a_cold_fill_and_a_hit(ColdOff).cfg == LRU
    for cls in (AdaptivePolicy, ColdStay, ColdFollow):
        p = after_a_cold_fill_and_a_hit(cls)
        assert p.cfg == AdaptivePolicy.COLD
        p.check_invariants()


def test_a_scan_trace_is_two_pools_of_one_off_blocks_then_its_tail():
    plain, again = scans(1000, "multiturn", False), scans(1000, "multiturn", True)
    head = [b for r in plain[:125] for b in r]
    assert len(head) == len(set(head)) == 2000
    assert len(again) == len(plain) + 1 and set(again[125]) <= set(head[:1000])
