"""The classlru tuner's parts: the frequency sketch, the shadow miniatures and the bonus
choice, and the tuner on traces where its model of the pool's hits matters."""

from __future__ import annotations

import random
from zlib import crc32

import pytest

from kvpool.core.eviction import ClassLRUPolicy, LRUPolicy
from kvpool.core.eviction.classlru import NO_MISS
from kvpool.core.eviction.sketch import FrequencySketch
from kvpool.core.eviction.tuner import BonusTuner, ShadowCache
from kvpool.replay.loop import simulate
from tests.core.policy_helpers import key


def test_sketch_never_undercounts_and_halves():
    sk = FrequencySketch(16, min_bits=8)
    counts: dict[int, int] = {}
    rng = random.Random(3)
    for _ in range(sk.period - 1):
        h = rng.randrange(30)
        counts[h] = counts.get(h, 0) + 1
        sk.add(crc32(key(h)))
    for h, c in counts.items():
        assert sk.estimate(crc32(key(h))) >= min(c, 15)
    before = bytes(sk.table)
    sk.add(crc32(key(0)))  # the period-th addition halves the table
    assert sk.halvings == 1 and sk.left == sk.period
    assert all(b <= (a + 1) // 2 + 1 for a, b in zip(before, sk.table))
    sk.check_invariants()


@pytest.mark.parametrize("cap,max_period,period", [
    (1000, 30000, 30000), (4000, 120000, 120000), (1000, 10**9, 1 << 18), (1000, 0, 1 << 18),
    (10, 5, 5)])
def test_a_capped_sketch_halves_by_the_cap_and_keeps_its_table(cap, max_period, period):
    sk = FrequencySketch(cap, 20, max_period)
    assert sk.period == period and len(sk.table) == 1 << 20
    for i in range(period):
        sk.add(crc32(key(i % 7)))
    assert sk.halvings == 1
    sk.check_invariants()


def test_tuner_starts_as_lru_and_samples_a_fixed_fraction():
    t = BonusTuner(1 << 20, 4)
    assert t.bonus == 0.0 and t.GRID[0] == 0.0
    assert all(s.capacity == 2048 for s in t.shadows)
    rate = t.threshold / (1 << 20)
    assert rate == pytest.approx(2048 / (1 << 20))
    t.check_invariants()


def test_tuner_steps_more_than_once_per_turnover_on_a_large_pool():
    assert BonusTuner(1000, 5).period == 250  # one step per (quarter-size) shadow turnover
    big = BonusTuner(1 << 20, 5)
    assert all(s.capacity == 2048 for s in big.shadows) and big.period == 256


def test_classlru_top_class_is_nine_uses_or_more():
    from kvpool.core.eviction.classlru import CLASS_OF_COUNT
    assert [CLASS_OF_COUNT[c] for c in (0, 1, 2, 3, 4, 5, 8, 9, 15)] == [0, 0, 1, 2, 2, 3, 3, 4, 4]
    assert ClassLRUPolicy.K == max(CLASS_OF_COUNT) + 1


def _feed(t: BonusTuner, hits: list[int]) -> bool:
    """One tuning period in which shadow i found ``hits[i]`` of the period's accesses held."""
    changed = False
    for n in range(t.period):
        for s, h in zip(t.shadows, hits, strict=True):
            s.hits = h if n == t.period - 1 else 0
        changed = t.access_run([(n.to_bytes(4, "little"), 0, 0)], NO_MISS) or changed
    return changed


def test_tuner_moves_to_the_nearest_candidate_that_wins_not_the_largest_gain():
    t = BonusTuner(64, 4)
    # bonus 0.5 (index 2) and bonus 8 (index 6) both beat LRU in every period, 8 by more:
    # the first step goes to 0.5 (a far jump on the larger gain is the noisiest choice)
    steps = 0
    while not _feed(t, [100, 100, 130, 100, 100, 100, 160]):
        steps += 1
        assert steps < 20, "the tuner never moved off LRU"
    assert t.GRID[t.current] == 0.5
    t.check_invariants()


def test_tuner_leaves_lru_only_for_a_gain_worth_the_move():
    """NOTE(effect): a larger bonus that wins every period, significantly but by less than
    EFFECT of the sampled accesses, is never taken; the same margin toward LRU is enough."""
    t = BonusTuner(1 << 20, 5)
    small_gain = int(t.EFFECT * t.period)  # just under the bar, hits per period
    assert 0 < small_gain < t.EFFECT * t.period
    for _ in range(120):
        assert not _feed(t, [100, 100 + small_gain, 100, 100, 100, 100, 100])
    assert t.bonus == 0.0 and t.switches == 0
    t.current = 1  # now on the larger bonus; LRU wins by the same margin
    steps = 0
    while not _feed(t, [100 + small_gain, 100, 100, 100, 100, 100, 100]):
        steps += 1
        assert steps < 60, "the tuner never went back to LRU"
    assert t.bonus == 0.0
    big_gain = int(3 * t.EFFECT * t.period)  # a gain worth leaving LRU for is still taken
    steps = 0
    while not _feed(t, [100, 100 + big_gain, 100, 100, 100, 100, 100]):
        steps += 1
        assert steps < 60, "the tuner never moved off LRU"
    assert t.bonus == t.GRID[1]
    t.check_invariants()


@pytest.mark.parametrize("salt", [0, 1])
def test_classlru_stays_lru_where_reuse_is_memoryless(salt):
    """bench.policies' multiturn trace: sessions end after a geometric number of turns, so
    past uses do not predict the next one and every bonus ties with LRU within noise. The
    tuner stays on LRU (it left on a burst before NOTE(effect), 250-350 hits below LRU)."""
    from bench.policies import salted
    from bench.policy_traces import multiturn
    reqs = salted(multiturn(seed=2), salt)
    p = ClassLRUPolicy(1000)
    hits, _ = simulate(reqs, p, 1000)
    assert p.bonus == 0.0  # and it never left: exactly LRU's hits
    assert hits == simulate(reqs, LRUPolicy(1000), 1000)[0]


# ---------------------------------------------------------------- release runs (NOTE(runs))
def test_a_shadow_counts_a_runs_leading_hits_only():
    """A run is released tail first; its hits are the held blocks from the head up to the
    first one missing, as the pool's lookup counts them, never a held block behind it."""
    s = ShadowCache(8, 0.0, 1)
    s.access_run([(key(2), 0, 2), (key(0), 0, 0)], NO_MISS)  # holds blocks 0 and 2
    assert s.hits == 0 and set(s.where) == {key(0), key(2)}
    assert s.access_run([(key(2), 0, 2), (key(1), 0, 1), (key(0), 0, 0)], NO_MISS) == 1
    assert s.access_run([(key(2), 0, 2), (key(1), 0, 1), (key(0), 0, 0)], NO_MISS) == 3
    # the pool missed depth 1 as content never seen: nothing deeper counts, held or not
    assert s.access_run([(key(2), 0, 2), (key(0), 0, 0)], 1) == 1
    s.check_invariants()


def stranded(seed: int = 0, n: int = 8000) -> list[list[int]]:
    """Half the requests are popular 16-block documents behind a fresh first block, so no
    cache can reach them; the rest are two-turn chats, whose second turn reuses the first."""
    rng = random.Random(seed)
    docs = [list(range(j * 16, (j + 1) * 16)) for j in range(10)]
    nxt, pending, out = 10**6, [], []
    for _ in range(n):
        if rng.random() < 0.5:
            out.append([nxt] + docs[rng.randrange(10)])
            nxt += 1
        elif pending and rng.random() < 0.5:
            out.append(pending.pop(rng.randrange(len(pending))) + list(range(nxt, nxt + 4)))
            nxt += 4
        else:
            pending.append(list(range(nxt, nxt + 8)))
            out.append(pending[-1])
            nxt += 8
    return out


@pytest.mark.parametrize("cap", [128, 256])
def test_classlru_keeps_no_bonus_for_content_no_request_can_reach(cap):
    """The documents are the most used content, but every use is behind a first block seen
    for the first time. A tuner that scored blocks one by one took a large bonus for them
    (327 hits against LRU's 1304 at 128 blocks); scored by runs, none is worth it."""
    reqs = stranded()
    p = ClassLRUPolicy(cap)
    hits, _ = simulate(reqs, p, cap)
    assert hits >= simulate(reqs, LRUPolicy(cap), cap)[0]
    p.check_invariants()
