"""A free asked of the asyncio front (kvpool/runtime/remote/host_front.py) is carried out even
when its caller is cancelled while it waits in the queue (NOTE(cancel-free)): the caller gets
its CancelledError, the blocks go back in the free's turn. Allocations cancelled while queued
are still never applied, so they leak nothing either."""

import asyncio

import pytest

from kvpool.config import CacheConfig
from kvpool.core import BlockSpaceManager, Device
from kvpool.runtime.remote.host_front import HostBlockFront
from tests.held_lock import HeldLock, WorkerPause


def manager(host=8):
    return BlockSpaceManager(CacheConfig(num_device_blocks=16, num_host_blocks=host,
                                         block_size=4))


async def settle(front: HostBlockFront) -> None:
    for _ in range(200):
        if front.queued == 0:
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"{front.queued} front calls never resolved")


def assert_nothing_lent(mgr: BlockSpaceManager) -> None:
    assert mgr.stats().host.num_used == 0
    assert not dict(mgr.lender.lent(Device.HOST))
    mgr.check_invariants()


async def test_a_free_cancelled_while_queued_is_still_carried_out():
    mgr = manager(host=8)
    front = HostBlockFront(mgr)
    ids = await front.allocate_host_blocks(6)  # inline: the lock is free
    lock = HeldLock(mgr)                       # the step thread is inside a step
    freeing = asyncio.ensure_future(front.free_host_blocks(ids))
    await asyncio.sleep(0)                     # queued, its flush not yet run
    freeing.cancel()                           # the request's task is cancelled
    lock.release()
    with pytest.raises(asyncio.CancelledError):
        await freeing                          # the caller still sees its cancellation
    await settle(front)
    assert_nothing_lent(mgr)
    assert len(await front.allocate_host_blocks(8)) == 8  # every block can be lent again


async def test_a_free_cancelled_in_a_worker_batch_keeps_its_turn():
    """Cancelled while its batch waits in the worker, behind a paused call: applied there, in
    order, so an allocation queued after it finds the blocks back."""
    mgr = manager(host=8)
    front = HostBlockFront(mgr)
    ids = await front.allocate_host_blocks(8)
    lock, pause = HeldLock(mgr), WorkerPause()
    marker = asyncio.ensure_future(front.call(pause))
    freeing = asyncio.ensure_future(front.free_host_blocks(ids))
    again = asyncio.ensure_future(front.allocate_host_blocks(8))
    await asyncio.sleep(0.02)  # the batch goes to a worker: the lock is busy
    lock.release()
    assert await asyncio.get_running_loop().run_in_executor(None, pause.applied.wait, 5)
    freeing.cancel()           # the worker has not reached the free yet
    pause.resume()
    await marker
    assert len(await asyncio.wait_for(again, 5)) == 8
    assert freeing.cancelled()
    await front.free_host_blocks(again.result())
    await settle(front)
    assert_nothing_lent(mgr)


async def test_an_allocation_cancelled_while_queued_is_never_applied():
    mgr = manager(host=8)
    front = HostBlockFront(mgr)
    lock = HeldLock(mgr)
    lent = [asyncio.ensure_future(front.allocate_host_blocks(3)) for _ in range(2)]
    await asyncio.sleep(0)  # both queued
    for t in lent:
        t.cancel()
    lock.release()
    done = await asyncio.gather(*lent, return_exceptions=True)
    assert all(isinstance(d, asyncio.CancelledError) for d in done)
    await settle(front)
    assert front.batched_ops == 2  # skipped in their batch: no undo was queued
    assert_nothing_lent(mgr)
