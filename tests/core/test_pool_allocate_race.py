"""BlockPool.allocate(), the lock-free single-block path (a magazine pop), against other
threads (docs/architecture.md#locking):

* two callers on the slow path at once: the second must find the blocks the first moved into
  the magazine, never answer "exhausted" (None) nor evict a cached block while free blocks are
  left (pool.py NOTE(slow-magazine));
* ``fragmentation()``, memoised per pool version, must follow magazine pops, which do not move
  the version (stats.py NOTE(pop-version));
* ``check_invariants()`` needs quiescence with respect to allocate(); when it sees one run
  during the check, its error says so (pool.py NOTE(quiescent-check)).

Each race runs a bounded number of rounds; "held" rounds hold the pool lock (a writer's batch)
while the threads make their calls, so they all queue on the slow path together.
"""

import sys
import threading
import time
from collections.abc import Callable
from contextlib import nullcontext

import pytest

from kvpool.config import CacheConfig
from kvpool.core import BlockPool, BlockSpaceManager, Device
from kvpool.errors import InvariantError

THREADS = 8


@pytest.fixture(autouse=True)
def fast_switching():
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # a thread switch every few bytecodes
    yield
    sys.setswitchinterval(old)


def rounds(trials: int, make: Callable[[], BlockPool], op: Callable[[BlockPool], object],
           held: bool) -> list[tuple[BlockPool, list]]:
    """``trials`` rounds of THREADS threads calling ``op(pool)`` once each, together, on a
    fresh ``make()``; with ``held`` the main thread holds the pool lock until every thread is
    about to call. (pool, results) per round. The threads live across rounds."""
    cur: list = [None, []]
    go, done = threading.Barrier(THREADS + 1), threading.Barrier(THREADS + 1)
    arrived, res_lock = threading.Semaphore(0), threading.Lock()

    def worker():
        try:
            while True:
                go.wait()
                arrived.release()
                r = op(cur[0])
                with res_lock:
                    cur[1].append(r)
                done.wait()
        except threading.BrokenBarrierError:
            return  # the last round is over

    ts = [threading.Thread(target=worker, daemon=True) for _ in range(THREADS)]
    [t.start() for t in ts]
    out = []
    try:
        for _ in range(trials):
            pool = cur[0] = make()
            cur[1] = []
            with pool.lock if held else nullcontext():
                go.wait(30)
                all(arrived.acquire(timeout=30) for _ in range(THREADS if held else 0))
                time.sleep(0.002 if held else 0)  # they reach the lock
            done.wait(30)
            out.append((pool, cur[1]))
    finally:
        go.abort()
        done.abort()
        for t in ts:
            t.join(30)
    return out


def raw_pool() -> BlockPool:
    return BlockPool(Device.DEVICE, 64, 16)


def cached_manager_pool() -> BlockPool:
    """A 64-block device pool holding 8 evictable cached blocks and 56 free ones."""
    mgr = BlockSpaceManager(CacheConfig(num_device_blocks=64, num_host_blocks=8, block_size=4,
                                        enable_prefix_caching=True, watermark=0.0))
    mgr.allocate([1], list(range(32)))
    mgr.mark_computed(1)
    mgr.free(1)
    return mgr.device_pool


@pytest.mark.parametrize("held,trials", [(True, 15), (False, 400)])
def test_allocate_is_none_only_when_nothing_is_free(held, trials):
    """NOTE(slow-magazine): 8 single-block calls on a 64-block pool all get a block."""
    bad = [(r, p.stats().num_free) for p, r in rounds(trials, raw_pool, BlockPool.allocate, held)
           if None in r]
    assert not bad, f"{len(bad)}/{trials} rounds: allocate() -> None, free left: {bad[0]}"


@pytest.mark.parametrize("held,trials", [(True, 15), (False, 400)])
def test_allocate_evicts_only_when_nothing_is_free(held, trials):
    """NOTE(slow-magazine): 8 calls with 56 free blocks evict no cached block."""
    got = rounds(trials, cached_manager_pool, BlockPool.allocate, held)
    bad = [(p.stats().evictions, p.stats().num_free) for p, r in got if p.stats().evictions]
    assert not bad, f"{len(bad)}/{trials} rounds evicted (evictions, free left): {bad[0]}"
    assert all(None not in r and len(set(r)) == THREADS for _, r in got)


