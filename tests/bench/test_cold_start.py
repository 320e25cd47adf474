"""bench/cold_start.py: its variants differ from the product only where NOTE(cold) says."""

from __future__ import annotations

from bench.cold_start import ColdOff, ColdStay, scans
from kvpool.core.eviction import AdaptivePolicy
from kvpool.core.eviction.admit_tuner import LRU
from kvpool.replay.loop import PolicyCache, replay


def after_a_cold_fill_and_a_hit(cls: type[AdaptivePolicy]) -> AdaptivePolicy:
    p = cls(200)
    c = PolicyCache(p, 200)
    replay([[i + 1] for i in range(400)], c)
    replay([[100]], c)  # kept from the fill: a hit
    return p


def test_the_variants_part_at_the_first_hit_after_a_cold_fill():
    assert after_a_cold_fill_and_a_hit(AdaptivePolicy).cfg == LRU
    assert after_a_cold_fill_and_a_hit(ColdOff).cfg == LRU
    stay = after_a_cold_fill_and_a_hit(ColdStay)
    assert stay.cfg == AdaptivePolicy.COLD
    stay.check_invariants()


def test_a_scan_trace_is_two_pools_of_one_off_blocks_then_its_tail():
    plain, again = scans(1000, "multiturn", False), scans(1000, "multiturn", True)
    head = [b for r in plain[:125] for b in r]
    assert len(head) == len(set(head)) == 2000
    assert len(again) == len(plain) + 1 and set(again[125]) <= set(head[:1000])
