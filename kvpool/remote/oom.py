"""What the tier does on an OOM reply from Redis: its puts pause, and the one log line names
the fix for the memory settings the server has when it first says so."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from redis.exceptions import RedisClusterException, RedisError

from kvpool.remote.diagnose import FaultLog
from kvpool.remote.tier import RemoteStats


class OomWatch:
    """The puts' pause after an OOM reply (NOTE(oom-pause)) and the OOM's line
    (NOTE(oom-reread)). ``read_memory`` reads ``INFO memory`` (a mapping; anything else: not
    read), bounded here by ``read_s``. Use from one loop.

    NOTE(oom-pause): with noeviction every SET fails once Redis is full; after an OOM reply
    puts are not sent for ``pause_s`` (dropped, counted), not refused one by one.

    NOTE(oom-reread): the line's fix (``oom_fix.oom_fix``) was worded on the maxmemory-policy
    and maxmemory that INFO said at the warm-up or at the breaker's last close. An operator who
    changed them since (CONFIG SET maxmemory-policy noeviction and a tiny maxmemory) was told
    "it already evicts (allkeys-lru), ... raise maxmemory", and an OOM is said once per
    process, so no right line ever came. The first OOM reads them again, one ``INFO memory`` in
    a task of its own (no put waits on it, as none waits on the warm-up's INFO), and the line
    is said once that answered (on the settings read before when it did not). INFO rather
    than CONFIG GET: it needs no CONFIG permission (the tier's ACL line grants ``+info``, and
    managed Redis services refuse CONFIG), and it is the read the warm-up's fix came from.
    The read is a diagnostic: sent outside the tier's breaker and stats, its failure (a
    NOPERM, a deadline) only keeps the settings read before. Sent through the breaker, a user
    without ``+info`` had its NOPERM open it, and the pause's trial (SET XX) fails OOM while
    Redis is full: the tier's reads stopped too, for as long as Redis stayed full."""

    def __init__(self, pause_s: float, faults: FaultLog, stats: RemoteStats,
                 read_memory: Callable[[], Awaitable[Any]], read_s: float) -> None:
        self.pause_s = pause_s
        self._faults = faults
        self._stats = stats
        self._read_memory = read_memory
        self._read_s = read_s
        self._until = 0.0  # time.monotonic() before which puts are not sent
        self._said: asyncio.Task | None = None  # the first OOM's read, then its line

    def paused(self) -> bool:
        """Are puts paused (an OOM reply less than ``pause_s`` ago)?"""
        return time.monotonic() < self._until

    def replied(self, exc: BaseException) -> None:
        """Redis answered OOM (``exc``): pause the puts; the first one is said, once the
        server's memory settings were read again (NOTE(oom-reread))."""
        now = time.monotonic()
        if now >= self._until:
            self._stats.oom_pauses += 1
        self._until = now + self.pause_s
        if self._said is None:
            self._said = asyncio.get_running_loop().create_task(self._say(exc),
                                                                 name="redis-tier-oom")

    async def _say(self, exc: BaseException) -> None:
        try:
            async with asyncio.timeout(self._read_s):
                info = await self._read_memory()
            if isinstance(info, Mapping):  # else refused (NOPERM): not read
                self._faults.memory_read(info)
        except (TimeoutError, RedisError, RedisClusterException, OSError):
            pass  # not read: said on the settings read before
        finally:  # said also when the read raised anything else (a bug's traceback follows)
            self._faults.note("oom", exc)

    async def aclose(self) -> None:
        task = self._said
        if task is not None and not task.done():
            task.cancel()
            try:
                await task
            except asyncio.CancelledError:
                pass
