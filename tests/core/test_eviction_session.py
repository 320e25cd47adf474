"""Session and guarded eviction policies: run filing, the retention planner, the PlanGuard."""

from __future__ import annotations

import random

from kvpool.core.eviction import LRUPolicy, simulate
from kvpool.core.eviction_adaptive import RetentionPlanner
from kvpool.core.eviction_guard import PlanGuard
from kvpool.core.eviction_guarded import GuardedPolicy
from kvpool.core.eviction_session import NL, PEND, SessionPolicy
from tests.core.policy_helpers import key
from tests.trace_reference import reference_lru


# ---------------------------------------------------------------- Session behaviour
def test_session_files_a_run_by_session_and_level():
    p = SessionPolicy(16, sketch_min_bits=8)
    for b, d in ((0, 3), (1, 2)):  # a request's blocks, tail first
        p.insert(b, key(10 + b), d, 0.0)
    assert p.queue(PEND) == [0, 1]  # the session is unknown until depth 1
    p.insert(2, key(12), 1, 0.0)  # depth 1 names it: new (session class 0)
    p.insert(3, key(0), 0, 0.0)
    assert p.queue(PEND) == [] and p.queue(0) == [0] and p.queue(1) == [1, 2, 3]
    for b in (3, 2, 1):  # the next turn: revived, a new tail block 4, released again
        p.on_hit(p._hash[b])
        p.remove(b)
    for b, d in ((4, 3), (1, 2), (2, 1), (3, 0)):
        p.insert(b, key(14) if b == 4 else p._hash[b], d, 0.0)
    # the session came back within a turnover (class 1): tail, and blocks used twice
    assert p.queue(NL) == [4] and p.queue(NL + 2) == [1, 2, 3] and p.queue(0) == [0]
    p.insert(5, key(20), 5, 0.0)
    p.insert(6, key(21), 2, 0.0)  # not depth 4: the run of block 5 ended unfinished
    assert p.queue(PEND) == [6] and p.queue(0) == [0, 5]
    assert [p.evict() for _ in range(7)] == [0, 4, 1, 2, 3, 5, 6]  # release order, PEND last
    p.check_invariants()


def test_session_is_lru_until_it_plans():
    rng = random.Random(6)
    reqs = [[0] + [rng.randrange(400) for _ in range(rng.randint(1, 8))] for _ in range(900)]
    p = SessionPolicy(60, sketch_min_bits=8)
    p._planner.tick = lambda: None
    assert simulate(reqs, p, 60) == reference_lru(reqs, 60)


def feed(pl: RetentionPlanner, reused: int, spare: int | None, ticks: int) -> None:
    """Releases alternate: one of 64 hashes cycled (back every 128 ticks) into class
    ``reused``, and a one-off hash into class ``spare`` (None: none)."""
    for t in range(ticks):
        if t % 2:
            pl.touch(key(t % 128 + 10**6), reused, t)
        elif spare is not None:
            pl.touch(key(t), spare, t)
        if t % pl.P == pl.P - 1:
            pl.tick()


def test_planner_keeps_reused_classes_and_drops_one_off_ones():
    pl = RetentionPlanner(64, 1, 2, period=16)  # the 64 reused hashes fill the pool
    pl.every = 1
    feed(pl, reused=1, spare=0, ticks=6000)
    assert pl.R[0] == 0.0 and pl.R[1] >= 128
    pl.check_invariants()
    pooled = RetentionPlanner(64, 1, 2, period=16)  # reuse in level 0 only: out of order
    pooled.every = 1
    feed(pooled, reused=0, spare=1, ticks=6000)
    assert pooled.R[0] == pooled.R[1] > 0  # pooled: a chain never loses its head first
    assert pooled.open.sum() <= (pooled.amax + 2 * pooled.P) / 2 + 64  # censored at amax


def test_planner_keeps_everything_when_it_fits():
    pl = RetentionPlanner(1024, 1, 2, period=64)
    pl.every = 1
    feed(pl, reused=1, spare=None, ticks=3000)
    assert pl.R == [pl.amax, pl.amax] and pl.plans


def flood_trace() -> list[list[int]]:
    """60 returning sessions (~600 blocks) in a stream of one-off requests."""
    rng = random.Random(8)
    sess = [[0, 10**6 + s] + [rng.randrange(10**9) for _ in range(10)] for s in range(60)]
    return [sess[r % 60] if r % 3 == 0 else [0] + [rng.randrange(10**9) for _ in range(12)]
            for r in range(5000)]


def test_session_beats_lru_when_one_off_sessions_flood():
    reqs = flood_trace()
    p = SessionPolicy(400)
    assert simulate(reqs, p, 400)[0] > 1.5 * simulate(reqs, LRUPolicy(400), 400)[0]
    p.check_invariants()


