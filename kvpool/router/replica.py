"""One replica as the router sees it: its state, written by its beats (replicas.py) and by
the requests proxied there, and the work in flight there (``lease``), which ends when it goes
silent (replicas.py NOTE(liveness))."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from kvpool.router.outliers import Outlier

__all__ = ["Replica", "default_name"]


@dataclass(slots=True, eq=False)
class Replica:
    """One upstream ``kvpool serve``."""

    url: str  # base URL, no trailing slash (the CLI normalises it)
    name: str = ""  # its /metrics label (replicas.py NOTE(replica-series)); "": HOST:PORT
    healthy: bool = True  # written by its beat and by ReplicaSet.mark_down
    in_flight: int = 0  # requests this router is proxying to it now (load when lookup is late)
    replica_id: str | None = None  # from its lookup answers, for logs
    load: int = 0  # running + waiting its last /health or /metrics reported (all clients')
    heard: float = 0.0  # loop time it was last heard (replicas.py NOTE(liveness))
    # the reason its turn to unhealthy was logged with (connect_errors.py NOTE(why-down))
    down_why: str | None = None
    leases: set[asyncio.Timeout] = field(default_factory=set)  # its in-flight work
    outlier: Outlier = field(default_factory=Outlier)  # outliers.py NOTE(outlier)

    def __post_init__(self) -> None:
        self.name = self.name or default_name(self.url)

    def hear(self) -> None:
        """Something came from it now: an answer, or bytes of one (replicas.py
        NOTE(liveness))."""
        self.heard = asyncio.get_running_loop().time()

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

    def busy(self) -> int:
        """Its load as the router sees it without asking: this router's own requests there
        now, or what the replica reported at its last beat when that is more (traffic from
        other routers, pickers or direct clients; replicas.py NOTE(load))."""
        return max(self.in_flight, self.load)

    def end_leases(self) -> int:
        """End every request in flight here (each lease's block raises TimeoutError)."""
        now = asyncio.get_running_loop().time()
        for deadline in self.leases:
            deadline.reschedule(now)
        return len(self.leases)


def default_name(url: str) -> str:
    """A replica's /metrics label when it was given none: its URL's HOST:PORT (the scheme's
    port when the URL has none), nothing else of it (replicas.py NOTE(replica-series))."""
    parts = urlsplit(url)
    host = parts.hostname or "unknown"
    try:
        port = parts.port
    except ValueError:
        port = None
    port = port or (443 if parts.scheme == "https" else 80)
    return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
