"""The tier's setup, once Redis answers: the warm-up's work (the pool's connections, the probe
script, a cluster's slot map: NOTE(warm-pool) in ``redis_tier.py``), then ``INFO`` (a server
the tier must refuse, settings that hurt, that it is reachable), the secret marker
(``secret_marker.py``) and a cluster's full-coverage warning (``coverage.py``). At the
replica's start, and again each time the health check closes the tier's breaker.

NOTE(warm-later): a warm-up that Redis did not answer within ``SETUP_S`` (hung, or slow: a
loaded host, a ``CLIENT PAUSE``, a ``DEBUG SLEEP``) opened the breaker, and the health check
closed it once a PING answered, but its work was never done again: the replica served on one
connection (the PING's), each request's fetch opening the others on the loop, each master's
first probe a NOSCRIPT round trip, and a fragile cluster never said. What it still owes is
kept and done when the breaker closes, before ``INFO``, under the same bound, so a replica
that met a slow Redis at start ends up as one that did not, with no request waiting on it.
Not a retry at start: a hung Redis (SIGSTOP: the kernel still accepts connections) looks the
same as a slow one there, and the replica would wait twice as long to serve misses.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from kvpool.remote.breaker import BreakerState, CircuitBreaker
from kvpool.remote.clients import TierClient
from kvpool.remote.coverage import warn_fragile
from kvpool.remote.diagnose import OUTAGES, REFUSED_AT_START, FaultLog
from kvpool.remote.keys import Namespace
from kvpool.remote.replies import NO_INFO, info_of
from kvpool.remote.secret_marker import check_secret
from kvpool.remote.segments import PROBE_LUA
from kvpool.remote.tier import RemoteStats

log = logging.getLogger("kvpool.remote")

# NOTE(setup): the bound of work no request waits on: the warm-up and a cluster's slot map
# refresh in the health check (CLUSTER SLOTS and the COMMAND table redis-py parses: ~0.1 s of
# CPU, past the op deadline on a loaded host). INFO too: under a request's deadline (0.25 s) a
# loaded host that had just answered the warm-up's connections and script was said "did not
# answer" at startup, and an INFO late after an outage reopened the breaker it had closed.
SETUP_S = 2.0
FAILED = object()  # sentinel: the tier's call failed or was refused (already counted)

# RedisTier's call: (op, nbytes, fn, bound) -> the result, or FAILED
Call = Callable[[str, int, Callable[[], Awaitable[Any]], float], Awaitable[Any]]


class Setup:
    """The setup of one tier: ``refusal`` names a server the tier must not use (INFO's, or
    the warm-up's: NOTE(refused-at-start)), None while it may."""

    __slots__ = ("refusal", "_call", "_client", "_faults", "_breaker", "_ns", "_stats",
                 "_ping_s", "_owed")

    def __init__(self, call: Call, client: TierClient, faults: FaultLog,
                 breaker: CircuitBreaker, namespace: Namespace, stats: RemoteStats,
                 ping_s: float) -> None:
        self.refusal: str | None = None
        self._call = call
        self._client = client
        self._faults = faults
        self._breaker = breaker
        self._ns = namespace
        self._stats = stats
        self._ping_s = ping_s  # the health check's PING deadline on one server
        self._owed = 0  # connections the warm-up still has to open (NOTE(warm-later))

    async def warm_up(self, n: int) -> bool:
        """``RedisTier.warm_up`` with ``n`` connections: False (said) when Redis did not
        answer or the tier refuses it; what Redis did not answer is owed (NOTE(warm-later))."""
        faults = self._faults
        faults.last, faults.held = None, []  # NOTE(one-startup-line) in diagnose.py
        self._owed = n
        try:
            if (ok := await self.answered()) is not None:
                return ok
            self.refusal = self._failed(SETUP_S if self._client.pool is None else self._ping_s)
            return False
        finally:
            self._say_held()  # what the startup line did not say

    def _failed(self, ping_s: float) -> str | None:
        """The warm-up failed with the faults' ``last`` (None: the breaker was open, nothing
        sent): say which it was, true to what happens next (NOTE(startup-line) in
        diagnose.py), with the fix of an outage held (NOTE(one-startup-line)); ``ping_s``:
        the deadline of the health check's PING. The kind when the tier must refuse the
        server (NOTE(refused-at-start)), else None."""
        faults, breaker = self._faults, self._breaker
        kind = faults.last
        if kind is not None and kind not in OUTAGES:
            self._say_held()  # first: the line says "the fix is logged above"
            log.warning("remote tier %s answered at startup but cannot serve the tier (%s; "
                        "the fix is logged above): serving without it (requests recompute) "
                        "until the server's settings or --remote-url are fixed; no retry "
                        "helps before that", faults.where, kind)
            return kind if kind in REFUSED_AT_START else None
        every = max(breaker.reset_s, ping_s) if kind == "timeout" else breaker.reset_s
        if breaker.state is not BreakerState.CLOSED:  # its health check runs (breaker.py)
            then = (f"it retries: the tier PINGs it about every {every:.1f} s and uses it "
                    "again once one answers")
        else:  # a weak failure left it closed
            then = (f"requests keep trying it; after {breaker.threshold} failures in a row "
                    f"the tier PINGs it about every {every:.1f} s instead")
        said = "did not answer in time" if kind == "timeout" else "is not reachable"
        log.warning("remote tier %s %s at startup (%s): serving without it (requests "
                    "recompute); %s%s", faults.where, said, kind or "breaker open", then,
                    "".join(f"; {fix}" for fix in faults.release()))
        return None

    def _say_held(self) -> None:
        """Log the outage fixes the faults hold, each on its line as ``FaultLog.note`` says
        one (NOTE(one-startup-line))."""
        for fix in self._faults.release():
            log.warning("remote tier %s: %s (each failure is a miss: requests recompute)",
                        self._faults.where, fix)

    async def answered(self) -> bool | None:
        """Redis answers (at the warm-up, or the tier's breaker closed): the warm-up's owed
        work, then :meth:`_inspect`. None when no Redis answered (the breaker informed)."""
        n, client = self._owed, self._client
        if n:
            opened = await self._call("warm_up", 0, lambda: client.open(n, PROBE_LUA), SETUP_S)
            if opened is FAILED:
                return None
            self._owed = 0
        ok = await self._inspect()
        if ok and n and client.kind == "cluster":  # NOTE(full-coverage)
            await warn_fragile(client.redis, self._faults, SETUP_S)
        return ok

    async def _inspect(self) -> bool | None:
        """Read INFO, refuse a server the tier must not use, warn (once) on settings that
        hurt, and say that the tier is reachable. False when refused, None when no Redis
        answered (gone, not Redis).

        NOTE(info-advisory): INFO only words warnings and an OOM's fix, so a user without
        ``+info`` is served, said once with the ACL fix; its NOPERM no longer opens the
        breaker (which flapped every reset_s, the line said each time)."""
        faults, redis = self._faults, self._client.redis
        info = await self._call("info", 0, lambda: info_of(redis), SETUP_S)
        if info is FAILED:  # an error reply (INFO renamed), or Redis gone or no Redis
            if faults.last == "protocol" or faults.last in OUTAGES:
                return None
            faults.once("no-info", "INFO not readable: the server's settings are unchecked")
            usable = self._breaker.state is BreakerState.CLOSED
        elif not isinstance(info, Mapping):  # the ACL's NOPERM
            faults.once("no-info", NO_INFO.format(detail=info))
            log.info("remote tier %s is reachable (settings unchecked)", faults.where)
            usable = True
        else:
            self.refusal = faults.inspected(info, cluster=self._client.kind == "cluster")
            usable = self.refusal is None
        if usable:  # NOTE(secret-marker)
            await check_secret(redis, self._ns, faults, self._stats, SETUP_S)
        return usable
