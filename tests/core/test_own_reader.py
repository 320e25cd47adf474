"""kvpool/core/seqlock.py NOTE(own-reader): a lock-free reader called by the thread that is
inside the pools' writer section (``manager.batch()``, an observer called under the lock)
reads directly instead of waiting for an odd version that only its own thread can make even;
a reader on another thread still waits for the writer to leave. Each call runs in a daemon
thread joined with a bound, so a reader that spins fails the test instead of hanging it."""

from __future__ import annotations

import threading

from kvpool.config import CacheConfig
from kvpool.core import BlockSpaceManager, Device

BOUND_S = 60  # a join bound for a call that never returns, not a timing assertion


def run_bounded(fn):
    """``fn()`` in a daemon thread; its result, or the exception it raised. Fails when it is
    still running after BOUND_S (a reader spinning on its own writer section)."""
    out: dict = {}

    def body():
        try:
            out["value"] = fn()
        except BaseException as e:  # noqa: BLE001 - re-raised below
            out["error"] = e

    t = threading.Thread(target=body, daemon=True)
    t.start()
    t.join(BOUND_S)
    assert not t.is_alive(), "a reader inside its own writer section never returned"
    if "error" in out:
        raise out["error"]
    return out["value"]


def manager(observer=None) -> BlockSpaceManager:
    return BlockSpaceManager(CacheConfig(num_device_blocks=8, num_host_blocks=4, block_size=4,
                                         watermark=0.0), observer=observer)


def test_stats_and_fragmentation_inside_a_batch_read_the_batch_so_far():
    m = manager()

    def inside():
        with m.batch():
            m.allocate([1], [1, 2, 3, 4, 5])  # two blocks, 5 slots
            return m.stats(), m.stats.fragmentation(), m.device_pool.stats()

    st, frag, pool = run_bounded(inside)
    assert st.num_seqs == 1 and st.used_slots == 5 and st.device.num_used == 2
    assert frag.used_slots == 5 and frag.allocated_slots == 8 and frag.num_free == 6
    assert pool.num_used == 2
    after = m.stats()  # outside: an even version again, and the same figures
    assert after.device.version % 2 == 0 and after.used_slots == 5
    assert m.stats.fragmentation() == frag
    m.check_invariants()


def test_an_observer_may_read_stats_under_the_pool_lock():
    seen = []

    class Reader:  # kvpool.core.block.PoolObserver, reading the manager it observes
        def stored(self, device, hashes, parent, tokens=None, *, salt=None):
            seen.append((device, m.stats().device.num_cached, m.stats.fragmentation().num_free))

        def removed(self, device, hashes):
            pass

        def cleared(self, device):
            pass

    m = manager(Reader())
    m.allocate([1], list(range(9)))
    run_bounded(lambda: m.mark_computed(1))  # registers 2 blocks: the observer hears them
    assert seen == [(Device.DEVICE, 2, 5)]


def test_a_reader_on_another_thread_still_waits_for_the_writer():
    m = manager()
    got: list = []
    with m.batch():
        reader = threading.Thread(target=lambda: got.append(m.stats()), daemon=True)
        reader.start()  # its snapshot cannot be taken while this thread is inside
        m.allocate([1], [1, 2, 3, 4, 5])
        m.allocate([2], [6])
    reader.join(BOUND_S)
    assert not reader.is_alive()
    (st,) = got
    assert st.num_seqs == 2 and st.used_slots == 6 and st.device.version % 2 == 0


def test_an_evict_hook_may_read_stats_while_the_pool_evicts():
    m = BlockSpaceManager(CacheConfig(num_device_blocks=4, num_host_blocks=4, block_size=4,
                                      watermark=0.0))
    seen = []
    m.lender.set_evict_hook(lambda b, h: seen.append((b, m.stats().device.num_evictable)))
    m.allocate([1], list(range(9)))  # 3 blocks, 2 full: cached once computed
    m.mark_computed(1)
    cached = set(m.get_block_table(1)[:2])
    m.free(1)  # the 2 full blocks become evictable
    run_bounded(lambda: m.allocate([2], list(range(100, 116))))  # all 4 blocks: evicts both
    assert {b for b, _ in seen} == cached  # each hook read a snapshot, inside the eviction
    assert sorted(n for _, n in seen) == [0, 1]
    m.check_invariants()
