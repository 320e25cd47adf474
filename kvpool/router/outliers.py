"""Passive outlier ejection: a replica that fails request after request is taken out of the
picks for a while, as Envoy's outlier detection (consecutive_5xx) takes out a host.

NOTE(outlier): a replica whose engine is broken while its API still answers (every request a
fast 500, /health fine) passes its beats and, answering at once, never looks loaded, so the
load guard (scoring.py) never trips: it kept its share of the traffic, and, holding a hot
prefix (or claiming to), all of that prefix's traffic, failing each request. What the proxied
requests meet is the signal::

    CONSECUTIVE_FAILURES (5) answers in a row that are 5xx, or attempts that found no
    connection or lost it, an answer that broke off or went silent after its 200 among them
    (a 503 refusal of a full replica is back-pressure: neither a failure nor a success)
    -> ejected: out of new picks for BASE_EJECTION (30 s) times its ejection
    count, at most MAX_EJECTION (300 s); logged once (WARNING) with the replica and its last
    failure; counted in kvpool_router_replica_ejections_total{replica}
    any other answer -> the run starts again
    the time is up -> back in the picks, its run at 0 (as Envoy's checkHostForUneject resets
    its consecutive counters): CONSECUTIVE_FAILURES new failures in a row eject it again,
    for longer while its ejection count has not decayed

Before, a readmitted replica was on trial (its run preset to CONSECUTIVE_FAILURES - 1), so
one failure ejected it again: a client sending one request the replicas fail (a 500 it causes)
per ejection kept a healthy replica out for good, for longer each time.

The ejection count falls by one for each BASE_EJECTION spent in the picks since the last
readmission (Envoy decrements it per interval a host stays healthy), so a replica that failed
once long ago is ejected for the base time again. Never the last: a replica is not ejected
when that would leave no healthy replica in the picks, nor more than half of the healthy ones
(MAX_EJECTED_SHARE, Envoy's max_ejection_percent), and when the picks would still be empty
(the others went unhealthy since) the ejected ones are picked as if in rotation, as Envoy's
panic threshold routes to every host. The values are Envoy's defaults (its max_ejection_percent
is 10; with two replicas here one of them may go); the router has no flags for them: the
constants below, or ``Router(outliers=OutlierDetection(...))`` (docs/architecture.md, Router).
Ejection is the router's own view; /health, the ``kvpool_router_replica_healthy`` gauge and a
Responses follow-up to the replica holding its response (affinity.py) are unchanged.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aiohttp import web

if TYPE_CHECKING:
    from kvpool.router.replica import Replica
    from kvpool.router.upstream import Failure

__all__ = ["BASE_EJECTION", "CONSECUTIVE_FAILURES", "MAX_EJECTED_SHARE", "MAX_EJECTION",
           "Outlier", "OutlierDetection", "failure_of"]

log = logging.getLogger("kvpool.router")
CONSECUTIVE_FAILURES = 5  # Envoy's consecutive_5xx default
BASE_EJECTION = 30.0  # seconds; Envoy's base_ejection_time
MAX_EJECTION = 300.0  # seconds; Envoy's max_ejection_time
MAX_EJECTED_SHARE = 0.5  # of the healthy replicas; never all of them
_CONNECTION_KINDS = {"down": "no connection", "failed": "connection lost",
                     "silent": "went silent"}


@dataclass(slots=True)
class Outlier:
    """One replica's record (written by OutlierDetection only)."""

    failures: int = 0  # consecutive failed attempts
    count: int = 0  # the ejection multiplier (decays while it is in the picks)
    until: float = 0.0  # monotonic time its ejection ends; 0: in the picks
    back: float = 0.0  # monotonic time it was last readmitted
    total: int = 0  # ejections ever (the counter's value)


def failure_of(out: web.StreamResponse | Failure) -> str | None:
    """What an attempt's outcome counts as: its failure's description ("500", "no
    connection"), "" for a full replica's refusal (neither), None for a success."""
    if isinstance(out, web.StreamResponse):
        return str(out.status) if out.status >= 500 else None
    return _CONNECTION_KINDS.get(out.kind, "")


class OutlierDetection:
    """NOTE(outlier) over the replicas given to ``picks`` and ``observe``."""

    def __init__(self, consecutive: int = CONSECUTIVE_FAILURES,
                 base: float = BASE_EJECTION, longest: float = MAX_EJECTION,
                 share: float = MAX_EJECTED_SHARE) -> None:
        if consecutive < 1 or not 0 < base <= longest < math.inf or not 0 < share < 1:
            raise ValueError("outlier detection: use consecutive >= 1, 0 < base <= longest "
                             "(seconds, finite) and 0 < share < 1")
        self.consecutive = consecutive
        self.base = base
        self.longest = longest
        self.share = share

    def picks(self, healthy: Sequence[Replica]) -> list[Replica]:
        """The ``healthy`` replicas new requests may go to: those not ejected, or all of
        them when every one is (NOTE(outlier): never the last)."""
        now = time.monotonic()
        kept = [r for r in healthy if self._admits(r, now)]
        return kept or list(healthy)

    def _admits(self, r: Replica, now: float) -> bool:
        o = r.outlier
        if not o.until:
            return True
        if now < o.until:
            return False
        o.until, o.back, o.failures = 0.0, now, 0  # NOTE(outlier): a new run, as Envoy's
        log.info("replica %s is back in the picks after its ejection", r.url)
        return True

    def observe(self, r: Replica, out: web.StreamResponse | Failure,
                healthy: Callable[[], Sequence[Replica]]) -> None:
        """Count ``out``, an attempt on ``r``, and eject ``r`` when it is the last of a run
        (``healthy``: the replicas passing their beats now, asked only then)."""
        what, o = failure_of(out), r.outlier
        if what is None:
            o.failures = 0
        elif what and not o.until:  # an ejected one still serves what only it holds
            o.failures += 1
            if o.failures >= self.consecutive and self._may_eject(r, healthy()):
                self._eject(r, what)

    def _may_eject(self, r: Replica, healthy: Sequence[Replica]) -> bool:
        """Whether ejecting ``r`` leaves a healthy replica in the picks and ejects at most
        ``share`` of them."""
        now = time.monotonic()
        ejected = sum(1 for x in healthy if x.outlier.until > now)
        others = [x for x in healthy if x is not r and not x.outlier.until > now]
        return bool(others) and ejected + 1 <= max(1, int(len(healthy) * self.share))

    def _eject(self, r: Replica, what: str) -> None:
        o, now = r.outlier, time.monotonic()
        steps = int(self.longest // self.base) + 1  # past it the time no longer grows
        if o.back:
            o.count = max(0, o.count - int((now - o.back) // self.base))
        o.count = min(o.count + 1, steps)
        seconds = min(self.base * o.count, self.longest)
        log.warning("replica %s ejected for %g s: %d failed requests in a row, the last %s "
                    "(NOTE(outlier) in kvpool/router/outliers.py)", r.url, seconds,
                    o.failures, what)
        o.until, o.total, o.failures = now + seconds, o.total + 1, 0
