"""CircuitBreaker: a hypothesis state machine against a tiny reference model, plus examples."""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kvpool.remote.breaker import STRONG_KINDS, BreakerState, CircuitBreaker

KINDS = ["timeout", "refused", "connection", "other"]


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class BreakerMachine(RuleBasedStateMachine):
    """The model: state, consecutive weak failures, next trial time, trial start, and the
    epochs handed to calls still in flight (a call reports at most once)."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = Clock()
        self.threshold, self.reset = 3, 1.0
        self.b = CircuitBreaker(self.threshold, self.reset, clock=self.clock)
        self.state = "closed"
        self.fails = 0
        self.due = None
        self.trial = None
        self.epoch = 0
        self.inflight: list[int] = []  # epochs of admitted calls that have not reported

    def _open(self) -> None:
        self.state, self.fails, self.due, self.trial = "open", 0, self.clock.t + self.reset, None
        self.epoch += 1

    @rule(dt=st.sampled_from([0.0, 0.1, 0.5, 0.99, 1.0, 2.5]))
    def advance(self, dt):
        self.clock.t += dt

    @rule()
    def admit(self):
        got = self.b.admit()
        if self.state == "closed":
            assert got == self.epoch
            self.inflight.append(got)
        else:
            assert got is None  # open or half-open: no user call touches the network

    @precondition(lambda self: self.inflight)
    @rule(data=st.data())
    def success(self, data):
        e = self.inflight.pop(data.draw(st.integers(0, len(self.inflight) - 1)))
        self.b.record_success(e)
        if e == self.epoch and self.state == "closed":
            self.fails = 0

    @precondition(lambda self: self.inflight)
    @rule(data=st.data(), kind=st.sampled_from(KINDS))
    def failure(self, data, kind):
        e = self.inflight.pop(data.draw(st.integers(0, len(self.inflight) - 1)))
        counted = self.b.record_failure(e, kind)
        want = e == self.epoch and self.state == "closed"
        assert counted is want
        if want:
            self.fails += 1
            if kind in STRONG_KINDS or self.fails >= self.threshold:
                self._open()

    @rule()
    def trial(self):
        now = self.clock.t
        if self.state == "open":
            due = now >= self.due
        elif self.state == "half":
            due = now >= self.trial + self.reset  # a lost trial is replaced
        else:
            due = False
        assert self.b.start_trial() is due
        if due:
            self.state, self.due, self.trial = "half", None, now

    @rule(ok=st.booleans())
    def trial_result(self, ok):
        self.b.end_trial(ok)
        if self.state != "half":
            return
        if ok:
            self.state, self.fails, self.due, self.trial = "closed", 0, None, None
        else:
            self.state, self.due, self.trial = "open", self.trial + self.reset, None

    @invariant()
    def agrees(self):
        self.b.check_invariants()
        want = {"closed": BreakerState.CLOSED, "open": BreakerState.OPEN,
                "half": BreakerState.HALF_OPEN}[self.state]
        assert self.b.state is want and self.b.epoch == self.epoch == self.b.opens
        wait = self.b.trial_wait()
        if self.state == "closed":
            assert wait is None
        else:
            start = self.due if self.state == "open" else self.trial + self.reset
            assert wait == pytest.approx(max(0.0, start - self.clock.t))


BreakerMachine.TestCase.settings = settings(max_examples=200, stateful_step_count=50,
                                            deadline=None)
TestBreaker = BreakerMachine.TestCase


@pytest.mark.parametrize("kind", sorted(STRONG_KINDS))
def test_a_strong_failure_opens_at_once(kind):
    b = CircuitBreaker(threshold=3, reset_s=1.0, clock=Clock())
    e = b.admit()
    assert b.record_failure(e, kind) and b.state is BreakerState.OPEN and b.opens == 1
    assert b.admit() is None


def test_weak_failures_need_the_threshold_in_a_row():
    b = CircuitBreaker(threshold=2, reset_s=1.0, clock=Clock())
    b.record_failure(b.admit(), "connection")
    assert b.state is BreakerState.CLOSED
    b.record_success(b.admit())  # a success resets the count: failures must be consecutive
    b.record_failure(b.admit(), "connection")
    assert b.state is BreakerState.CLOSED
    b.record_failure(b.admit(), "connection")
    assert b.state is BreakerState.OPEN and b.opens == 1


def test_calls_in_flight_when_it_opens_are_one_event():
    b = CircuitBreaker(threshold=3, reset_s=1.0, clock=Clock())
    epochs = [b.admit() for _ in range(8)]  # 8 concurrent calls to a hung Redis
    counted = [b.record_failure(e, "timeout") for e in epochs]
    assert counted == [True] + [False] * 7 and b.opens == 1
    assert b.state is BreakerState.OPEN


def test_only_the_health_check_closes_it_about_every_reset():
    clock = Clock()
    b = CircuitBreaker(threshold=3, reset_s=1.0, clock=clock)
    stale = b.admit()
    b.record_failure(b.admit(), "timeout")
    b.record_success(stale)  # a late answer from before the opening closes nothing
    assert b.state is BreakerState.OPEN and b.trial_wait() == 1.0
    assert not b.start_trial()
    clock.t += 1.0
    assert b.start_trial() and b.state is BreakerState.HALF_OPEN and b.admit() is None
    clock.t += 0.45  # the PING's deadline
    b.end_trial(False)
    assert b.state is BreakerState.OPEN
    assert b.trial_wait() == pytest.approx(0.55)  # due 1 s after the last trial started
    clock.t += 0.55
    assert b.start_trial()
    b.end_trial(True)
    assert b.state is BreakerState.CLOSED and b.admit() == 1 and b.opens == 1


def test_a_lost_trial_is_replaced_after_reset():
    clock = Clock()
    b = CircuitBreaker(threshold=1, reset_s=1.0, clock=clock)
    b.record_failure(b.admit(), "connection")
    clock.t += 1.0
    assert b.start_trial()  # its task is cancelled and never reports
    clock.t += 0.5
    assert not b.start_trial()
    clock.t += 0.5
    assert b.start_trial()
