"""The seeds' decisions as unit tests: the admission table, the decode append worst case, the
swap-in formula, and the copy-on-write cases."""

import pytest

from kvpool.config import CacheConfig
from kvpool.core import AllocStatus, BlockSpaceManager, Device

BS = 4


def mgr(blocks=100, host=0, watermark=0.01, caching=True):
    return BlockSpaceManager(CacheConfig(num_device_blocks=blocks, num_host_blocks=host,
                                         block_size=BS, watermark=watermark,
                                         enable_prefix_caching=caching))


def fill(m, seq, nblocks, start_token=10_000):
    """Occupy ``nblocks`` device blocks with a unique prompt."""
    assert m.allocate([seq], list(range(start_token, start_token + nblocks * BS))) is not None


# ----------------------------------------------------------------------------- admission
@pytest.mark.parametrize("required,expect", [
    (100, AllocStatus.NEVER),   # total - required = 0 < watermark 1
    (99, AllocStatus.OK),       # total - required = 1 >= 1 and free - required = 1 >= 1
    (101, AllocStatus.NEVER),
    (1, AllocStatus.OK),
])
def test_admission_table_empty_pool(required, expect):
    m = mgr()
    assert m.watermark_blocks == 1
    assert m.admission([(required * BS, ())]).status is expect


def test_admission_later_when_free_short_of_watermark():
    m = mgr()
    fill(m, 1, 50)
    assert m.admission([(49 * BS, ())]).status is AllocStatus.OK     # 50 - 49 = 1 >= 1
    # 50 - 50 = 0 < 1, but could fit later
    assert m.admission([(50 * BS, ())]).status is AllocStatus.LATER
    assert m.admission([(99 * BS, ())]).status is AllocStatus.LATER
    assert m.admission([(100 * BS, ())]).status is AllocStatus.NEVER
    m.free(1)
    assert m.admission([(50 * BS, ())]).status is AllocStatus.OK


def test_zero_watermark_admits_a_prompt_filling_the_pool():
    m = mgr(watermark=0.0)
    assert m.admission([(100 * BS, ())]).status is AllocStatus.OK
    assert m.allocate([1], list(range(100 * BS))) == 0
    assert m.stats().device.num_free == 0
    assert m.admission([(1, ())]).status is AllocStatus.LATER


def test_partial_block_rounds_up():
    m = mgr(blocks=10, watermark=0.0)
    assert m.admission([(41, ())]).capacity == 11
    assert m.admission([(40, ())]).status is AllocStatus.OK
    assert m.admission([(41, ())]).status is AllocStatus.NEVER


def test_prefix_hits_on_used_blocks_cost_nothing_but_evictable_hits_do():
    m = mgr(blocks=20, watermark=0.0)
    prompt = list(range(16 * BS + 1))  # 17 blocks, 16 full
    m.allocate([1], prompt)
    m.mark_computed(1)
    hashes = m.hasher.hash_blocks(prompt)
    # 3 blocks free; the same prompt needs 17 but 16 are shared hits in use -> needs 1
    assert m.admission([(len(prompt), hashes)]).status is AllocStatus.OK
    # without hashes: no discount
    assert m.admission([(len(prompt), ())]).status is AllocStatus.LATER
    assert m.allocate([2], prompt, block_hashes=hashes) == 16 * BS
    assert m.get_block_table(2)[:16] == m.get_block_table(1)[:16]
    m.free(1, 2)
    # now the 16 cached blocks are evictable: hitting them costs a block each
    fill(m, 3, 3)
    assert m.stats().device.num_evictable == 16
    assert m.admission([(len(prompt), hashes)]).status is AllocStatus.OK  # 17 free+evictable >= 17
    fill(m, 4, 1)
    assert m.admission([(len(prompt), hashes)]).status is AllocStatus.LATER


def test_fully_cached_prompt_still_computes_its_last_token():
    m = mgr()
    prompt = list(range(8 * BS))  # a multiple of the block size
    m.allocate([1], prompt)
    m.mark_computed(1)
    cached = m.allocate([2], prompt)
    assert cached == 7 * BS  # the last block is recomputed into a block of its own
    assert m.get_block_table(2)[7] != m.get_block_table(1)[7]


def test_uncomputed_blocks_are_not_hit():
    m = mgr()
    prompt = list(range(5 * BS))
    m.allocate([1], prompt)  # not marked computed yet
    assert m.allocate([2], prompt) == 0
    m.mark_computed(1)
    assert m.allocate([3], prompt) == 4 * BS


# ----------------------------------------------------------------------------- decode append
def test_append_worst_case_one_block_per_sequence():
    m = mgr(blocks=12, watermark=0.0)
    for s in range(4):  # 4 sequences, each with a full last block (2 blocks each)
        fill(m, s, 2, start_token=1000 * s)
    fill(m, 99, 4 - 1, start_token=99_000)  # 11 used, 1 free
    assert m.stats().device.num_allocatable == 1
    assert not m.slots.can_append([0, 1, 2, 3])   # worst case: 4 new blocks, 1 free
    assert m.slots.can_append([0])
    m.free(99)  # 4 free: exactly one per sequence
    assert m.slots.can_append([0, 1, 2, 3])
    out = m.slots.append_batch([(s, [7]) for s in range(4)])
    assert out == [[], [], [], []]
    assert m.stats().device.num_free == 0
    # now every last block has room for 3 more tokens: no block needed
    assert m.slots.can_append([0, 1, 2, 3], 3)
    assert not m.slots.can_append([0], 4)
    assert m.append_slots(0, [1, 2, 3, 4]) is None  # scarcity is a return value
    assert m.get_num_tokens(0) == 2 * BS + 1
    m.check_invariants()


