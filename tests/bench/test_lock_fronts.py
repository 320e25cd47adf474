"""bench.lock_fronts: the per-call lock baselines hand out and take back the same blocks as
the library's batching front would (a baseline that lost blocks would flatter it)."""

from __future__ import annotations

import asyncio

from bench.lock_fronts import PerCallLockFront
from kvpool.config import CacheConfig
from kvpool.core import BlockSpaceManager


def manager(blocks: int = 256) -> BlockSpaceManager:
    return BlockSpaceManager(CacheConfig(num_device_blocks=blocks, num_host_blocks=32,
                                         block_size=4))


async def test_per_call_baselines_behave_the_same():
    for mode in ("thread", "trylock"):
        mgr = manager()
        front = PerCallLockFront(mgr, mode=mode)
        ids = await asyncio.gather(*(front.allocate_blocks(2) for _ in range(10)))
        assert len({b for i in ids for b in i}) == 20
        await asyncio.gather(*(front.free_blocks(i) for i in ids))
        assert mgr.stats().device.num_used == 0
