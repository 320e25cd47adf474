"""AdaptivePolicy (kvpool/core/eviction/adaptive.py) and its tuner's miniature: each window
rule, the ghost, and the tuner leaving LRU where a classic wins. The protocol and invariants
under random operations are tests/core/test_eviction.py's (DRIVEN includes "adaptive")."""

from __future__ import annotations

from zlib import crc32

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvpool.core.eviction import AdaptivePolicy, ClassLRUPolicy, LRUPolicy
from kvpool.core.eviction.admit_tuner import GHOST_FILTER, LRU, WIN, AdmitTuner, MiniAdmit
from kvpool.errors import InvariantError
from kvpool.replay.loop import PolicyCache, replay, simulate
from tests.core.policy_helpers import key

SKETCH_FILTER = (0.0, 0.1, False)
DUEL = (0.0, 0.2, True)


def fill(p: AdaptivePolicy, ids: range, base: int = 0) -> None:
    for b in ids:
        p.insert(b, key(base + b), 0, 0.0)


def test_the_lru_configuration_evicts_as_lru():
    ops = st.lists(st.tuples(st.sampled_from("ire"), st.integers(0, 11)), max_size=80)

    @given(ops)
    @settings(max_examples=80, deadline=None)
    def run(seq):
        a, b = AdaptivePolicy(12, sketch_min_bits=8, cfg=LRU), LRUPolicy(12)
        content = 100
        for op, blk in seq:
            if op == "i" and blk not in a:
                content += 1
                a.insert(blk, key(content), 0, 0.0)
                b.insert(blk, key(content), 0, 0.0)
            elif op == "r" and blk in a:
                a.remove(blk)
                b.remove(blk)
            elif op == "e" and len(a):
                assert a.evict() == b.evict()
        assert [a.evict() for _ in range(len(a))] == [b.evict() for _ in range(len(b))]
    run()


def test_the_ghost_filter_sends_recent_evictions_to_main():
    p = AdaptivePolicy(100, sketch_min_bits=8, cfg=GHOST_FILTER)
    fill(p, range(10))
    assert p.queue(WIN) == list(range(10))  # new content: the window
    first = p.evict()
    assert first == 0 and crc32(key(0)) in p._ghost
    p.insert(50, key(0), 0, 0.0)  # it comes back within the ghost's memory: main
    assert 50 not in p.queue(WIN) and crc32(key(0)) not in p._ghost
    p.insert(51, key(999), 0, 0.0)  # never evicted: the window
    assert p.queue(WIN)[-1] == 51
    p.check_invariants()


def test_the_sketch_filter_remembers_what_the_ghost_forgot():
    p = AdaptivePolicy(8, sketch_min_bits=8, cfg=SKETCH_FILTER)
    fill(p, range(8))
    for _ in range(8):
        p.evict()
    fill(p, range(8), base=1000)  # eight more evictions push the first ones out of the ghost
    for _ in range(8):
        p.evict()
    assert crc32(key(0)) not in p._ghost
    p.insert(3, key(0), 0, 0.0)  # counted before: main, however long ago
    assert 3 not in p.queue(WIN)


def test_the_ghost_is_fed_in_every_configuration():
    for cfg in (LRU, (2.0, 1.0, False), SKETCH_FILTER, DUEL):
        p = AdaptivePolicy(16, sketch_min_bits=8, cfg=cfg)
        fill(p, range(16))
        victims = [p.evict() for _ in range(4)]
        assert all(crc32(key(v)) in p._ghost for v in victims), cfg


def test_the_duel_keeps_the_incumbent_unless_the_candidate_is_used_more():
    for extra_uses, evicted in ((0, 10), (3, 0)):  # 1 use against 2: the newcomer goes
        p = AdaptivePolicy(10, sketch_min_bits=8, cfg=DUEL)
        fill(p, range(10))
        for b in range(10):  # every block used twice, revived into main
            p.remove(b)
            p.on_hit(key(b))
            p.insert(b, key(b), 0, 0.0)
        for _ in range(extra_uses):
            p.on_hit(key(10))
        fill(p, range(10, 13))  # the window (3 of 13) is over its share (0.2)
        assert p.evict() == evicted, extra_uses
        p.check_invariants()


