"""The product's asyncio front (kvpool/runtime/remote/host_front.py): the remote prefetch's host
blocks lent and given back from coroutines, inline when the pool lock is free, batched when the
step thread holds it, and never leaked by a cancelled caller. The stress front's tests
(tests/stress/test_pool_front.py) drive the same batching through every manager call."""

import asyncio

from kvpool.config import CacheConfig
from kvpool.core import BlockSpaceManager, Device
from kvpool.runtime.remote.host_front import HostBlockFront
from tests.held_lock import HeldLock, WorkerPause


def manager(host=8):
    return BlockSpaceManager(CacheConfig(num_device_blocks=16, num_host_blocks=host,
                                         block_size=4))


async def test_host_blocks_are_lent_and_given_back_inline_when_the_lock_is_free():
    mgr = manager(host=8)
    front = HostBlockFront(mgr)
    ids = await front.allocate_host_blocks(6)
    assert len(ids) == 6 and await front.allocate_host_blocks(3) is None
    mgr.check_invariants()  # lent blocks count as references
    await front.free_host_blocks(ids)
    assert mgr.stats().host.num_used == 0
    assert front.inline == 3 and front.flushes == 0
    mgr.check_invariants()


async def test_under_contention_the_calls_of_one_iteration_are_one_batch_in_order():
    mgr = manager(host=8)
    front = HostBlockFront(mgr)
    lock = HeldLock(mgr)
    futs = [asyncio.ensure_future(front.allocate_host_blocks(3)) for _ in range(3)]
    await asyncio.sleep(0.01)  # the flush finds the lock busy: one worker hop for all three
    assert not any(f.done() for f in futs)
    lock.release()
    a, b, c = await asyncio.wait_for(asyncio.gather(*futs), 5)
    assert len(a) == 3 and len(b) == 3 and c is None  # applied in the order they were made
    assert front.flushes == 1 and front.offloaded == 1 and front.inline == 0
    await front.free_host_blocks(a + b)
    assert mgr.stats().host.num_used == 0


async def test_host_blocks_lent_to_a_cancelled_caller_are_given_back():
    mgr = manager(host=8)
    front = HostBlockFront(mgr)
    lock, pause = HeldLock(mgr), WorkerPause()
    lent = asyncio.ensure_future(front.allocate_host_blocks(5))
    marker = asyncio.ensure_future(front.call(pause))
    await asyncio.sleep(0.02)  # the batch goes to a worker: the lock is busy
    lock.release()
    assert await asyncio.get_running_loop().run_in_executor(None, pause.applied.wait, 5)
    # lent... (read from the lender: stats() would wait out the paused writer section)
    assert sum(mgr.lender.lent(Device.HOST).values()) == 5
    lent.cancel()                          # ...and abandoned before the result arrived
    pause.resume()
    await marker
    for _ in range(100):  # the undo runs in a later flush
        if mgr.stats().host.num_used == 0:
            break
        await asyncio.sleep(0.01)
    assert mgr.stats().host.num_used == 0
    mgr.check_invariants()
