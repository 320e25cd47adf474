"""The replicas a router knows, and a poller that keeps their health current.

Invariant: ``healthy()`` lists, in the order given on the command line, the replicas whose last
/health answer was 200 and that have not refused a connection since. A connect error found while
proxying marks a replica down at once (``mark_down``); only the poller brings it back, so a dead
replica costs at most one failed connect per poll interval.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass

import aiohttp

__all__ = ["Replica", "ReplicaSet"]

log = logging.getLogger("kvpool.router")


@dataclass(slots=True)
class Replica:
    """One upstream ``kvpool serve``."""

    url: str  # base URL, no trailing slash (the CLI normalises it)
    healthy: bool = True  # written by the poller and by mark_down
    in_flight: int = 0  # requests this router is proxying to it now (load when lookup is late)
    replica_id: str | None = None  # from its lookup answers, for logs


class ReplicaSet:
    """The replica list plus the /health poll loop (``run`` is the task body)."""

    def __init__(self, urls: list[str], *, interval: float = 1.0, timeout: float = 0.5) -> None:
        if not urls:
            raise ValueError("router: give at least one --replica URL")
        self.replicas = [Replica(u.rstrip("/")) for u in urls]
        self.interval = interval  # seconds between polls
        self.timeout = timeout  # seconds a /health answer may take
        self.polls = 0  # completed poll rounds (tests wait on it)

    def healthy(self) -> list[Replica]:
        return [r for r in self.replicas if r.healthy]

    def mark_down(self, replica: Replica) -> None:
        if replica.healthy:
            log.warning("replica %s refused a connection: skipped until /health answers",
                        replica.url)
        replica.healthy = False

    async def poll_once(self, session: aiohttp.ClientSession) -> None:
        async def one(r: Replica) -> None:
            ok = False
            with contextlib.suppress(aiohttp.ClientError, asyncio.TimeoutError, OSError):
                async with session.get(r.url + "/health",
                                       timeout=aiohttp.ClientTimeout(total=self.timeout)) as resp:
                    ok = resp.status == 200
            if ok != r.healthy:
                log.info("replica %s is %s", r.url, "healthy" if ok else "unhealthy")
            r.healthy = ok

        await asyncio.gather(*(one(r) for r in self.replicas))
        self.polls += 1

    async def run(self, session: aiohttp.ClientSession) -> None:
        """Poll every ``interval`` seconds (the caller did the first poll before serving)."""
        while True:
            await asyncio.sleep(self.interval)
            await self.poll_once(session)
