"""A writer's checked take against the threads beside it (docs/architecture.md#locking).

* A lock-free ``BlockPool.allocate()`` pops the magazine without the lock. A manager call that
  counted the free blocks with the magazine in, then took them, came up short when a pop
  landed between the two: ``allocate`` and ``append_slots`` raised, and ``append_decodes``
  raised with the table's token count already past its blocks (free_list.py NOTE(drained)).
  Each case here lets another thread pop at the first point the writer touches the magazine,
  as a thread switch would; the call must answer "short" (None, or no group appended) and
  leave the manager whole.
* ``free`` and ``fork`` of a swapped sequence change the host pool, which the lender's host
  calls change under the host lock alone; they held only the device lock, so a free ran
  inside a lend and left a lent block on the free list (manager.py NOTE(host-lock)).
"""

from __future__ import annotations

import threading

import pytest

from kvpool.config import CacheConfig
from kvpool.core import BlockSpaceManager, Device

WAIT = 5.0  # bound on every join


def full_but_one(caching: bool) -> BlockSpaceManager:
    """8 blocks of 4: sequence 1 holds 7 full blocks, the last free id is in the magazine."""
    m = BlockSpaceManager(CacheConfig(num_device_blocks=8, block_size=4, watermark=0.0,
                                      enable_prefix_caching=caching))
    m.allocate([1], list(range(28)))
    m.mark_computed(1)
    pool = m.device_pool
    pool.free_many([pool.allocate()])  # a lock-free allocate: its refill moved ids over
    pool.free_list.drain()
    pool.free_list.refill()  # the one free id, in the magazine
    return m


def pop_at_first_drain(m: BlockSpaceManager) -> list:
    """The writer's next drain of the magazine first lets a thread allocate() lock-free."""
    pool = m.device_pool
    lists, got = pool.free_list, []
    drain = lists.drain

    def racing() -> None:
        t = threading.Thread(target=lambda: got.append(pool.allocate()))
        t.start()
        t.join(WAIT)
        del lists.drain  # the instance's hook goes; the class's drain is back
        drain()

    lists.drain = racing
    return got


CALLS = {
    "append_slots": lambda m: m.append_slots(1, [5]),
    "append_decodes": lambda m: m.slots.append_decodes([1], [5])[2] or None,
}


@pytest.mark.parametrize("caching", [False, True])
@pytest.mark.parametrize("call", sorted(CALLS))
def test_a_lock_free_pop_makes_a_checked_append_short_not_broken(caching, call):
    m = full_but_one(caching)
    got = pop_at_first_drain(m)
    assert CALLS[call](m) is None  # the pop took the one free block first: short
    assert got and got[0] is not None
    m.device_pool.free_many(got)
    m.check_invariants()
    assert m.get_num_tokens(1) == 28 and len(m.get_block_table(1)) == 7
    assert m.append_slots(1, [5]) == []  # and the freed block serves the next append


@pytest.mark.parametrize("caching", [False, True])
def test_a_lock_free_pop_makes_a_checked_allocate_short_not_broken(caching):
    m = BlockSpaceManager(CacheConfig(num_device_blocks=8, block_size=4, watermark=0.0,
                                      enable_prefix_caching=caching))
    pool = m.device_pool
    pool.free_many([pool.allocate()])  # bulk 1 id, magazine 7: 8 free
    got = pop_at_first_drain(m)
    assert m.allocate([1], list(range(32))) is None  # 8 blocks needed, 7 left after the pop
    pool.free_many(got)
    m.check_invariants()
    assert not m.has_seq(1) and pool.num_free_blocks == 8


def swapped_out() -> BlockSpaceManager:
    m = BlockSpaceManager(CacheConfig(num_device_blocks=16, num_host_blocks=8, block_size=2,
                                      watermark=0.0))
    m.allocate([1], [1, 2, 3, 4, 5])
    m.mark_computed(1)
    assert m.swap.swap_out([1]) is not None
    m.swap.confirm_out([1])
    return m


@pytest.mark.parametrize("call", ["free", "fork"])
def test_free_and_fork_of_a_swapped_sequence_wait_for_the_host_lock(call):
    m = swapped_out()
    done = threading.Event()

    def run() -> None:
        m.free(1) if call == "free" else m.fork(1, 2)
        done.set()

    with m.host_pool.writing():  # a lender's host call in progress, on this thread
        t = threading.Thread(target=run)
        t.start()
        assert not done.wait(0.5), f"{call} changed the host pool under a host writer"
    t.join(WAIT)
    assert done.is_set()
    m.check_invariants()
    assert m.lender.lend(Device.HOST, 2) is not None
