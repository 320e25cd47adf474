"""slots.append_decodes: a decode step's appends in one call (the leading groups that fit),
and the table copies it hands out, reused only while the table's blocks are unchanged."""

from kvpool.config import CacheConfig
from kvpool.core import BlockSpaceManager
from kvpool.errors import InvalidBlockError
from kvpool.errors import InvalidBlockError

BS = 4


def manager(blocks: int = 16, caching: bool = True) -> BlockSpaceManager:
    return BlockSpaceManager(CacheConfig(num_device_blocks=blocks, block_size=BS,
                                         watermark=0.0, enable_prefix_caching=caching))


def test_copies_follow_every_block_change_and_are_reused_only_in_between():
    m = manager()
    m.allocate([0], list(range(5)))  # 5 tokens: 2 blocks, 1 slot used in the last
    seen, contents = [], []
    for tok in range(10):  # tokens 5..14: new blocks at 8 and 12
        (cow,), (table,), groups = m.slots.append_decodes([0], [tok])
        assert groups == 1
        assert not cow and table == m.get_block_table(0)
        seen.append(table)
        contents.append(list(table))
    assert seen[0] is seen[1]  # slots 1 and 2 of the last block: nothing changed, reused
    assert [len(t) for t in seen] == [2, 2, 2, 3, 3, 3, 3, 4, 4, 4]
    assert [list(t) for t in seen] == contents  # a copy handed out is never changed
    m.check_invariants()


def test_a_fork_copies_the_shared_block_and_a_defrag_remap_gives_a_new_copy():
    m = manager(blocks=32)
    m.allocate([0], list(range(6)))
    before = m.slots.append_decodes([0], [9])[1][0]
    m.fork(0, 1)
    (cow0, cow1), (t0, t1), _ = m.slots.append_decodes([0, 1], [1, 2])
    assert len(cow0) == 1 and not cow1  # 0 copies the shared partial block; 1 keeps it
    assert t0 == m.get_block_table(0) and t1 == m.get_block_table(1) and t0 is not before
    m.free(1)
    m.allocate([2], list(range(100, 140)))  # fill, then free, to leave holes before 0's
    m.free(2)
    plan = m.defrag.plan(8)
    if plan is not None:
        m.defrag.commit(plan)
    (_,), (after,), _ = m.slots.append_decodes([0], [3])
    assert after == m.get_block_table(0)
    m.check_invariants()


def test_only_the_leading_groups_that_fit_together_are_appended():
    m = manager(blocks=7, caching=False)
    for s in range(3):  # 3 tables of 2 full blocks and one of 1: 7 used, 0 free
        m.allocate([s], list(range(2 * BS)))
    m.allocate([3], list(range(BS)))
    assert m.slots.append_decodes([0, 1, 2], [1, 1, 1], [1, 2, 3]) == ([], [], 0)
    assert m.get_num_tokens(0) == 2 * BS  # nothing changed
    m.free(2)  # 2 free: one new block each for 0 and 1, then 3's fits no more
    cows, tables, groups = m.slots.append_decodes([0, 1, 3], [1, 1, 1], [2, 3])
    assert groups == 1 and len(tables) == 2 and not any(cows)
    assert [m.get_num_tokens(s) for s in (0, 1)] == [2 * BS + 1] * 2
    assert m.slots.append_decodes([0, 1], [1, 1]) == ([(), ()], [m.get_block_table(0),
                                                                m.get_block_table(1)], 1)
    m.check_invariants()


def test_a_swap_round_trip_hands_out_the_new_blocks_and_a_swapped_sequence_raises_first():
    m = BlockSpaceManager(CacheConfig(num_device_blocks=16, num_host_blocks=16, block_size=BS,
                                      watermark=0.0))
    m.allocate([0], list(range(6)))
    m.allocate([1], list(range(50, 56)))
    (_, _), (old, _), _ = m.slots.append_decodes([0, 1], [1, 1])
    assert m.swap.swap_out([0]) is not None
    for ends in (None, [1, 2]):  # a swapped table raises, even in a group after one that fits
        try:
            m.slots.append_decodes([1, 0], [1, 1], ends)
        except InvalidBlockError:
            pass
        else:
            raise AssertionError("append_decodes took a swapped-out sequence")
    assert m.get_num_tokens(1) == 7  # nothing changed
    m.allocate([2], list(range(100, 112)))  # the old device blocks are taken by others
    assert m.swap.swap_in([0]) is not None
    m.mark_computed(0)
    (_,), (new,), _ = m.slots.append_decodes([0], [2])
    assert new == m.get_block_table(0) and new is not old
    m.check_invariants()


def test_a_shared_partial_tail_is_counted_in_a_full_pool():
    """NOTE(tail-sharers): with no block free, a sequence sharing its partial last block
    (a fork, an n > 1 allocation) needs one for its copy: the step appends nothing (no
    half-done copy) until a block is free, and the counter follows the tables."""
    m = manager(blocks=4, caching=False)
    m.allocate([0], list(range(6)))  # 2 blocks, the last one partial
    m.fork(0, 1)
    m.allocate([2, 3], list(range(20, 26)))  # n = 2: 2 more blocks, shared: pool full
    for ids in ([0], [1], [2, 3], [3]):
        assert m.slots.append_decodes(ids, [7] * len(ids)) == ([], [], 0)
    assert m.counters.tail_sharers == 4
    assert [m.get_num_tokens(s) for s in range(4)] == [6] * 4
    m.check_invariants()
    m.free(1, 2, 3)  # 2 and 3 held the same 2 blocks: both free now
    assert m.counters.tail_sharers == 1
    m.allocate([4], list(range(40, 43)))  # one block of its own
    assert m.counters.tail_sharers == 1
    (cow,), _, groups = m.slots.append_decodes([0], [7])
    assert groups == 1 and not cow  # 0's tail is its own again (1 left): no copy
    m.free(0, 4)
    assert m.counters.tail_sharers == 0
    m.check_invariants()