def test_the_duel_forgets_content_unused_for_many_turnovers():
    """NOTE(age): a main full of content used 20 times long ago must not win every duel
    against today's working set. The classes' sketch (2**20 counters) halves only every
    2**18 additions; with DUEL_AGE 0 the duel reads it, the old content keeps main, and the
    working set (12 blocks in a 16-block pool) cycles through the window without a hit."""
    old = [[i + 1] for i in range(16)] * 20
    new = [[100 + i % 12] for i in range(12 * 200)]
    rates = {}
    for age in (0, 30):
        p = type("Aged", (AdaptivePolicy,), {"DUEL_AGE": age})(16, cfg=DUEL)
        cache = PolicyCache(p, 16)
        replay(old + new[:12 * 100], cache)
        hits, blocks = replay(new[12 * 100:], cache)
        rates[age] = hits / blocks
        p.check_invariants()
    assert rates[0] < 0.1 and rates[30] > 0.9, rates


def test_a_fresh_pool_under_the_duel_admits_past_its_window():
    """NOTE(admit): while a fresh pool fills, the window keeps its share and main takes the
    rest. Before, the window held every block and drained two per eviction, so the duel held
    fixed on a loop over 1.5 pools hit 0.44 where keeping a pool's worth of it gets 0.55."""
    p = AdaptivePolicy(200, cfg=(0.0, 0.05, True))
    fill(p, range(200))
    assert len(p.queue(WIN)) <= 0.05 * 200 + 1
    p.check_invariants()
    loop = [[i + 1] for _ in range(6) for i in range(300)]
    hits, blocks = simulate(loop, AdaptivePolicy(200, cfg=(0.0, 0.01, True)), 200)
    assert hits / blocks > 0.5


def test_the_tuner_leaves_lru_on_a_loop_longer_than_the_pool():
    """A loop over 1.5 pools: LRU and classlru hit nothing; W-TinyLFU's duel keeps most of
    a pool's worth of the loop (the optimum is 2/3)."""
    cap = 64
    reqs = [[i % 96 + 1] for i in range(96 * 60)]
    p = AdaptivePolicy(cap)
    hits, blocks = simulate(reqs, p, cap)
    assert simulate(reqs, LRUPolicy(cap), cap)[0] == 0
    assert simulate(reqs, ClassLRUPolicy(cap), cap)[0] == 0
    assert hits / blocks > 0.5 and p.cfg[2] is True and p.cfg[1] < 1.0
    p.check_invariants()


def test_a_pool_that_fills_without_a_hit_keeps_what_it_holds():
    """NOTE(cold): a loop over 1.5 pools, no hit before the first eviction. The policy takes
    the 1 % duel there and keeps most of a pool's worth of the first pass, so the second
    pass hits; started as LRU it hit nothing in the second pass (no miniature had evidence
    yet). The first hit returns the pool to LRU, which keeps what is hit from then on."""
    cap = 200
    passes = [[[i + 1] for i in range(300)] for _ in range(2)]
    p = AdaptivePolicy(cap)
    c = PolicyCache(p, cap)
    assert replay(passes[0], c)[0] == 0
    assert p.cfg == AdaptivePolicy.COLD
    assert replay(passes[1], c)[0] > 0.5 * 300
    p.check_invariants()


def test_a_hit_before_the_first_eviction_leaves_the_pool_on_lru():
    """NOTE(cold) only where no hit came first: one repeat, then the same loop."""
    cap = 200
    p = AdaptivePolicy(cap)
    c = PolicyCache(p, cap)
    replay([[1], [1]] + [[i + 1] for i in range(300)], c)
    assert p.cfg == LRU
    fixed = AdaptivePolicy(cap, cfg=LRU)  # a fixed configuration is never changed
    simulate([[i + 1] for i in range(300)], fixed, cap)
    assert fixed.cfg == LRU


def test_after_a_cold_fill_a_shallow_hit_returns_the_pool_to_lru():
    """NOTE(cold): a scan of two pools, then new content used twice: its second use revives
    a block released one release ago, a hit LRU would have had too. The pool returns to
    LRU."""
    cap = 200
    p = AdaptivePolicy(cap)
    c = PolicyCache(p, cap)
    replay([[i + 1] for i in range(2 * cap)], c)
    assert p.cfg == AdaptivePolicy.COLD
    assert replay([[10_000], [10_000]], c)[0] == 1
    assert p.cfg == LRU
    p.check_invariants()


