"""Waiting for a RedisTier's circuit breaker to close by reading only its state: no tier call,
so what closes it is the tier's own health check; and :func:`warmed`, a warm-up that a loaded
host may answer late, waited out (NOTE(warmed))."""

from __future__ import annotations

import asyncio
import dataclasses
import time

import pytest

from kvpool.remote import BreakerState, RedisTier
from kvpool.remote.tier import RemoteStats

# NOTE(warmed): on CI's 2-core box under xdist a tier's warm-up misses its bound (the loop
# starved past SETUP_S, or a connect past connect_timeout) in some runs: it returns False,
# counts a timeout and opens the breaker, and the tier does the warm-up's work later by
# itself (NOTE(warm-later) in kvpool/remote/startup.py). A test whose subject is not that
# first answer uses warmed(): it waits for the breaker's health check to end (its task ends
# only once a trial closed the breaker and the owed work, INFO and its lines included,
# returned: HealthChecks in kvpool/remote/node_breakers.py), never calling warm_up again
# (that would say "is reachable" twice). Warm.stats() is the tier's stats less what the
# late answer counted (LATE's errors, the opening, the trials), so a test's exact counts
# keep their meaning; with a warm-up in time it is the tier's stats, unchanged.
LATE = ("timeout", "joined", "breaker_open")  # what a warm-up answered late counts
HEALTH_TASK = "redis-tier-health"  # the name of a breaker's health check task


@dataclasses.dataclass
class Warm:
    """A warmed tier and what its late warm-up counted (zeros when it answered in time)."""

    tier: RedisTier
    late: dict[str, int] = dataclasses.field(default_factory=dict)
    opens: int = 0
    checks: int = 0
    failed: int = 0
    said: frozenset[str] = frozenset()  # the LATE kinds the faults' log had said

    def seen(self) -> set[str]:
        """``tier.faults.seen`` less the kinds the late warm-up said."""
        return self.tier.faults.seen - self.said

    def stats(self) -> RemoteStats:
        """``tier.stats()`` less what the late warm-up counted (NOTE(warmed))."""
        s = self.tier.stats()
        left = {k: n - self.late.get(k, 0) for k, n in s.errors.items()}
        return dataclasses.replace(s, errors={k: n for k, n in left.items() if n},
                                   breaker_opens=s.breaker_opens - self.opens,
                                   health_checks=s.health_checks - self.checks,
                                   health_failed=s.health_failed - self.failed)


def _health_tasks() -> set[asyncio.Task]:
    return {t for t in asyncio.all_tasks() if t.get_name() == HEALTH_TASK and not t.done()}


async def warmed(tier: RedisTier, connections: int = 1, bound_s: float | None = None) -> Warm:
    """``tier.warm_up(connections)``, and if Redis answered it late, wait (``bound_s``; by
    default 20 s past the breaker's first trial) until the tier did its work (NOTE(warmed));
    the test fails with the tier's stats if it did not."""
    bound_s = 20.0 + tier.breaker.reset_s if bound_s is None else bound_s
    before = _health_tasks()
    if await tier.warm_up(connections):
        return Warm(tier)
    ours = _health_tasks() - before  # the checks the failed warm-up started (the tier's)
    pending = (await asyncio.wait(ours, timeout=bound_s))[1] if ours else ours
    if not ours or pending or tier.breaker.state is not BreakerState.CLOSED:
        why = "its work not done" if ours else "no health check to redo it (refused?)"
        pytest.fail(f"the warm-up failed, {why} within {bound_s:.0f} s: {tier.stats()}")
    s = tier.stats()
    return Warm(tier, {k: s.errors[k] for k in LATE if k in s.errors}, s.breaker_opens,
                s.health_checks, s.health_failed, frozenset(tier.faults.seen & set(LATE)))


async def wait_closed(tier: RedisTier, bound_s: float) -> float | None:
    """Seconds until the breaker is CLOSED, touching only its state (no tier call)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < bound_s:
        if tier.breaker.state is BreakerState.CLOSED:
            return time.monotonic() - t0
        await asyncio.sleep(0.02)
    return None
