"""bench.mainwin: the tuner's window miniatures, and the pool on a window configuration, run
over the bonus of the no-window miniature that leads (bench.mainev: on evidence)."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.cells import cell_trace
from bench.mainev import MainEvPolicy
from bench.mainwin import MainWinPolicy
from bench.policies import CANDIDATES
from kvpool.core.eviction import AdaptivePolicy
from kvpool.replay.loop import PolicyCache, replay, simulate


def test_registered_as_a_research_candidate():
    assert CANDIDATES["mainwin"] is MainWinPolicy
    assert MainWinPolicy(1000).name == "mainwin"


def test_the_windows_take_the_leading_bonus_and_the_pool_with_them():
    reqs, cap = cell_trace("zipf_prefix@1@1000")  # a bonus leads LRU here
    reqs = reqs[:1000]  # the pool runs the sketch filter over bonus 8 by request 400
    policy = MainWinPolicy(cap)
    cache = PolicyCache(policy, cap)
    seen_bonus, window_cfgs = set(), []
    for i in range(0, len(reqs), 200):
        replay(reqs[i:i + 200], cache)
        tuner = policy.tuner
        seen_bonus.add(tuner.main_bonus)
        for s in tuner.shadows:
            want = tuner.main_bonus if s.cfg[1] < 1.0 else s.cfg[0]
            assert s.bonus == [k * want * s.capacity for k in range(len(s.bonus))]
        if policy.cfg[1] < 1.0:
            window_cfgs.append(policy.cfg)
            assert policy.cfg[0] == tuner.main_bonus
        policy.check_invariants()
    assert seen_bonus - {0.0}  # the plain miniatures' lead left LRU: the check is not vacuous
    assert window_cfgs and any(c[0] > 0 for c in window_cfgs)


@pytest.mark.parametrize("cls", [MainWinPolicy, MainEvPolicy])  # mainev: no bonus passes
@settings(max_examples=15, deadline=None)
@given(st.lists(st.lists(st.integers(0, 300), min_size=1, max_size=12), min_size=50,
                max_size=400))
def test_where_lru_leads_every_plain_miniature_it_is_the_product(cls, reqs):
    cap = 64
    mine, product = cls(cap), AdaptivePolicy(cap)
    got = simulate(reqs, mine, cap)
    mine.check_invariants()
    if mine.tuner.main_moves == 0:
        assert got == simulate(reqs, product, cap)
