"""The stress front (stress/pool/front.py): the batching of kvpool/runtime/remote/host_front.py
driven through every manager call: one locked core call per loop iteration, results and errors
per caller, cancellations undone."""

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvpool.config import CacheConfig
from kvpool.core import BlockSpaceManager
from kvpool.errors import DuplicateSequenceError, QueueFullError, UnknownSequenceError
from stress.pool.front import PoolFront
from tests.held_lock import HeldLock, WorkerPause


def manager(blocks=256, host=32):
    return BlockSpaceManager(CacheConfig(num_device_blocks=blocks, num_host_blocks=host,
                                         block_size=4))


async def test_a_free_lock_applies_each_call_inline():
    """Free lock, nothing queued: the call runs on the caller's stack and the coroutine
    returns without yielding to the loop (a callback scheduled before does not run)."""
    mgr = manager()
    front = PoolFront(mgr)
    ran = []
    asyncio.get_running_loop().call_soon(ran.append, 1)
    res = [await front.allocate([i], list(range(i, i + 9))) for i in range(50)]
    assert ran == []  # no loop iteration ran in between
    assert res == [0] * 50
    assert front.inline == 50 and front.flushes == 0 and front.ops == 50
    coro = front.free(0)  # driven by hand: finished at its first step, no future awaited
    with pytest.raises(StopIteration):
        coro.send(None)
    await asyncio.gather(*(front.free(i) for i in range(1, 50)))
    mgr.check_invariants()
    assert mgr.stats().device.num_used == 0


async def test_calls_of_one_iteration_share_one_flush_under_contention():
    mgr = manager()
    front = PoolFront(mgr)
    lock = HeldLock(mgr)
    version_before = mgr.device_pool.writing().version
    futs = [asyncio.ensure_future(front.allocate([i], list(range(i, i + 9))))
            for i in range(50)]
    await asyncio.sleep(0.01)  # the flush finds the lock busy: one worker hop for all 50
    assert not any(f.done() for f in futs)
    lock.release()
    res = await asyncio.wait_for(asyncio.gather(*futs), 5)
    assert res == [0] * 50
    assert front.flushes == 1 and front.ops == 50 and front.inline == 0
    # read while the holder was inside (odd); its section closes (+1), one batch section (+2)
    assert mgr.device_pool.writing().version == version_before + 3
    assert sorted(mgr.seq_ids()) == list(range(50))
    await asyncio.gather(*(front.free(i) for i in range(50)))
    mgr.check_invariants()
    assert mgr.stats().device.num_used == 0


async def test_a_call_behind_a_pending_batch_waits_its_turn():
    """Order: once something is queued, later calls queue too (even if the lock is free)."""
    mgr = manager(blocks=4)
    front = PoolFront(mgr)
    lock = HeldLock(mgr)
    first = asyncio.ensure_future(front.allocate_blocks(4))
    await asyncio.sleep(0.01)
    lock.release()
    assert front.queued == 1  # `first` is still in the worker (its result not yet back)
    b = await front.allocate_blocks(1)  # the lock may be free now: it still waits its turn
    a = await asyncio.wait_for(first, 5)
    assert a is not None and len(a) == 4 and b is None
    await front.free_blocks(a)
    mgr.check_invariants()


async def test_errors_go_to_their_caller_only():
    mgr = manager()
    front = PoolFront(mgr)
    await front.allocate([1], [1, 2, 3])
    results = await asyncio.gather(
        front.allocate([2], [4, 5]), front.allocate([1], [6]),  # duplicate id
        front.free(99),                                         # unknown
        front.append_slots(2, [7]), return_exceptions=True)
    assert results[0] == 0
    assert isinstance(results[1], DuplicateSequenceError)
    assert isinstance(results[2], UnknownSequenceError)
    assert results[3] == []
    assert mgr.get_num_tokens(2) == 3
    mgr.check_invariants()


