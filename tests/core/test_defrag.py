"""Fragmentation stats and the defrag planner: compaction, reservation, version-retry."""

import numpy as np
import pytest

from kvpool.config import CacheConfig
from kvpool.core import BlockSpaceManager
from kvpool.core.stats import free_runs
from kvpool.errors import InvalidBlockError

BS = 4


def scattered(blocks=16, caching=True):
    """Eight one-block sequences, every other one freed: live blocks 0, 2, 4, 6 (odd ids
    freed) plus free ids 8..15."""
    m = BlockSpaceManager(CacheConfig(num_device_blocks=blocks, block_size=BS, watermark=0.0,
                                      enable_prefix_caching=caching))
    for s in range(8):
        m.allocate([s], [s * 100 + i for i in range(BS)])  # one full block each
        m.mark_computed(s)  # the prefill ran: the blocks hold KV
    m.free(1, 3, 5, 7)
    if caching:  # drop their cached copies too: ids 1, 3, 5, 7 become free holes
        m.device_pool.reset_prefix_cache()
    return m


def test_free_runs_helper():
    assert free_runs(np.array([], dtype=np.int32), 10) == (0, 0)
    assert free_runs(np.array([0, 1, 2, 5, 7, 8], dtype=np.int32), 10) == (3, 3)
    assert free_runs(np.array([9], dtype=np.int32), 10) == (1, 1)


def test_fragmentation_definitions():
    m = scattered(caching=False)
    f = m.stats.fragmentation()
    # free ids: 1, 3, 5, 7, 8..15 -> runs {1},{3},{5},{7..15}: largest 9 of 12
    assert (f.num_free, f.largest_free_run, f.free_runs) == (12, 9, 4)
    assert f.external == pytest.approx(1 - 9 / 12)
    assert f.internal == 0.0  # every used block is full
    m.append_slots(0, [1])     # block 0 is full: one new block with 1 of 4 slots used
    f = m.stats.fragmentation()
    assert f.used_slots == 4 * BS + 1 and f.allocated_slots == 5 * BS
    assert f.internal == pytest.approx(1 - (4 * BS + 1) / (5 * BS))
    assert m.stats().internal_fragmentation == pytest.approx(f.internal)


@pytest.mark.parametrize("caching", [True, False])
def test_plan_compacts_into_low_ids(caching):
    m = scattered(caching=caching)
    before = {s: m.get_block_table(s) for s in (0, 2, 4, 6)}
    plan = m.defrag.plan()
    assert plan is not None
    live = 4
    for src, dst in plan.moves:
        assert dst < live <= src
        assert m.device_pool.ref_count(dst) == 1  # reserved
    assert m.stats().device.num_reserved == len(plan)
    m.check_invariants()
    # reserved destinations are never handed out meanwhile
    m.allocate([50], list(range(1000, 1000 + 4 * BS)))
    assert not set(m.get_block_table(50)) & {d for _, d in plan.moves}
    m.free(50)
    res = m.defrag.commit(plan)
    assert res.retried == [] and sorted(res.committed) == sorted(plan.moves)
    assert sorted(b for s in (0, 2, 4, 6) for b in m.get_block_table(s)) == [0, 1, 2, 3]
    assert m.stats.fragmentation().external == 0.0
    moved = dict(plan.moves)
    for s, old in before.items():
        assert m.get_block_table(s) == [moved.get(b, b) for b in old]
    m.check_invariants()
    assert m.stats().defrag_moves == len(plan)


def test_commit_retries_moves_whose_table_changed():
    m = scattered(caching=False)
    plan = m.defrag.plan()
    src_owner = {m.get_block_table(s)[0]: s for s in (0, 2, 4, 6)}
    src, dst = plan.moves[0]
    m.free(src_owner[src])          # the source's table went away after planning
    res = m.defrag.commit(plan)
    assert (src, dst) in res.retried
    assert len(res.committed) == len(plan) - 1
    assert m.device_pool.ref_count(dst) == 0  # released back
    assert m.stats().defrag_retries == 1
    m.check_invariants()


