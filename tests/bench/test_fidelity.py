"""bench.fidelity: the live count is the pool's own lookup hits on the miniatures' slice, a
held pool runs its configuration, and the faithful duel miniature keeps the pool's fill."""

from zlib import crc32

from bench.fidelity import FaithfulMini, cell, chunks, counted
from bench.heldout import SHAPES
from kvpool.core.eviction import AdaptivePolicy
from kvpool.core.eviction.admit_tuner import AdmitTuner, MiniAdmit
from kvpool.replay.loop import PolicyCache, leading_run, simulate

REQS = SHAPES["code_edit"](1, 0.05)
CAP = 300


def _sampled_hits(reqs, policy, cap):
    """The pool's hits on the sampled slice seen from the cache: at each lookup (the leading
    run) and at release (the blocks shallower than the first one not cached when touched)."""
    cache, thr, at_lookup, at_release = PolicyCache(policy, cap), policy._sample, 0, 0
    for ids in reqs:
        sampled = [(crc32(h.to_bytes(8, "little")) >> 12) < thr for h in ids]
        at_lookup += sum(sampled[:leading_run(ids, cache)])
        first_new = len(ids)
        for d in range(len(ids) - 1, -1, -1):
            if ids[d] not in cache:
                first_new = d
            cache.touch(ids[d], d, len(ids))
        at_release += sum(sampled[:first_new])
    return at_lookup, at_release


def test_live_counts_the_pools_own_sampled_hits():
    policy = counted()(CAP)
    at_lookup, at_release = _sampled_hits(REQS, policy, CAP)
    log = policy.log
    assert len(log) > 20 and at_release > 100
    assert sum(lv for _, lv, _ in log) + policy.live == at_release
    # the replay pins nothing: a request's deeper blocks can push out its own leading run
    assert at_lookup >= at_release


def test_a_held_pool_runs_its_configuration_and_never_switches():
    for i in (0, 3, 9):
        policy = counted(hold=i)(CAP)
        held = simulate(REQS, policy, CAP)[0]
        assert held == simulate(REQS, AdaptivePolicy(CAP, cfg=AdmitTuner.GRID[i]), CAP)[0], i
        assert {c for c, _, _ in policy.log} == {i}


def test_held_at_lru_the_pool_gets_what_the_lru_miniature_counts():
    policy = counted(hold=0)(2000)
    simulate(SHAPES["code_edit"](1, 0.2), policy, 2000)
    live = sum(lv for _, lv, _ in policy.log)
    mini = sum(h[0] for _, _, h in policy.log)
    assert abs(live - mini) <= 0.03 * mini


def test_the_faithful_duel_miniature_keeps_the_window_at_its_share():
    g = AdmitTuner.GRID[9]  # the 20 % duel
    fresh, plain = FaithfulMini(100, g, lambda c: 1), MiniAdmit(100, g, lambda c: 1)
    for c in range(60):  # a fresh miniature: the pool's window never holds more than share+1
        fresh.access(c, 0), plain.access(c, 0)
    fresh.check_invariants()
    assert len(fresh.qs[5]) <= 0.2 * 60 + 1 < len(plain.qs[5]) == 60
    lru = FaithfulMini(100, AdmitTuner.GRID[0], lambda c: 1)
    base = MiniAdmit(100, AdmitTuner.GRID[0], lambda c: 1)
    assert [lru.access(c % 130, 0) for c in range(400)] == \
        [base.access(c % 130, 0) for c in range(400)]


def test_chunks_and_gap_add_up():
    log = [(0, 5, [5, 7]), (1, 6, [4, 9]), (1, 8, [3, 8])]
    assert chunks(log, 2) == [{"step": 1, "ran": [0, 1], "live": 11, "mini": 14, "lru": 9},
                              {"step": 3, "ran": [1], "live": 8, "mini": 8, "lru": 3}]
    r = cell("code_edit@1@300", n=4, scale=0.05)
    policy = counted()(CAP)
    hits, blocks = simulate(REQS, policy, CAP)
    log = policy.log
    assert r["rate"] == round(hits / blocks, 5) and len(r["chunks"]) == 4
    assert r["gap"] == sum(lv - h[c] for c, lv, h in log)
    assert sum(c["live"] - c["mini"] for c in r["chunks"]) == r["gap"]
