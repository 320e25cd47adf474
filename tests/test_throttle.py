"""kvpool.throttle.Throttle against a model: for every kind, ``due`` is True exactly when no
True of that kind came within the last ``interval`` seconds (the first call always is)."""

from hypothesis import given
from hypothesis import strategies as st

from kvpool.throttle import Throttle

steps = st.lists(st.tuples(st.sampled_from(["a", "b", ""]), st.floats(0.0, 3.0)), max_size=60)


@given(steps, st.floats(0.1, 2.0))
def test_due_at_most_once_an_interval_per_kind(calls, interval):
    now = [0.0]
    throttle = Throttle(interval, clock=lambda: now[0])
    last: dict[str, float] = {}  # the model: when each kind was last due
    for kind, advance in calls:
        now[0] += advance
        want = kind not in last or now[0] - last[kind] >= interval
        assert throttle.due(kind) is want, (kind, now[0], last)
        if want:
            last[kind] = now[0]
