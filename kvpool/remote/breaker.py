"""A circuit breaker for the remote tier: once open, every user call is refused at once (a
miss, no network) until a background health check (a PING the tier sends itself) succeeds.

Rules::

    CLOSED     a "strong" failure (a missed deadline, a refused connection, a READONLY or
               NOPERM reply: NOTE(pause)) opens it at once; any other failure kind opens it
               after ``threshold`` consecutive ones
    OPEN       admit() refuses; a trial is due ``reset_s`` after it opened (or after the last
               trial started), so the tier pings about every ``reset_s``
    HALF_OPEN  the tier's trial PING is in flight; admit() still refuses. A trial that never
               reports (its task cancelled) is replaced once it is ``reset_s`` old

    CLOSED --strong failure, or threshold failures--> OPEN --due--> HALF_OPEN
    HALF_OPEN --ping ok--> CLOSED      HALF_OPEN --ping failed--> OPEN (next due reset_s
                                                                 after that trial started)

Events, not calls: ``admit()`` hands each call the breaker's ``epoch``, and every opening
starts a new epoch. A failure reported with an older epoch comes from a call that was already
in flight when the breaker opened (concurrent calls to a hung Redis time out together): it is
part of the event that opened it and counts for nothing. A success with an older epoch says
nothing about Redis now either: only the health check closes the breaker.

Why the trial is not a user call: with Redis hung, a user request admitted as the trial pays
the whole deadline (about one request per second per replica). A PING from the tier's own task
costs no request anything, so while the breaker is open no request ever waits on Redis.

A Redis Cluster tier has one per master node besides its own (NOTE(node-breaker),
``node_breakers.py``). Synchronous and lock-free: it is used from one event loop. The clock
is injectable so the hypothesis state machine drives time explicitly.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from enum import IntEnum

from kvpool.errors import InvariantError

# NOTE(pause): a READONLY reply (a replica addressed as the master) or NOPERM (an ACL user
# without a command or key the tier needs) is no outage, but no retry of a request heals it
# either: it opens the breaker at once, and ``cause`` tells the tier's health check to try the
# tier's own commands, not a PING (which such a server answers), before closing it.
PAUSE_KINDS = frozenset({"readonly", "noperm"})
# NOTE(clusterdown): a CLUSTERDOWN reply (``slotdown``: the cluster is down, cluster_state:fail,
# or that node serves none of the call's slots) comes at once, but every call to that node
# gets it again until an operator or a failover mends the cluster: it opens the node's breaker
# as an outage does (its calls are misses with no network), and the trial waits for the node
# to say cluster_state:ok (or to serve no slot any more: NOTE(node-breaker)).
DOWN_KINDS = frozenset({"slotdown"})
# one of these opens the breaker at once
STRONG_KINDS = frozenset({"timeout", "refused"}) | PAUSE_KINDS | DOWN_KINDS


class BreakerState(IntEnum):
    """Values are what ``kvpool_remote_breaker_state`` exports."""

    CLOSED = 0
    HALF_OPEN = 1
    OPEN = 2


class CircuitBreaker:
    __slots__ = ("threshold", "reset_s", "_clock", "_state", "_failures", "_due_at",
                 "_trial_at", "_epoch", "opens", "cause")

    def __init__(self, threshold: int = 3, reset_s: float = 1.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if threshold < 1:
            raise ValueError("threshold must be >= 1")
        if reset_s <= 0:
            raise ValueError("reset_s must be > 0")
        self.threshold = threshold  # consecutive weak failures that open it
        self.reset_s = reset_s
        self._clock = clock
        self._state = BreakerState.CLOSED
        self._failures = 0  # consecutive weak failures of the current epoch while CLOSED
        self._due_at: float | None = None  # OPEN: when the next trial is due
        self._trial_at: float | None = None  # HALF_OPEN: when the trial started
        self._epoch = 0  # +1 at every opening
        self.opens = 0  # times it went CLOSED -> OPEN (== epoch; a counter for stats)
        self.cause: str | None = None  # the failure kind of the latest opening

    def twin(self) -> CircuitBreaker:
        """A new closed breaker with this one's settings and clock (a cluster node's:
        NOTE(node-breaker) in ``node_breakers.py``)."""
        return CircuitBreaker(self.threshold, self.reset_s, self._clock)

    @property
    def state(self) -> BreakerState:
        return self._state

    @property
    def epoch(self) -> int:
        return self._epoch

    # -- user calls ----------------------------------------------------------------------
    def admit(self) -> int | None:
        """The epoch to report back with, or None: refused (not CLOSED), no network."""
        return self._epoch if self._state is BreakerState.CLOSED else None

    def record_success(self, epoch: int) -> None:
        if epoch == self._epoch and self._state is BreakerState.CLOSED:
            self._failures = 0

    def record_failure(self, epoch: int, kind: str) -> bool:
        """Report a failed call of ``kind``; True when it counts as a new failure event
        (False: the call was admitted before the current opening and is part of it)."""
        if epoch != self._epoch or self._state is not BreakerState.CLOSED:
            return False
        self._failures += 1
        if kind in STRONG_KINDS or self._failures >= self.threshold:
            self._open(self._clock(), kind)
        return True

    # -- the tier's health check ---------------------------------------------------------
    def trial_wait(self) -> float | None:
        """Seconds until a trial may start (0 when due); None when CLOSED (nothing to do)."""
        st = self._state
        if st is BreakerState.CLOSED:
            return None
        start = self._due_at if st is BreakerState.OPEN else self._trial_at + self.reset_s
        return max(0.0, start - self._clock())

    def start_trial(self) -> bool:
        """Begin a trial if one is due (OPEN past its due time, or a lost HALF_OPEN trial)."""
        if self.trial_wait() != 0.0:
            return False
        self._state = BreakerState.HALF_OPEN
        self._due_at = None
        self._trial_at = self._clock()
        return True

    def end_trial(self, ok: bool) -> None:
        if self._state is not BreakerState.HALF_OPEN:
            return
        if ok:
            self._state = BreakerState.CLOSED
            self._failures = 0
            self._due_at = self._trial_at = None
        else:
            # NOTE(period): due reset_s after the trial *started*, so trials run about every
            # reset_s whatever the trial's own deadline.
            self._state = BreakerState.OPEN
            self._due_at = self._trial_at + self.reset_s
            self._trial_at = None

    def _open(self, now: float, kind: str) -> None:
        self.cause = kind
        self._state = BreakerState.OPEN
        self._failures = 0
        self._due_at = now + self.reset_s
        self._trial_at = None
        self._epoch += 1
        self.opens += 1

    def check_invariants(self) -> None:
        st = self._state
        ok = self.opens == self._epoch and {
            BreakerState.CLOSED: 0 <= self._failures < self.threshold
            and self._due_at is None and self._trial_at is None,
            BreakerState.OPEN: self._due_at is not None and self._trial_at is None
            and self._failures == 0,
            BreakerState.HALF_OPEN: self._trial_at is not None and self._due_at is None
            and self._failures == 0,
        }[st]
        if not ok:
            raise InvariantError(f"breaker {st.name}: failures={self._failures} "
                                 f"due_at={self._due_at} trial_at={self._trial_at} "
                                 f"epoch={self._epoch} opens={self.opens}")