# ----------------------------------------------------------------------------- copy-on-write
def test_cow_on_shared_partial_block_after_fork():
    m = mgr()
    m.allocate([1], list(range(BS + 2)))  # 2 blocks, last one has 2 of 4 slots
    m.fork(1, 2)
    t1, t2 = m.get_block_table(1), m.get_block_table(2)
    assert t1 == t2 and m.device_pool.ref_count(t1[1]) == 2
    cow = m.append_slots(2, [5])
    new = m.get_block_table(2)[1]
    assert cow == [(t1[1], new)] and new != t1[1]
    assert m.device_pool.ref_count(t1[1]) == 1 and m.device_pool.ref_count(new) == 1
    assert m.get_block_table(2)[0] == t1[0]  # full blocks stay shared
    assert m.append_slots(1, [6]) == []       # the parent now owns the old block alone
    assert m.stats().cow_copies == 1
    m.check_invariants()


def test_no_cow_when_the_shared_block_is_full():
    m = mgr()
    m.allocate([1, 2], list(range(2 * BS)))  # n=2 sequences share 2 full blocks
    assert m.device_pool.ref_count(m.get_block_table(1)[1]) == 2
    assert m.append_slots(1, [9]) == []  # the new token starts a fresh block
    assert m.append_slots(2, [9]) == []
    assert m.get_block_table(1)[:2] == m.get_block_table(2)[:2]
    assert m.get_block_table(1)[2] != m.get_block_table(2)[2]
    m.check_invariants()


def test_sequence_group_shares_partial_prompt_block_then_copies():
    m = mgr()
    m.allocate([1, 2, 3, 4], list(range(BS + 1)))  # n = 4
    last = m.get_block_table(1)[1]
    assert m.device_pool.ref_count(last) == 4
    pairs = [m.append_slots(s, [1]) for s in (1, 2, 3, 4)]
    assert pairs[:3] == [[(last, m.get_block_table(s)[1])] for s in (1, 2, 3)]
    assert pairs[3] == []  # the last one writes into the original
    assert m.get_block_table(4)[1] == last
    m.check_invariants()


# ----------------------------------------------------------------------------- swap
def test_swap_in_needs_blocks_plus_one_per_sequence_with_watermark():
    m = mgr(blocks=20, host=20, watermark=0.1)  # watermark 2 blocks
    m.allocate([1], list(range(3 * BS)))
    m.fork(1, 2)                                 # group of 2 sequences, 3 distinct blocks
    assert m.swap.can_swap_out([1, 2])
    pairs = m.swap.swap_out([1, 2])
    assert len(pairs) == 3 and m.get_device(1) is Device.HOST
    assert m.stats().num_swapped_seqs == 2
    # need = 3 blocks + 2 sequences = 5; OK iff free - 5 >= 2
    fill(m, 9, 13)                               # 7 free
    assert m.admission(swapped=[1, 2]).status is AllocStatus.OK
    fill(m, 10, 1, start_token=50_000)           # 6 free: 6 - 5 = 1 < 2
    assert m.admission(swapped=[1, 2]).status is AllocStatus.LATER
    m.free(9, 10)
    back = m.swap.swap_in([1, 2])
    assert sorted(h for h, _ in back) == sorted(h for _, h in pairs)
    assert m.get_device(1) is Device.DEVICE and m.stats().num_swapped_seqs == 0
    m.check_invariants()


def test_swap_in_never_when_the_group_cannot_fit_an_empty_pool():
    m = mgr(blocks=10, host=20, watermark=0.1)  # watermark 1
    m.allocate([1], list(range(9 * BS)))
    m.swap.swap_out([1])
    assert m.admission(swapped=[1]).status is AllocStatus.NEVER  # 10 - (9 + 1) = 0 < 1
    m.allocate([2], list(range(8 * BS)), cache_salt="x")  # 8 of 10 blocks busy
    m.allocate([3], list(range(1 * BS)), cache_salt="y")
    m.swap.swap_out([3])
    assert m.admission(swapped=[3]).status is AllocStatus.LATER  # free 2 - (1 + 1) = 0 < 1
    m.free(2)
    assert m.admission(swapped=[3]).status is AllocStatus.OK


def test_swap_out_needs_host_room_and_maps_shared_blocks_once():
    m = mgr(blocks=20, host=2)
    m.allocate([1, 2], list(range(2 * BS + 1)))  # 3 blocks shared by 2 sequences
    assert not m.swap.can_swap_out([1, 2])
    assert m.swap.swap_out([1, 2]) is None
    assert m.get_device(1) is Device.DEVICE
    m2 = mgr(blocks=20, host=3)
    m2.allocate([1, 2], list(range(2 * BS + 1)))
    pairs = m2.swap.swap_out([1, 2])
    assert len(pairs) == 3 and len({d for d, _ in pairs}) == 3
    assert m2.get_block_table(1) == m2.get_block_table(2)
    assert all(m2.host_pool.ref_count(h) == 2 for _, h in pairs)
    m2.check_invariants()


def test_swap_in_reuses_blocks_still_in_the_prefix_cache():
    m = mgr(blocks=20, host=20)
    prompt = list(range(4 * BS + 2))
    m.allocate([1], prompt)
    m.mark_computed(1)
    out = m.swap.swap_out([1])
    assert len(out) == 5
    assert m.stats().device.num_evictable == 4  # full, computed blocks stay cached
    back = m.swap.swap_in([1])
    assert len(back) == 1  # only the partial last block is copied back
    st = m.stats()
    assert st.swap_in_reused_blocks == 4 and st.swap_in_blocks == 1
    assert m.get_block_table(1)[:4] == [d for d, _ in out[:4]]
    m.check_invariants()
