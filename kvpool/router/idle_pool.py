"""IdlePool: the router's idle keep-alive connections to its replicas, per replica base URL
(wire.py's UpstreamPool takes them from here and puts them back; wire.py NOTE(idle)).

NOTE(sweep): a connection idle for ``keepalive`` seconds is never reused, so it is closed
then, by a timer that runs while any connection is idle, not when the next request to its
replica looks for one. Before, a replica removed from the router's set (a scale-down, a
rolling restart on new addresses) kept every connection the router had pooled to it: 300
replicas churned through the admin API left 2037 sockets open and 23 KB each of Python heap
for the router's life, whether or not the replicas closed their side.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any

__all__ = ["IdlePool"]


class IdlePool:
    """Invariant: ``conns`` holds no empty deque; a timer is pending iff ``conns`` is not
    empty (until ``close``)."""

    def __init__(self, keepalive: float) -> None:
        self.keepalive = keepalive  # seconds an idle connection may be reused (NOTE(idle))
        self.conns: dict[str, deque[Any]] = {}
        self._timer: asyncio.TimerHandle | None = None

    def put(self, base: str, conn: Any) -> None:
        """``conn`` (wire.py's connection, its answer read whole) idle from now."""
        conn.idle_since = conn.loop.time()
        conn.on_data = None  # wire.py NOTE(on-data)
        self.conns.setdefault(base, deque()).append(conn)
        if self._timer is None:
            self._timer = conn.loop.call_later(self.keepalive, self._sweep)

    def take(self, base: str) -> Any:
        """The newest reusable idle connection to ``base`` (wire.py NOTE(idle)), or None;
        the ones found unusable on the way are closed."""
        q = self.conns.get(base)
        if not q:
            return None
        now = asyncio.get_running_loop().time()
        found = None
        while q and found is None:
            c = q.pop()  # the newest first (NOTE(idle))
            if self._fresh(c, now) and c.quiet():
                found = c
            else:
                c.close()
        if not q:
            del self.conns[base]
        return found

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for q in self.conns.values():
            for c in q:
                c.close()
        self.conns.clear()

    def _fresh(self, conn: Any, now: float) -> bool:
        return not conn.lost and not conn.stray and now - conn.idle_since < self.keepalive

    def _sweep(self) -> None:
        """NOTE(sweep): close what can no longer be reused; again while any stays idle."""
        self._timer = None
        now = asyncio.get_running_loop().time()
        for base, q in list(self.conns.items()):
            keep: deque[Any] = deque()
            for c in q:
                if self._fresh(c, now):
                    keep.append(c)
                else:
                    c.close()
            if keep:
                self.conns[base] = keep
            else:
                del self.conns[base]
        if self.conns:
            self._timer = asyncio.get_running_loop().call_later(self.keepalive, self._sweep)
