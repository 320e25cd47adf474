"""The replicas a router knows, and a heartbeat per replica that keeps their state current.

Each replica has its own beat task: ``GET /health`` every ``interval`` seconds, bounded by
``timeout``. What a beat finds::

    200                      -> healthy (new requests may go there), heard now
    another status, refused  -> not healthy (no new requests; its in-flight ones go on: a
                                draining replica refuses connections and /health but finishes
                                what it runs, and a killed one breaks its connections itself)
    no answer in ``timeout``  -> not healthy; once nothing was heard for ``down_after`` seconds
                                the replica is *silent* (stopped, hung, partitioned): every
                                request the router has in flight there ends now (``lease``)

NOTE(liveness): a silent replica's open connections never fail by themselves, and a first-byte
timeout cannot tell it from a long prefill (many seconds before the first token on a real
model). The replica's own /health, answered by its event loop while the engine computes, is
the signal: a request ends when its replica stops answering, never because it is slow.

Invariant: ``healthy()`` lists, in the order given on the command line, the replicas whose last
beat was a 200 and that have not refused a connection since; ``mark_down`` (a refused connect
found while proxying) takes a replica out at once, and only a beat brings it back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import aiohttp

__all__ = ["DEFAULT_DOWN_AFTER", "DEFAULT_INTERVAL", "Replica", "ReplicaSet"]

log = logging.getLogger("kvpool.router")
DEFAULT_INTERVAL = 0.5  # seconds between two beats of one replica
DEFAULT_DOWN_AFTER = 2.0  # seconds without any /health answer before in-flight requests end
_CLIENT_ERRORS = (aiohttp.ClientError, OSError)


@dataclass(slots=True, eq=False)
class Replica:
    """One upstream ``kvpool serve``."""

    url: str  # base URL, no trailing slash (the CLI normalises it)
    healthy: bool = True  # written by its beat and by ReplicaSet.mark_down
    in_flight: int = 0  # requests this router is proxying to it now (load when lookup is late)
    replica_id: str | None = None  # from its lookup answers, for logs
    heard: float = 0.0  # loop time of its last /health answer of any kind
    leases: set[asyncio.Timeout] = field(default_factory=set)  # its in-flight work

    @contextlib.asynccontextmanager
    async def lease(self, *, counted: bool = True) -> AsyncIterator[asyncio.Timeout]:
        """Work in flight here (``counted``: a request, part of ``in_flight``; a lookup is
        not); the block ends with TimeoutError when the replica goes silent
        (``deadline.expired()`` then tells it from other timeouts)."""
        async with asyncio.timeout(None) as deadline:
            self.in_flight += counted
            self.leases.add(deadline)
            try:
                yield deadline
            finally:
                self.in_flight -= counted
                self.leases.discard(deadline)

    def end_leases(self) -> int:
        """End every request in flight here (each lease's block raises TimeoutError)."""
        now = asyncio.get_running_loop().time()
        for deadline in self.leases:
            deadline.reschedule(now)
        return len(self.leases)


class ReplicaSet:
    """The replica list plus one beat task per replica (``run`` is the task body)."""

    def __init__(self, urls: list[str], *, interval: float = DEFAULT_INTERVAL,
                 timeout: float = 0.5, down_after: float = DEFAULT_DOWN_AFTER) -> None:
        if not urls:
            raise ValueError("router: give at least one --replica URL")
        if interval <= 0 or timeout <= 0 or down_after <= 0:
            raise ValueError("router: the health interval, timeout and down-after must be > 0 "
                             "seconds")
        self.replicas = [Replica(u.rstrip("/")) for u in urls]
        self.interval = interval
        self.timeout = timeout  # seconds one /health answer may take
        self.down_after = down_after
        self.polls = 0  # completed beats of all replicas (tests wait on it)
        self.silenced = 0  # requests ended because their replica went silent (monotonic)

    def healthy(self) -> list[Replica]:
        return [r for r in self.replicas if r.healthy]

    def mark_down(self, replica: Replica) -> None:
        if replica.healthy:
            log.warning("replica %s refused a connection: skipped until /health answers",
                        replica.url)
        replica.healthy = False

    async def beat(self, session: aiohttp.ClientSession, r: Replica) -> None:
        """One /health probe of ``r`` and what it means (module docstring)."""
        loop = asyncio.get_running_loop()
        status = None
        with contextlib.suppress(*_CLIENT_ERRORS, asyncio.TimeoutError):
            try:
                async with session.get(r.url + "/health", timeout=aiohttp.ClientTimeout(
                        total=self.timeout)) as resp:
                    status = resp.status
            except aiohttp.ClientConnectorError:
                status = 0  # refused: the host answered, nobody listens
        ok = status == 200
        if ok != r.healthy:
            log.info("replica %s is %s", r.url, "healthy" if ok else "unhealthy")
        r.healthy = ok
        if status is not None:
            r.heard = loop.time()
        elif loop.time() - r.heard >= self.down_after and r.leases:
            self.silenced += r.end_leases()
            log.warning("replica %s has not answered /health for %.1f s: ended its in-flight "
                        "requests", r.url, loop.time() - r.heard)
        self.polls += 1

    async def poll_once(self, session: aiohttp.ClientSession) -> None:
        await asyncio.gather(*(self.beat(session, r) for r in self.replicas))

    async def run(self, session: aiohttp.ClientSession) -> None:
        """Beat every replica every ``interval`` seconds (the caller polled once already)."""
        async with asyncio.TaskGroup() as tg:
            for r in self.replicas:
                tg.create_task(self._beats(session, r), name=f"router-health {r.url}")

    async def _beats(self, session: aiohttp.ClientSession, r: Replica) -> None:
        while True:  # one beat in flight per replica: a silent one delays only its own beats
            await asyncio.sleep(self.interval)
            await self.beat(session, r)