def manager(caching: bool) -> BlockSpaceManager:
    return BlockSpaceManager(CacheConfig(num_device_blocks=2048, num_host_blocks=8,
                                         block_size=4, enable_prefix_caching=caching))


@pytest.mark.parametrize("caching", [False, True])
def test_fragmentation_follows_lock_free_allocations(caching):
    """NOTE(pop-version): pops by other threads after a memoised fragmentation()."""
    mgr = manager(caching)
    pool = mgr.device_pool
    pool.allocate()  # the one locked refill: the pops below move no version
    before = mgr.stats.fragmentation()
    ts = [threading.Thread(target=lambda: [pool.allocate() for _ in range(20)])
          for _ in range(THREADS)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    f, st = mgr.stats.fragmentation(), pool.stats()
    assert before.num_free - f.num_free == THREADS * 20
    assert (f.num_free, f.allocated_slots) == (st.num_free, st.num_used * 4)


def test_fragmentation_is_consistent_while_allocate_runs():
    """NOTE(pop-version): while threads only allocate, a fragmentation() read is never older
    than a stats() read before it, and its free ids agree with its block counts."""
    mgr = manager(False)
    pool = mgr.device_pool
    stop, seen = threading.Event(), []

    def reader():
        while not stop.is_set():
            s0 = pool.stats().num_free
            f = mgr.stats.fragmentation()
            seen.append((s0, f.num_free, f.allocated_slots // 4))

    def allocator():
        for _ in range(200):
            pool.allocate()
            time.sleep(0)  # let the reader in between two pops

    r = threading.Thread(target=reader)
    r.start()
    ts = [threading.Thread(target=allocator) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(30)
    stop.set()
    r.join(30)
    stale = [s for s in seen if s[1] > s[0]]
    torn = [s for s in seen if s[1] + s[2] != 2048]
    assert not stale and not torn, (len(seen), stale[:3], torn[:3])


class SlowStores(list):
    """A pool's ref counts, except that storing a 1 (allocate()'s store after its magazine
    pop) first sleeps: the thread is switched out between the pop and the store."""

    def __setitem__(self, i, v):
        if v == 1:
            time.sleep(0.001)
        super().__setitem__(i, v)


@pytest.mark.parametrize("caching", [False, True])
def test_check_invariants_under_allocate_names_the_race(caching):
    """NOTE(quiescent-check): a check racing lock-free allocate() raises only errors that say
    an allocate() ran during it; quiescent, it is clean."""
    pool = BlockPool(Device.DEVICE, 512, 16, caching=caching)
    pool._ref = SlowStores(pool._ref)
    stop, errors, checks = threading.Event(), [], [0]

    def user():
        mine = []
        while not stop.is_set():
            b = pool.allocate()
            mine += [] if b is None else [b]
            if len(mine) > 40:
                pool.free_many(mine)
                mine = []
        pool.free_many(mine)

    ts = [threading.Thread(target=user) for _ in range(4)]
    for t in ts:
        t.start()
    t_end = time.monotonic() + 0.5
    while time.monotonic() < t_end and len(errors) < 3:
        with pool.writing():
            try:
                pool.check_invariants()
            except InvariantError as e:
                errors.append(str(e))
        checks[0] += 1
    stop.set()
    for t in ts:
        t.join(30)
    pool.check_invariants()
    assert pool.stats().num_free == 512
    unnamed = [e for e in errors if "quiescence" not in e]
    assert not unnamed, f"{len(unnamed)} of {len(errors)} errors in {checks[0]}: {unnamed[0]}"


def test_check_invariants_quiescent_corruption_is_not_blamed_on_allocate():
    """NOTE(quiescent-check): no allocate() running, a leaked block is reported plainly."""
    pool = BlockPool(Device.DEVICE, 64, 16)
    b = pool.allocate()
    pool._ref[b] = 0  # corrupt: ref 0, off the free list
    with pytest.raises(InvariantError) as e:
        pool.check_invariants()
    assert "off the free list" in str(e.value) and "quiescence" not in str(e.value)
