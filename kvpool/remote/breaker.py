"""A circuit breaker for the remote tier: after ``threshold`` consecutive failures every call is
refused at once (a miss, no network) until a half-open trial succeeds.

Invariant (``check_invariants``)::

    CLOSED     0 <= failures < threshold, no trial
    OPEN       opened_at set; allow() is False until now >= opened_at + reset_s
    HALF_OPEN  exactly one trial admitted at trial_at; others are refused until it reports,
               or until reset_s later (a trial whose caller was cancelled never reports:
               without this the breaker would stay half-open for ever)

    CLOSED --threshold consecutive failures--> OPEN --reset_s--> HALF_OPEN
    HALF_OPEN --success--> CLOSED      HALF_OPEN --failure--> OPEN (clock restarts)

Synchronous and lock-free: it is used from one event loop. The clock is injectable so the
hypothesis state machine drives time explicitly.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from enum import IntEnum

from kvpool.errors import InvariantError


class BreakerState(IntEnum):
    """Values are what ``kvpool_remote_breaker_state`` exports."""

    CLOSED = 0
    HALF_OPEN = 1
    OPEN = 2


class CircuitBreaker:
    __slots__ = ("threshold", "reset_s", "_clock", "_state", "_failures", "_opened_at",
                 "_trial_at", "opens")

    def __init__(self, threshold: int = 3, reset_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if threshold < 1:
            raise ValueError("threshold must be >= 1")
        if reset_s <= 0:
            raise ValueError("reset_s must be > 0")
        self.threshold = threshold
        self.reset_s = reset_s
        self._clock = clock
        self._state = BreakerState.CLOSED
        self._failures = 0  # consecutive failures while CLOSED
        self._opened_at: float | None = None  # when it last went OPEN
        self._trial_at: float | None = None  # when the HALF_OPEN trial was admitted
        self.opens = 0  # times it went CLOSED -> OPEN (a counter for tests and logs)

    @property
    def state(self) -> BreakerState:
        return self._state

    def allow(self) -> bool:
        """May a call touch the network now? A True in HALF_OPEN admits the single trial."""
        st = self._state
        if st is BreakerState.CLOSED:
            return True
        now = self._clock()
        if st is BreakerState.OPEN:
            if now - self._opened_at < self.reset_s:
                return False
            self._state = BreakerState.HALF_OPEN
            self._trial_at = now
            return True
        if now - self._trial_at >= self.reset_s:  # the last trial never reported
            self._trial_at = now
            return True
        return False

    def record_success(self) -> None:
        self._state = BreakerState.CLOSED
        self._failures = 0
        self._opened_at = self._trial_at = None

    def record_failure(self) -> None:
        if self._state is BreakerState.CLOSED:
            self._failures += 1
            if self._failures < self.threshold:
                return
            self.opens += 1
        # NOTE(breaker): a failure reported while OPEN comes from a call admitted before it
        # opened; restarting the clock then is harmless and keeps one rule for every state.
        self._state = BreakerState.OPEN
        self._failures = 0
        self._opened_at = self._clock()
        self._trial_at = None

    def check_invariants(self) -> None:
        st = self._state
        ok = {
            BreakerState.CLOSED: 0 <= self._failures < self.threshold
            and self._opened_at is None and self._trial_at is None,
            BreakerState.OPEN: self._opened_at is not None and self._trial_at is None
            and self._failures == 0,
            BreakerState.HALF_OPEN: self._trial_at is not None and self._failures == 0,
        }[st]
        if not ok:
            raise InvariantError(f"breaker {st.name}: failures={self._failures} "
                                 f"opened_at={self._opened_at} trial_at={self._trial_at}")