def test_partial_blocks_are_pinned_and_shared_blocks_move_for_all_tables():
    m = BlockSpaceManager(CacheConfig(num_device_blocks=12, block_size=BS, watermark=0.0,
                                      enable_prefix_caching=False))
    m.allocate([1], list(range(6 * BS)))      # blocks 0..5
    m.allocate([2], list(range(2 * BS + 1)))  # blocks 6..8, last one partial
    m.mark_computed(2)
    m.fork(2, 3)
    m.free(1)
    plan = m.defrag.plan()
    moved = dict(plan.moves)
    table = m.get_block_table(2)
    assert table[2] not in moved          # partial: still written by decoding
    assert table[0] in moved and table[1] in moved
    m.defrag.commit(plan)
    assert m.get_block_table(2) == m.get_block_table(3)
    assert m.get_block_table(2)[:2] == [moved[table[0]], moved[table[1]]]
    m.check_invariants()


def test_evictable_cached_blocks_move_with_their_hash():
    m = scattered(caching=True)
    for s in (0, 2, 4, 6):
        m.mark_computed(s)
    m.free(6)  # block 6 becomes evictable (cached, ref 0)
    prompt = [6 * 100 + i for i in range(BS)] + [1]
    h = m.hasher.hash_blocks(prompt)[0]
    plan = m.defrag.plan()
    assert 6 in dict(plan.moves)
    m.defrag.commit(plan)
    new = m.device_pool.index.lookup(h)
    assert new == dict(plan.moves)[6] and new < 6
    assert m.allocate([9], prompt) == BS  # still a prefix hit, at the new place
    m.check_invariants()


def test_abort_and_single_plan_in_flight():
    m = scattered()
    plan = m.defrag.plan()
    with pytest.raises(InvalidBlockError, match="in flight"):
        m.defrag.plan()
    m.defrag.abort(plan)
    assert m.stats().device.num_reserved == 0
    m.check_invariants()
    with pytest.raises(InvalidBlockError):
        m.defrag.commit(plan)
    assert m.defrag.plan(max_moves=1) is not None


def test_nothing_to_do():
    m = BlockSpaceManager(CacheConfig(num_device_blocks=8, block_size=BS))
    assert m.defrag.plan() is None
    m.allocate([1], list(range(3 * BS)))
    assert m.defrag.plan() is None  # already packed at ids 0..2


def test_blocks_reserved_but_not_yet_computed_never_move():
    # a prompt allocated for a prefill that has not run yet: its blocks hold no KV
    m = BlockSpaceManager(CacheConfig(num_device_blocks=8, block_size=BS, watermark=0.0,
                                      enable_prefix_caching=False))
    m.allocate([1], list(range(8)))
    m.allocate([3], list(range(200, 208)))
    m.free(1)
    assert m.defrag.plan() is None  # seq 3's blocks 2, 3 are not computed
    m.mark_computed(3, 4)           # the first chunk ran: block 2 is full and written
    plan = m.defrag.plan()
    assert plan.moves == ((2, 0),)
    m.defrag.commit(plan)
    m.check_invariants()


def test_a_lock_free_allocate_cannot_take_a_planned_destination():
    """NOTE(plan-drain), found by the stress harness: plan() read the free ids, magazine
    included, under the lock that a lock-free allocate() never takes; an allocate() landing
    between that read and reserve() took a planned destination ("reserve: a block id is not
    free"). Here such allocate() calls land exactly there: the magazine's pops, as allocate()
    makes them, right after the read, until the magazine is empty."""
    m = scattered(caching=False)
    pool = m.device_pool
    pool.free_many([pool.allocate()])  # the slow path refills the magazine: holes 1, 3, 5, 7
    free_list = pool.free_list
    read = free_list.ids
    popped = []

    def read_then_a_racing_allocate():
        ids = read()
        while free_list.magazine:  # allocate()'s lock-free step; an empty magazine sends
            popped.append(free_list.magazine.pop())  # it to the slow path, which waits
        return ids

    free_list.ids = read_then_a_racing_allocate
    plan = m.defrag.plan()
    del free_list.ids
    assert plan is not None and popped == []
    assert all(pool.ref_count(dst) == 1 for _, dst in plan.moves)  # reserved, by this plan
    m.defrag.abort(plan)
    m.check_invariants()
