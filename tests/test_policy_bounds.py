"""bench.policy_bounds: the return oracle (hindsight diagnostic behind issue 3's notes)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.policy_bounds import oracle_hits, returns
from kvpool.core.eviction import LRUPolicy
from kvpool.replay.loop import simulate

# Conversation 1 comes back (request 3), conversation 5 never does. Three blocks of room.
TRACE = [[0, 1, 2], [0, 5, 6, 7], [0, 1, 9]]


def test_returns_is_hindsight_per_conversation():
    assert returns(TRACE) == [True, False, False]
    assert returns([[4], [4], [7, 8], [7, 8, 9]]) == [False, False, True, False]  # 1 id: own


def test_oracle_keeps_the_conversation_that_returns_where_lru_does_not():
    # Both hit block 0 in request 2. LRU: request 2's four blocks push out blocks 1 and 2,
    # so request 3 hits only block 0.
    assert simulate(TRACE, LRUPolicy(3), 3) == (2, 10)
    # The oracle evicts request 2's blocks (and request 1's tail) first: 0 and 1 survive.
    assert oracle_hits(TRACE, 3) == (3, 10)


def test_oracle_rejects_an_empty_pool():
    with pytest.raises(ValueError, match="at least one block"):
        oracle_hits(TRACE, 0)


traces = st.lists(st.lists(st.integers(0, 30), min_size=1, max_size=8, unique=True),
                  min_size=1, max_size=40)


@settings(max_examples=150, deadline=None)
@given(traces, st.integers(1, 12))
def test_oracle_is_a_replay_of_the_same_semantics(reqs, cap):
    hits, blocks = oracle_hits(reqs, cap)
    assert blocks == sum(map(len, reqs))
    assert 0 <= hits <= blocks
    # With room for every id nothing is evicted, so every policy hits alike.
    big = len({h for r in reqs for h in r})
    assert oracle_hits(reqs, big) == simulate(reqs, LRUPolicy(big), big)
