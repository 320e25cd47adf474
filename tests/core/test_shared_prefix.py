"""Units that reuse another table's leading blocks (``SeqAlloc.share_with``): a recomputed
request whose sequences diverged holds its common prefix once, and ``admission`` counts it
once (``shared_blocks``), so n sequences need as many blocks as they held decoding."""

import pytest

from kvpool.config import CacheConfig
from kvpool.core import AllocStatus, BlockSpaceManager, SeqAlloc

BS = 8
PROMPT = list(range(100, 132))  # 4 full blocks


def mgr(blocks=8, caching=False):
    return BlockSpaceManager(CacheConfig(num_device_blocks=blocks, num_host_blocks=0,
                                         block_size=BS, watermark=0.0,
                                         enable_prefix_caching=caching))


def units(m):
    a, b = PROMPT + [1] * 9, PROMPT + [2] * 9  # 41 tokens each: 6 blocks
    return [SeqAlloc([1], a, m.hasher.hash_blocks(a) if m.caching else None),
            SeqAlloc([2], b, m.hasher.hash_blocks(b) if m.caching else None, share_with=1,
                     num_shared=4)]


def test_admission_counts_the_shared_blocks_once():
    m = mgr()
    apart = m.admission([(41, ())] * 2)
    assert (apart.status, apart.capacity) == (AllocStatus.NEVER, 12)
    shared = m.admission([(41, ())] * 2, shared_blocks=4)
    assert (shared.status, shared.capacity, shared.need) == (AllocStatus.OK, 8, 8)
    assert m.admission([(41, ())] * 3, shared_blocks=4).capacity == 10
    with pytest.raises(ValueError, match="no token"):
        m.admission([(32, ())] * 2, shared_blocks=4)  # each unit computes a token of its own


@pytest.mark.parametrize("caching", [False, True])
def test_follower_tables_reuse_the_first_units_blocks(caching):
    m = mgr(caching=caching)
    assert m.prompts.allocate_batch(units(m)) == [0, 0]
    t1, t2 = m.get_block_table(1), m.get_block_table(2)
    assert t1[:4] == t2[:4] and not set(t1[4:]) & set(t2[4:])
    assert m.device_pool.num_free_blocks == 0  # 4 + 2 + 2 of 8
    assert all(m.device_pool.ref_count(b) == 2 for b in t1[:4])
    m.check_invariants()
    m.free(1, 2)
    assert m.device_pool.num_free_blocks == 8
    m.check_invariants()


def test_cached_prompt_blocks_are_hits_for_both():
    m = mgr(caching=True)
    m.allocate([9], PROMPT + [3])
    m.mark_computed(9)
    m.free(9)  # the prompt's 4 blocks stay cached (evictable)
    assert m.prompts.allocate_batch(units(m)) == [32, 32]
    assert m.get_block_table(1)[:4] == m.get_block_table(2)[:4]
    assert m.device_pool.num_free_blocks == 0
    m.check_invariants()
    m.free(2, 1)
    m.check_invariants()


def test_a_share_with_a_failed_allocation_fails_too_and_misuse_raises():
    m = mgr(blocks=7)
    assert m.allocate([5], list(range(2000, 2016))) == 0  # 2 blocks: 5 left, 6 needed
    assert m.prompts.allocate_batch(units(m)) == [None, None]
    assert m.seq_ids() == [5] and m.device_pool.num_free_blocks == 5
    m.free(5)
    with pytest.raises(ValueError, match="cannot share"):
        m.prompts.allocate_batch([SeqAlloc([2], PROMPT + [2], share_with=77, num_shared=4)])
    m.allocate([1], PROMPT + [1])
    with pytest.raises(ValueError, match="cannot share"):
        m.prompts.allocate_batch([SeqAlloc([2], PROMPT, share_with=1, num_shared=4)])
    c = mgr(caching=True)
    c.allocate([1], PROMPT + [1])
    with pytest.raises(ValueError, match="other tokens"):
        c.prompts.allocate_batch([SeqAlloc([2], list(range(32)) + [2], share_with=1, num_shared=4)])
    m.check_invariants() or c.check_invariants()
