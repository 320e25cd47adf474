"""Throttle: "at most once every ``interval`` seconds", for each kind of event.

A fault a client can repeat at will (the connection cap reached, a message the endpoint picker
cannot decode, a malformed or abandoned KV-event replay) must not write one log line per try:
its WARNING is said at most once an interval, with what was counted meanwhile. Each owner keeps
its own counts; this only says when a line is due.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

__all__ = ["Throttle"]


class Throttle:
    """``due(kind)`` is True at most once every ``interval`` seconds for each ``kind``."""

    def __init__(self, interval: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.interval = interval
        self.clock = clock
        self._last: dict[str, float] = {}  # kind -> when it was last due

    def due(self, kind: str = "") -> bool:
        """True (and the next one an interval away) when ``kind`` is due now."""
        now = self.clock()
        if now - self._last.get(kind, -math.inf) < self.interval:
            return False
        self._last[kind] = now
        return True
