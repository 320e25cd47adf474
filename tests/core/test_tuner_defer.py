"""NOTE(defer) in kvpool/core/eviction/tuner.py: the miniatures that read nothing but their
runs are fed them in batches, and the tuner's every count and choice is what feeding each run
at once gives. The reference is the same policy with DEFER = 1 (every run fed at once)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kvpool.core.eviction import AdaptivePolicy
from kvpool.core.eviction.admit_tuner import AdmitTuner
from kvpool.replay.loop import simulate


class AtOnceTuner(AdmitTuner):
    DEFER = 1  # every run fed to every miniature as it comes


class AtOncePolicy(AdaptivePolicy):
    TUNER = AtOnceTuner


def trace(draws: list[tuple[int, int, int]]) -> list[list[int]]:
    """Requests from (prefix, length, suffix): a shared prefix chain of ``length`` blocks
    and one block of its own, so runs of several depths, reuse and one-off content mix."""
    return [[1000 * p + i for i in range(n)] + [10 ** 6 + 97 * p + s] for p, n, s in draws]


def outcome(p: AdaptivePolicy, reqs: list[list[int]], cap: int) -> tuple:
    hits = simulate(reqs, p, cap)[0]
    p.check_invariants()
    t = p._tuner
    return hits, p.cfg, t.steps, t.switches


@settings(max_examples=10, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 60), st.integers(1, 12), st.integers(0, 40)),
                min_size=200, max_size=600), st.sampled_from([48, 64, 160]))
def test_deferred_miniatures_count_and_choose_as_miniatures_fed_at_once(draws, cap):
    reqs = trace(draws)
    assert outcome(AdaptivePolicy(cap), reqs, cap) == outcome(AtOncePolicy(cap), reqs, cap)


def test_a_long_workload_takes_the_same_steps_and_switches():
    """A loop longer than the pool beside a hot set: the tuner steps and switches many times
    (the duel leads), and every step agrees."""
    reqs = [[i % 300 + 1] for i in range(300 * 20)]
    reqs = [r + [5000 + i % 7] for i, r in enumerate(reqs)]
    deferred, at_once = AdaptivePolicy(200), AtOncePolicy(200)
    got = outcome(deferred, reqs, 200)
    assert got == outcome(at_once, reqs, 200)
    assert got[2] > 50 and got[3] >= 1