async def test_busy_lock_moves_the_batch_to_a_worker_without_blocking_the_loop():
    mgr = manager()
    front = PoolFront(mgr)
    held = threading.Event()
    release = threading.Event()

    def step_thread():
        with mgr.batch():
            held.set()
            release.wait(5)

    t = threading.Thread(target=step_thread)
    t.start()
    held.wait(5)
    fut = asyncio.ensure_future(front.allocate_blocks(3))
    ticks = 0
    for _ in range(5):  # the loop keeps running while the batch waits for the lock
        await asyncio.sleep(0.01)
        ticks += 1
    assert not fut.done() and ticks == 5
    release.set()
    ids = await asyncio.wait_for(fut, 5)
    t.join()
    assert len(ids) == 3 and front.offloaded == 1
    await front.free_blocks(ids)
    assert mgr.stats().device.num_used == 0


async def test_scarcity_is_a_value_and_queue_bound_is_an_error():
    mgr = manager(blocks=4)
    front = PoolFront(mgr, max_pending=3)
    a, b = await asyncio.gather(front.allocate_blocks(3), front.allocate_blocks(3))
    assert a is not None and b is None
    lock = HeldLock(mgr)  # the bound applies to calls queued under contention
    futs = [asyncio.ensure_future(front.allocate_blocks(1)) for _ in range(3)]
    await asyncio.sleep(0)  # the three are queued
    with pytest.raises(QueueFullError):
        await front.allocate_blocks(1)
    lock.release()
    got = await asyncio.wait_for(asyncio.gather(*futs), 5)
    assert [g is not None for g in got] == [True, False, False]


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 7), st.sampled_from(["alloc", "append", "free"]),
                          st.integers(1, 9)), max_size=60))
def test_batched_equals_sequential(ops):
    """Any interleaving the loop produces ends in a state some sequential order reaches:
    each coroutine's own operations apply in its order, and the pool stays consistent."""
    mgr = manager(blocks=40)
    front = PoolFront(mgr)
    per_coro: dict[int, list] = {}
    for c, kind, n in ops:
        per_coro.setdefault(c, []).append((kind, n))

    async def coro(c, steps):
        live = False
        seq = 1000 + c
        for kind, n in steps:
            if kind == "alloc" and not live:
                live = await front.allocate([seq], list(range(n))) is not None
            elif kind == "append" and live:
                await front.append_slots(seq, [n] * (n % 3 + 1))
            elif kind == "free" and live:
                await front.free(seq)
                live = False
            await asyncio.sleep(0)
        return seq if live else None

    async def main():
        return await asyncio.gather(*(coro(c, s) for c, s in per_coro.items()))

    alive = [s for s in asyncio.run(main()) if s is not None]
    assert sorted(mgr.seq_ids()) == sorted(alive)
    mgr.check_invariants()
    mgr.free(*alive)
    assert mgr.stats().device.num_used == 0


async def test_an_operation_cancelled_while_applied_is_undone():
    mgr = manager()
    front = PoolFront(mgr)
    lock, pause = HeldLock(mgr), WorkerPause()
    alloc = asyncio.ensure_future(front.allocate([7], [1, 2, 3, 4, 5]))
    blocks = asyncio.ensure_future(front.allocate_blocks(4))
    marker = asyncio.ensure_future(front.call(pause))
    await asyncio.sleep(0.02)  # the batch goes to a worker: the lock is busy
    lock.release()
    assert await asyncio.get_running_loop().run_in_executor(None, pause.applied.wait, 5)
    assert mgr.has_seq(7)  # applied...
    alloc.cancel()         # ...and abandoned by its caller before the result arrived
    blocks.cancel()
    pause.resume()
    await marker
    for _ in range(100):  # the undo runs in a later flush
        await asyncio.sleep(0.01)
        if not mgr.seq_ids() and mgr.stats().device.num_used == 0:
            break
    assert mgr.seq_ids() == [] and mgr.stats().device.num_used == 0
    mgr.check_invariants()