def test_after_a_cold_fill_a_deep_hit_leaves_the_duel_on():
    """NOTE(cold): a hit on content main kept from the fill (released more than a pool's
    worth of releases ago: LRU would have evicted it) is one the duel won, so the pool stays
    on it; the first shallow hit after it returns the pool to LRU. Ended by any hit, a
    scan, a re-read of part of it and then chats went below LRU; a loop lost its third
    pass."""
    cap = 200
    p = AdaptivePolicy(cap)
    c = PolicyCache(p, cap)
    replay([[i + 1] for i in range(2 * cap)], c)
    assert replay([[cap // 2]], c)[0] == 1
    assert p.cfg == AdaptivePolicy.COLD
    assert replay([[10_000], [10_000]], c)[0] == 1
    assert p.cfg == LRU
    p.check_invariants()


def test_a_loop_longer_than_the_pool_keeps_hitting_after_a_cold_fill():
    """NOTE(cold): three passes of a loop over 1.5 pools. Every hit is deep, so the duel
    stays and the third pass hits as the second did; returned to LRU at the second pass's
    first hit, the pool held nothing of the loop by the third."""
    cap = 200
    loop = [[i + 1] for i in range(300)]
    p = AdaptivePolicy(cap)
    c = PolicyCache(p, cap)
    replay(loop, c)
    second, third = replay(loop, c)[0], replay(loop, c)[0]
    assert p.cfg == AdaptivePolicy.COLD
    assert second > 0.5 * 300 and third > 0.5 * 300
    p.check_invariants()


def _agent_steps(cap: int, steps: int) -> list[list[int]]:
    """An agent's trajectory: each request re-sends the last one's blocks and adds some, every
    one longer than a pool of ``cap`` blocks."""
    return [list(range(1, cap + 40 + 8 * k)) for k in range(steps)]


def test_requests_longer_than_the_pool_keep_it_on_lru():
    """NOTE(cold-long): the first request alone fills the pool without a hit, so NOTE(cold)
    used to take the duel and hold it: every revival of a request longer than the pool is
    deep, and the duel kept the first request's tail, which no lookup reaches. The pool
    stays on LRU and hits each request's head as LRU does (the duel hit 1 a request)."""
    cap = 64
    reqs = _agent_steps(cap, 12)
    p = AdaptivePolicy(cap)
    hits = simulate(reqs, p, cap)[0]
    assert p.cfg == LRU
    assert hits == simulate(reqs, LRUPolicy(cap), cap)[0] == 11 * cap
    p.check_invariants()


def test_a_request_longer_than_the_pool_ends_the_cold_rule():
    """NOTE(cold-long): after a cold fill (a scan of two pools, the duel on), a request
    longer than the pool returns the pool to LRU: the next one hits its head."""
    cap = 64
    p = AdaptivePolicy(cap)
    c = PolicyCache(p, cap)
    replay([[10_000 + i] for i in range(2 * cap)], c)
    assert p.cfg == AdaptivePolicy.COLD
    first, second = _agent_steps(cap, 2)
    replay([first], c)
    assert p.cfg == LRU
    assert replay([second], c)[0] == cap
    p.check_invariants()


class EagerTuner(AdmitTuner):
    """Moves to the 20 % duel at every step, whatever its miniatures saw."""

    def _step(self) -> bool:
        for s in self.shadows:
            s.hits = 0
        self.steps += 1
        moved = self.current != self.GRID.index(DUEL)
        self.current = self.GRID.index(DUEL)
        return moved


class Eager(AdaptivePolicy):
    TUNER = EagerTuner


def test_while_the_cold_rule_is_on_the_pool_holds_the_duel():
    """NOTE(cold): after a cold fill the tuner moves (here at its first step, whatever the
    evidence), but the pool keeps the 1 % duel until the first shallow hit, then takes the
    tuner's choice. Following the tuner while the rule was on, the pool paid for the detours
    its miniatures took in their first turnovers (the loop at 4000 blocks)."""
    cap = 200
    p = Eager(cap)
    c = PolicyCache(p, cap)
    replay([[i + 1] for i in range(3 * cap)], c)
    assert p.cfg == AdaptivePolicy.COLD
    p.check_invariants()
    assert replay([[10_000], [10_000]], c)[0] == 1
    assert p.cfg == DUEL
    p.check_invariants()


def test_after_a_cold_fill_a_hit_on_a_block_in_use_leaves_the_rule_on():
    """NOTE(cold): a hit on a block no policy holds (a running sequence's) says nothing of
    depth; the first shallow revival ends the rule."""
    p = AdaptivePolicy(100)
    fill(p, range(100))
    p.evict()
    assert p.cfg == AdaptivePolicy.COLD
    p.on_hit(key(5000))
    assert p.cfg == AdaptivePolicy.COLD
    p.on_hit(key(99))
    p.remove(99)  # released one release ago: shallow
    assert p.cfg == LRU
    p.check_invariants()


def test_a_window_left_behind_is_evicted_in_release_order():
    """NOTE(drain): a cold fill puts the pool on the 1 % duel, and new content enters its
    window; the first hit returns it to LRU with that window left over. Its blocks are the
    oldest once a pool's worth of new blocks is released, and LRU evicts them first; before,
    they stayed while main held any block."""
    cap = 200
    p = AdaptivePolicy(cap)
    c = PolicyCache(p, cap)
    replay([[i + 1] for i in range(cap + 20)], c)
    left = set(p.queue(WIN))
    assert left and p.cfg == AdaptivePolicy.COLD
    replay([[cap + 20]], c)  # the first hit: back to LRU
    assert p.cfg == LRU and set(p.queue(WIN)) <= left
    replay([[10_000 + i] for i in range(cap)], c)
    assert p.queue(WIN) == []
    p.check_invariants()


def test_the_tuner_stays_lru_where_every_candidate_ties():
    """Memoryless reuse over twice the pool: nothing beats LRU, so nothing may move it."""
    import random
    rng = random.Random(5)
    reqs = [[rng.randrange(256) + 1] for _ in range(20000)]
    p = AdaptivePolicy(128)
    simulate(reqs, p, 128)
    assert p.cfg[1] == 1.0 and p._tuner.switches <= 2


@pytest.mark.parametrize("cfg", AdmitTuner.GRID)
def test_a_miniature_holds_its_capacity_and_only_the_ghost_filter_keeps_a_ghost(cfg):
    m = MiniAdmit(16, cfg, lambda c: 1)
    for c in list(range(60)) + list(range(30)):
        m.access(c, 0)
    m.check_invariants()
    assert len(m.where) == 16
    assert bool(m.ghost) == (cfg == GHOST_FILTER)


def test_miniature_check_catches_a_held_ghost():
    m = MiniAdmit(4, GHOST_FILTER, lambda c: 1)
    for c in range(6):
        m.access(c, 0)
    m.ghost.add(next(iter(m.where)))
    with pytest.raises(InvariantError):
        m.check_invariants()


def test_check_invariants_catches_a_window_miscount():
    p = AdaptivePolicy(8, sketch_min_bits=8, cfg=GHOST_FILTER)
    fill(p, range(4))
    p.check_invariants()
    p._nw += 1
    with pytest.raises(InvariantError):
        p.check_invariants()


class Unguarded(AdmitTuner):
    LONG = 0.0


def phases(tuner: AdmitTuner, periods: list[tuple[int, int]]) -> list[int]:
    """Feed ``(periods, gain)`` phases of made-up miniature hits: every configuration gets
    100 hits a period but the sketch filter (index 7), which gets ``100 + gain``. The choice
    after each period."""
    chosen = []
    for n, gain in periods:
        for _ in range(n):
            for i, s in enumerate(tuner.shadows):
                s.hits = 100 + (gain if i == 7 else 0)
            tuner.tick(tuner.period)
            chosen.append(tuner.current)
    return chosen


def test_the_long_window_holds_back_a_candidate_that_leads_only_lately():
    """NOTE(long): 400 periods behind LRU by 10 hits, then 60 ahead by 8 (below the size
    rule's bar, above EFFECT's): the fast and slow windows pass it, the long one does not."""
    guarded, plain = AdmitTuner(4096, lambda c: 1), Unguarded(4096, lambda c: 1)
    trace = [(400, -10), (60, 8)]
    assert set(phases(guarded, trace)) == {0} and guarded.held > 0
    assert phases(plain, trace)[-1] == 7 and plain.held == 0
    # a lead that lasts long enough to bring the long window level passes in the end
    assert phases(guarded, [(400, 8)])[-1] == 7
