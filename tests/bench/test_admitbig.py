"""bench.admitbig (a research policy): admitrun whose tuner also passes a large gain without
the variance test; its structure under random operations, and the loop where that rule
moves it off LRU passes earlier."""

from __future__ import annotations

import itertools
import random

from hypothesis import given, settings

from bench.admitbig import AdmitBigPolicy, BigTuner
from bench.admitlru import AdmitTuner
from bench.admitrun import AdmitRunPolicy
from bench.policies import CANDIDATES
from kvpool.core.eviction import POLICIES, LRUPolicy
from kvpool.core.eviction.admit_tuner import GHOST_FILTER
from kvpool.replay.loop import simulate
from tests.bench.policy_ops import OPS, evict_members


def round_robin(docs: int, requests: int, seed: int = 1) -> list[list[int]]:
    """A loop longer than the pool: ``docs`` documents of 8..16 blocks, in turn."""
    rng = random.Random(seed)
    ids = itertools.count()
    chains = [[next(ids) for _ in range(rng.randint(8, 16))] for _ in range(docs)]
    return [list(chains[i % docs]) for i in range(requests)]


@settings(max_examples=60, deadline=None)
@given(ops=OPS)
def test_it_evicts_members_and_keeps_invariants(ops):
    evict_members(AdmitBigPolicy(16, sketch_min_bits=8), ops,
                  check=lambda p, m: len(p) == len(m))


def test_a_large_bursty_gain_passes_sooner_than_the_test_alone_lets_it():
    """A loop of ~4 pool turnovers: LRU keeps nothing; a duel's miniature hits the loop's
    first blocks once per pass, a burst the variance test needs many passes to believe.
    admitbig's size rule moves earlier and keeps more of the loop than admitrun."""
    reqs = round_robin(40, 1200)
    cap = 128
    big = AdmitBigPolicy(cap)
    hits_big = simulate(reqs, big, cap)[0]
    hits_run = simulate(reqs, AdmitRunPolicy(cap), cap)[0]
    assert simulate(reqs, LRUPolicy(cap), cap)[0] == 0
    assert big._tuner.bigs >= 1  # the size rule passed a candidate
    assert hits_big > hits_run * 1.05, (hits_big, hits_run)
    big.check_invariants()


def feed_bursts(tuner, periods: int) -> int | None:
    """Feed ``periods`` tuning periods where only the 1 % duel's miniature hits, 40 % of a
    period's accesses in every fifth period (a loop's burst); the period of the first move."""
    duel = len(tuner.GRID) - 1
    for step in range(1, periods + 1):
        for i, s in enumerate(tuner.shadows):
            s.hits = int(0.4 * tuner.period) if i == duel and step % 5 == 0 else 0
        if tuner.tick(tuner.period):
            return step
    return None


def test_a_burst_gain_moves_the_big_tuner_and_not_the_variance_test():
    """Every fifth period the duel hits 40 % of the accesses: 8 points on average, far above
    BIG, but the per-period variance keeps AdmitTuner's test from passing for long."""
    big, plain = BigTuner(1024, lambda c: 1), AdmitTuner(1024, lambda c: 1)
    moved = feed_bursts(big, 30)
    assert moved is not None and BigTuner.MIN_BIG <= moved <= 15, moved
    assert big.current == len(big.GRID) - 1 and big.bigs >= 1
    assert feed_bursts(plain, moved) is None and plain.current == 0


def test_admitbig_is_a_research_candidate_not_a_product_choice():
    assert CANDIDATES["admitbig"] is AdmitBigPolicy and "admitbig" not in POLICIES
    assert AdmitBigPolicy.TUNER is BigTuner and AdmitRunPolicy.TUNER is not BigTuner
    # the same grid (the sketch filter, no ghost filter); only admitbig's has the size rule
    assert BigTuner.GRID == AdmitRunPolicy.TUNER.GRID and GHOST_FILTER not in BigTuner.GRID
    assert BigTuner.MIN_BIG < AdmitRunPolicy.TUNER.MIN_BIG