async def test_a_batch_queued_behind_a_worker_batch_waits_for_it():
    """The first batch went to a worker that has not run yet; the lock is then free. A later
    batch must not be applied on the loop ahead of it (4 blocks: the first takes them all)."""
    mgr = manager(blocks=4)
    worker_busy, worker_go = threading.Event(), threading.Event()
    with ThreadPoolExecutor(1) as pool:
        front = PoolFront(mgr, executor=pool)
        lock = HeldLock(mgr)
        pool.submit(lambda: (worker_busy.set(), worker_go.wait(5)))
        worker_busy.wait(5)
        first = asyncio.ensure_future(front.allocate_blocks(4))
        await asyncio.sleep(0.01)  # its flush finds the lock busy: handed to the (busy) worker
        lock.release()             # the lock is free, the worker has not applied `first`
        second = asyncio.ensure_future(front.allocate_blocks(1))
        for _ in range(5):         # give `second`'s flush every chance to overtake
            await asyncio.sleep(0.01)
        assert not second.done()
        worker_go.set()
        a, b = await asyncio.wait_for(asyncio.gather(first, second), 5)
    assert a is not None and len(a) == 4 and b is None
    assert front.offloaded == 1 and front.queued == 0
    await front.free_blocks(a)
    mgr.check_invariants()
    assert mgr.stats().device.num_used == 0


async def test_cancellations_at_every_stage_leak_nothing():
    """Coroutines cancelled before their batch, while it is in the worker, or never: the
    pool ends with exactly the survivors' tables, and every other block is back."""
    mgr = manager(blocks=64)
    front = PoolFront(mgr)
    lock = HeldLock(mgr)
    tasks = {i: asyncio.ensure_future(front.allocate([i], list(range(5)))) for i in range(12)}
    raw = [asyncio.ensure_future(front.allocate_blocks(2)) for _ in range(4)]
    await asyncio.sleep(0)           # all queued, the flush not yet run
    for i in range(0, 12, 3):
        tasks[i].cancel()            # cancelled before the batch is applied: never applied
    raw[0].cancel()
    await asyncio.sleep(0.01)        # the flush hands the batch to a worker (lock busy)
    for i in range(1, 12, 3):
        tasks[i].cancel()            # cancelled while the batch waits in the worker: undone
    raw[1].cancel()
    lock.release()
    done = await asyncio.wait_for(asyncio.gather(*tasks.values(), *raw,
                                                 return_exceptions=True), 5)
    assert sum(isinstance(d, asyncio.CancelledError) for d in done) == 10
    for _ in range(100):             # the undos are queued calls of their own
        if front.queued == 0:
            break
        await asyncio.sleep(0.01)
    alive = sorted(i for i in tasks if i % 3 == 2)
    assert sorted(mgr.seq_ids()) == alive
    await front.free_blocks(raw[2].result() + raw[3].result())
    mgr.check_invariants()  # raw blocks carry no table reference: checked once they are back
    await asyncio.gather(*(front.free(i) for i in alive))
    assert mgr.stats().device.num_used == 0
    mgr.check_invariants()


async def test_a_call_that_finds_the_lock_free_applies_the_queue_ahead_of_it_first():
    """Queued under contention, the lock released before the flush ran: the next call applies
    the queued ones first, in the same lock hold, then itself, without waiting an iteration."""
    mgr = manager(blocks=4)
    front = PoolFront(mgr)
    lock = HeldLock(mgr)
    first = asyncio.ensure_future(front.allocate_blocks(4))
    await asyncio.sleep(0)  # `first` ran and queued (lock busy); its flush is the next callback
    assert front.queued == 1 and not first.done()
    lock.release()
    ran = []
    asyncio.get_running_loop().call_soon(ran.append, 1)
    second = await front.allocate_blocks(1)
    assert ran == [] and front.queued == 0  # applied on this stack, no loop iteration ran
    assert front.offloaded == 0 and front.flushes == 1 and front.inline == 1
    a = await first
    assert len(a) == 4 and second is None  # `first` went first
    await front.free_blocks(a)
    mgr.check_invariants()
    assert mgr.stats().device.num_used == 0
