"""Throttle: "at most once every ``interval`` seconds", for each kind of event.

A fault a client can repeat at will (the connection cap reached, a message the endpoint picker
cannot decode, a malformed or abandoned KV-event replay) must not write one log line per try:
its WARNING is said at most once an interval, with what was counted meanwhile. ``due`` only
says when a line is due, for owners that keep their own counts; a ``Tally`` keeps the count
too, so that none is left unsaid.

NOTE(said-counts): counting events and saying them only when a next event finds its WARNING due
leaves what came after the last WARNING unsaid until a next event that may never come: a burst
of 27 calls ended by the endpoint picker was logged as "ended 1 call(s)", and its refusals,
cuts and silent calls had the same gap. A ``Tally`` says its events at once when due; otherwise
it says them an interval after the first unsaid one (a timer on the running loop, so lines stay
at least an interval apart) or at ``Throttle.flush`` (its owner's stop), whichever comes
first. The counts said then add up to the events counted.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Callable

__all__ = ["Tally", "Throttle"]


class Throttle:
    """``due(kind)`` is True at most once every ``interval`` seconds for each ``kind``."""

    def __init__(self, interval: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self.clock = clock
        self._last: dict[str, float] = {}  # kind -> when it was last due
        self._tallies: list[Tally] = []  # what ``flush`` says

    def due(self, kind: str = "") -> bool:
        """True (and the next one an interval away) when ``kind`` is due now."""
        now = self.clock()
        if now - self._last.get(kind, -math.inf) < self.interval:
            return False
        self._last[kind] = now
        return True

    def tally(self, kind: str, log: logging.Logger, message: str) -> Tally:
        """A ``Tally`` of ``kind``'s events, said to ``log`` (NOTE(said-counts))."""
        tally = Tally(self, kind, log, message)
        self._tallies.append(tally)
        return tally

    def flush(self) -> None:
        """Say every tally's unsaid events now (NOTE(said-counts): its owner stops)."""
        for tally in self._tallies:
            tally.flush()


class Tally:
    """One kind of event, counted and said as one WARNING per interval at most: ``message``
    (%-style, mapping keys) with ``n``, the count since the last, and the latest event's
    details (NOTE(said-counts))."""

    def __init__(self, throttle: Throttle, kind: str, log: logging.Logger,
                 message: str) -> None:
        self.throttle, self.kind, self.log, self.message = throttle, kind, log, message
        self.unsaid = 0  # events since the last WARNING
        self.latest: dict[str, object] = {}  # the latest event's details, for ``message``
        self.timer: asyncio.TimerHandle | None = None  # says ``unsaid`` an interval later

    def add(self, n: int = 1, **latest: object) -> None:
        """``n`` events, the latest with ``latest``'s details: said now when due, else an
        interval later (one timer on the running loop) or at the flush."""
        self.unsaid += n
        self.latest = latest
        if self.throttle.due(self.kind):
            self.flush()
        elif self.timer is None:
            self.timer = asyncio.get_running_loop().call_later(self.throttle.interval,
                                                               self.flush)

    def flush(self) -> None:
        """Say the events since the last WARNING, if any (and the next an interval away)."""
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.unsaid:
            self.throttle.due(self.kind)  # for its mark alone, when said before it was due
            self.log.warning(self.message, {**self.latest, "n": self.unsaid})
            self.unsaid = 0
