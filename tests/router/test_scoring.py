"""kvpool.router.scoring.choose: longest hit unless the load guard trips, then least loaded."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kvpool.router.scoring import LoadGuard, choose

vectors = st.integers(1, 6).flatmap(lambda n: st.tuples(
    st.lists(st.integers(0, 64), min_size=n, max_size=n),
    st.lists(st.integers(0, 40), min_size=n, max_size=n)))


@given(vectors, st.integers(0, 20), st.floats(1, 4), st.integers(0, 100))
def test_choice_is_longest_hit_unless_guard_trips(vec, abs_t, rel, rr):
    hits, loads = vec
    guard = LoadGuard(abs_t, rel)
    i, reason = choose(hits, loads, guard, rr)
    assert 0 <= i < len(hits)
    tripped = max(loads) - min(loads) > abs_t and max(loads) > rel * min(loads)
    if len(hits) == 1:
        assert (i, reason) == (0, "only")
    elif tripped:
        assert reason == "load" and loads[i] == min(loads)
    elif max(hits) == 0:
        assert (i, reason) == (rr % len(hits), "round_robin")
    else:
        assert reason == "prefix" and hits[i] == max(hits)
        assert loads[i] == min(loads[j] for j in range(len(hits)) if hits[j] == max(hits))


def test_hand_worked_guard():
    g = LoadGuard(abs_threshold=4, rel_ratio=1.5)
    assert choose([32, 0, 0], [5, 1, 1], g) == (0, "prefix")  # 5-1 = 4, not > 4
    assert choose([32, 0, 0], [6, 2, 1], g) == (2, "load")  # 6-1 > 4 and 6 > 1.5
    assert choose([32, 0, 0], [30, 24, 25], g) == (0, "prefix")  # 30 < 1.5 * 24
    assert choose([0, 16, 16], [0, 3, 2], g) == (2, "prefix")  # tie on hit: less loaded


def test_bad_inputs_raise():
    with pytest.raises(ValueError):
        choose([], [])
    with pytest.raises(ValueError):
        choose([1, 2], [1])
    with pytest.raises(ValueError):
        LoadGuard(abs_threshold=-1)
