"""CircuitBreaker: a hypothesis state machine against a tiny reference model, plus examples."""

from __future__ import annotations

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kvpool.remote.breaker import BreakerState, CircuitBreaker


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class BreakerMachine(RuleBasedStateMachine):
    """The model: consecutive failures, when it opened, and whether a trial is out."""

    def __init__(self) -> None:
        super().__init__()
        self.clock = Clock()
        self.threshold, self.reset = 3, 1.0
        self.b = CircuitBreaker(self.threshold, self.reset, clock=self.clock)
        self.state = "closed"
        self.fails = 0
        self.opened = None
        self.trial = None
        self.admitted = False  # the last allow() answered True (a call is in flight)

    @rule(dt=st.sampled_from([0.0, 0.1, 0.5, 0.99, 1.0, 2.5]))
    def advance(self, dt):
        self.clock.t += dt

    @rule()
    def allow(self):
        now = self.clock.t
        if self.state == "closed":
            want = True
        elif self.state == "open":
            want = now - self.opened >= self.reset
            if want:
                self.state, self.trial = "half", now
        else:
            want = now - self.trial >= self.reset
            if want:
                self.trial = now
        assert self.b.allow() is want
        self.admitted = self.admitted or want

    @precondition(lambda self: self.admitted)
    @rule()
    def success(self):
        self.b.record_success()
        self.state, self.fails, self.opened, self.trial = "closed", 0, None, None
        self.admitted = False

    @precondition(lambda self: self.admitted)
    @rule()
    def failure(self):
        self.b.record_failure()
        if self.state == "closed":
            self.fails += 1
            if self.fails < self.threshold:
                return
        self.state, self.fails, self.opened, self.trial = "open", 0, self.clock.t, None
        self.admitted = False

    @invariant()
    def agrees(self):
        self.b.check_invariants()
        want = {"closed": BreakerState.CLOSED, "open": BreakerState.OPEN,
                "half": BreakerState.HALF_OPEN}[self.state]
        assert self.b.state is want


BreakerMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=40,
                                            deadline=None)
TestBreaker = BreakerMachine.TestCase


def test_opens_after_threshold_and_recloses_after_a_good_trial():
    clock = Clock()
    b = CircuitBreaker(threshold=2, reset_s=1.0, clock=clock)
    b.record_failure()
    assert b.allow() and b.state is BreakerState.CLOSED
    b.record_success()  # a success resets the count: failures must be consecutive
    b.record_failure()
    b.record_failure()
    assert b.state is BreakerState.OPEN and not b.allow() and b.opens == 1
    clock.t += 1.0
    assert b.allow() and b.state is BreakerState.HALF_OPEN
    assert not b.allow()  # one trial at a time
    b.record_failure()
    assert b.state is BreakerState.OPEN and not b.allow()
    clock.t += 1.0
    assert b.allow()
    b.record_success()
    assert b.state is BreakerState.CLOSED and b.opens == 1


def test_a_lost_trial_is_readmitted_after_reset():
    clock = Clock()
    b = CircuitBreaker(threshold=1, reset_s=1.0, clock=clock)
    b.record_failure()
    clock.t += 1.0
    assert b.allow()  # the trial's caller is cancelled and never reports
    clock.t += 0.5
    assert not b.allow()
    clock.t += 0.5
    assert b.allow()