# ---------------------------------------------------------------- Guarded behaviour
def test_guarded_files_new_sessions_by_run_length_and_returning_ones_by_gap():
    p = GuardedPolicy(256, sketch_min_bits=16)  # no sketch collisions among these hashes
    nl = GuardedPolicy.NL
    blk = iter(range(200))
    first = {}
    for s, n in enumerate((3, 5, 20, 70)):  # new sessions: run length 1-3, 4-15, 16-63, 64+
        ids = [next(blk) for _ in range(n)]
        for d in range(n - 1, -1, -1):
            p.insert(ids[d], key(1000 * s + d), d, 0.0)
        first[s] = ids
        assert p.queue(s * nl) == [ids[-1]]  # its tail: level 0
        assert p.queue(s * nl + 1) == ids[-2::-1]  # the rest, used once: level 1
    a = first[0]  # session 0 comes back at once: a new tail, then its blocks again
    for b in a:
        p.on_hit(p._hash[b])
        p.remove(b)
    tail = next(blk)
    p.insert(tail, key(3), 3, 0.0)
    for d in (2, 1, 0):
        p.insert(a[d], key(d), d, 0.0)
    assert p.queue(4 * nl) == [tail]  # back, mean gap 102 <= 1 turnover (256): class 4
    assert p.queue(4 * nl + 2) == [a[2], a[1], a[0]]  # used twice: level 2
    p.check_invariants()


def test_guarded_is_lru_while_its_guard_prefers_lru():
    rng = random.Random(9)
    sess = [[0, 10**6 + s] + [rng.randrange(10**9) for _ in range(10)] for s in range(60)]
    reqs = [sess[r % 60] if r % 3 == 0 else [0] + [rng.randrange(10**9) for _ in range(12)]
            for r in range(3000)]
    p = GuardedPolicy(400, sketch_min_bits=8)
    p._guard.Z = float("inf")  # never convinced: the plan is made but never used
    assert simulate(reqs, p, 400) == reference_lru(reqs, 400)
    assert p._planner.plans > 0 and not p.uses_plan and set(p.retention) == {0.0}
    p.check_invariants()


def test_guarded_adopts_the_plan_when_it_wins():
    reqs = flood_trace()
    p = GuardedPolicy(400)
    assert not p.uses_plan  # starts as LRU
    assert simulate(reqs, p, 400)[0] > 1.5 * simulate(reqs, LRUPolicy(400), 400)[0]
    assert p.uses_plan and p._guard.switches >= 1 and max(p.retention) > 0
    p.check_invariants()


class _Plan:
    """A stand-in planner for PlanGuard: two classes, retentions set by the test."""

    def __init__(self, r: list[float]) -> None:
        self.nc, self.R = 2, r


def feed_guard(g: PlanGuard, steps: int, cycled: int, t0: int = 0) -> int:
    """``cycled`` hashes in class 0, each back after 2 * cycled accesses (within LRU's reach
    in a shadow of 100 iff cycled < 50), interleaved with one-offs in class 1."""
    t = t0
    for i in range(steps):
        t += 1
        if i % 2:
            g.access(key(i // 2 % cycled), 0, t)
        else:
            g.access(key(10**6 + t), 1, t)
    return t


def test_plan_guard_adopts_a_better_plan_and_drops_a_worse_one():
    good = _Plan([10.0**9, 0.0])  # keep the cycled class, drop one-offs at once
    g = PlanGuard(400, good)  # type: ignore[arg-type]
    assert g.size == 100 and not g.use_plan
    t = feed_guard(g, 4000, cycled=80)  # LRU hits nothing, the plan all but the first round
    assert g.use_plan and g.switches == 1
    g.check_invariants()
    good.R = [0.0, 10.0**9]  # the plan now keeps one-offs and drops the cycled hashes ...
    feed_guard(g, 8000, cycled=40, t0=t)  # ... which LRU would hit every time
    assert not g.use_plan and g.switches == 2
    bad = PlanGuard(400, _Plan([0.0, 10.0**9]))  # type: ignore[arg-type]
    feed_guard(bad, 8000, cycled=40)
    assert not bad.use_plan and bad.switches == 0  # never convinced
    same = PlanGuard(400, _Plan([0.0, 0.0]))  # type: ignore[arg-type]
    feed_guard(same, 8000, cycled=80)  # the plan is LRU: no gain, no switch
    assert not same.use_plan and same.switches == 0
    bad.check_invariants()


def test_plan_guard_needs_a_streak_of_significant_periods():
    g = PlanGuard(400, _Plan([0.0, 0.0]))  # type: ignore[arg-type]
    switched = []
    for step in range(1, 12):
        g.hits = [0, 50]  # the plan shadow hit 50 more than LRU in this period
        if g._step():
            switched.append(step)
    # the test first counts at MIN_PERIODS periods of evidence, then must pass STREAK in a row
    assert switched == [g.MIN_PERIODS + g.STREAK - 1] and g.use_plan
    for _ in range(3 * g.STREAK):
        g.hits = [50, 0] if _ % 2 else [0, 50]  # no consistent winner: no switch back
        assert not g._step()
    assert g.use_plan
