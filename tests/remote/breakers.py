"""Waiting for a RedisTier's circuit breaker to close by reading only its state: no tier call,
so what closes it is the tier's own health check."""

from __future__ import annotations

import asyncio
import time

from kvpool.remote import BreakerState, RedisTier


async def wait_closed(tier: RedisTier, bound_s: float) -> float | None:
    """Seconds until the breaker is CLOSED, touching only its state (no tier call)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < bound_s:
        if tier.breaker.state is BreakerState.CLOSED:
            return time.monotonic() - t0
        await asyncio.sleep(0.02)
    return None
