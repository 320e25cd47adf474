"""The per-call lock fronts bench.async_pool compares PoolFront against.

Bench-only baselines (nothing in the library calls them): each call takes the pool lock itself
instead of batching the calls of one loop iteration under one acquisition.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kvpool.core import BlockSpaceManager


class PerCallLockFront:
    """The baselines the benchmark compares against: every call takes the pool lock itself.

    The pool lock is a thread lock shared with the engine's step thread, so a coroutine must
    not block the event loop waiting for it. ``mode="thread"`` is the conventional answer:
    each call runs in a worker thread (``run_in_executor``). ``mode="trylock"`` is a stronger
    baseline: try the lock without blocking and hop to a worker only when it is busy."""

    def __init__(self, manager: BlockSpaceManager, mode: str = "thread",
                 executor: ThreadPoolExecutor | None = None) -> None:
        if mode not in ("thread", "trylock"):
            raise ValueError("mode must be 'thread' or 'trylock'")
        self.manager = manager
        self.mode = mode
        self._executor = executor

    async def _call(self, fn: Callable[..., Any], *args: Any) -> Any:
        if self.mode == "trylock":
            lock = self.manager.device_pool.lock
            if lock.acquire(blocking=False):
                try:
                    return fn(*args)
                finally:
                    lock.release()
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, fn, *args)

    async def allocate_blocks(self, n: int) -> list[int] | None:
        return await self._call(self.manager.device_pool.allocate_many, n)

    async def free_blocks(self, block_ids: Sequence[int]) -> None:
        return await self._call(self.manager.device_pool.free_many, block_ids)

