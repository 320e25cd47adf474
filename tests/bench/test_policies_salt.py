"""bench.policies' hash salting: the same trace to LRU, another hash-space sample to classlru."""

from __future__ import annotations

from zlib import crc32

from bench.policies import salt_spread, salted
from bench.policy_traces import multiturn, uniform
from kvpool.core.eviction import LRUPolicy
from kvpool.replay.loop import simulate


def _collisions(ids: list[int], bits: int = 8) -> set[tuple[int, int]]:
    """Index pairs whose ids' CRC-32 agree in the low ``bits`` (a sketch probe's collisions)."""
    by: dict[int, list[int]] = {}
    for i, h in enumerate(ids):
        by.setdefault(crc32(h.to_bytes(8, "little")) & ((1 << bits) - 1), []).append(i)
    return {(a, b) for group in by.values() for a in group for b in group if a < b}


def test_salting_keeps_the_trace_structure_and_lru_hits():
    reqs = uniform(seed=5, requests=400, docs=200)
    for s in (1, 2, 5):
        sr = salted(reqs, s)
        assert [len(r) for r in sr] == [len(r) for r in reqs]
        # the map is injective: two positions share an id after salting iff they did before
        flat, sflat = [h for r in reqs for h in r], [h for r in sr for h in r]
        assert len(set(sflat)) == len(set(flat)) and sflat != flat
        for cap in (16, 64):
            assert simulate(sr, LRUPolicy(cap), cap) == simulate(reqs, LRUPolicy(cap), cap)
    assert salted(reqs, 0) is reqs


def test_salting_moves_sketch_collisions():
    # CRC-32 is affine over XOR: a salt that only set high bits would keep every collision
    # pair; the salt must give the sketch (and the sample) a genuinely different hash space
    ids = list(range(2000))
    base = _collisions(ids)
    for s in (1, 2, 3):
        moved = _collisions(salted([ids], s)[0])
        assert len(base & moved) < len(base) // 4


def test_salt_spread_counts_hits_against_lru():
    reqs = multiturn(seed=1, requests=600, active=40)
    cap = 64
    lru_hits = simulate(reqs, LRUPolicy(cap), cap)[0]
    assert salt_spread(reqs, "lru", cap, 3, lru_hits) == {
        "min": 0, "max": 0, "mean": 0.0, "below": 0, "salts": 3}
    # against a reference 10 hits higher, LRU is 10 below it under every salt
    assert salt_spread(reqs, "lru", cap, 2, lru_hits + 10) == {
        "min": -10, "max": -10, "mean": -10.0, "below": 2, "salts": 2}
