"""Misuse raises before anything changes: caller-given block hashes (prompt_alloc.py
NOTE(hash-input)), batches with a sequence twice, a length mismatch or one bad request
(NOTE(batch-first)), and token ids outside u32 (hashing.py NOTE(token-range)). After each
refused call the manager's snapshot, tables and invariants are exactly as before, and the
calls that follow work."""

from __future__ import annotations

import pytest

from kvpool.config import CacheConfig
from kvpool.core import AllocStatus, BlockSpaceManager, SeqAlloc
from kvpool.errors import DuplicateSequenceError

BS = 4


def manager(blocks: int = 8, caching: bool = True) -> BlockSpaceManager:
    return BlockSpaceManager(CacheConfig(num_device_blocks=blocks, block_size=BS,
                                         watermark=0.0, enable_prefix_caching=caching))


def state(m: BlockSpaceManager) -> tuple:
    """Everything a refused call must leave alone (the seqlock version aside)."""
    st = m.stats()
    d = st.device
    tables = {s: (m.get_block_table(s), m.get_num_tokens(s)) for s in m.seq_ids()}
    return (tables, d.num_free, d.num_evictable, d.num_used, d.num_cached, st.used_slots,
            st.prefix_query_tokens, st.prefix_hit_tokens)


def refused(m: BlockSpaceManager, exc: type[BaseException], fn) -> None:
    before = state(m)
    with pytest.raises(exc):
        fn()
    assert state(m) == before
    m.check_invariants()


# ---------------------------------------------------------------- caller-given hashes
def test_a_repeated_hash_is_refused_and_the_pool_stays_whole():
    m = manager(blocks=4)
    toks = list(range(12))  # 3 full blocks
    a, b, c = m.hasher.hash_blocks(toks)
    x, y = b"x" * 32, b"y" * 32
    for hs in ([a, b, a], [a, a, b], [x, x, y]):  # nothing cached yet
        refused(m, ValueError, lambda hs=hs: m.allocate([1], toks, block_hashes=hs))
    m.allocate([1], toks)  # the manager's own hashes: cached after the prefill
    m.mark_computed(1)
    m.free(1)
    for hs in ([a, b, a], [a, a, b], [a, b, b]):  # the repeat in the cached run: hit twice
        refused(m, ValueError, lambda hs=hs: m.allocate([2], toks + [99], block_hashes=hs))
        refused(m, ValueError, lambda hs=hs: m.prompts.allocate_batch(
            [SeqAlloc([3], [7]), SeqAlloc([2], toks + [99], block_hashes=hs)]))
    assert m.allocate([2], toks + [99], block_hashes=[a, b, c]) == 12  # a correct chain hits
    m.free(2)
    # nothing was lost: a request needing the whole pool is admitted and allocated
    whole = list(range(100, 116))
    assert m.admission([(16, m.hasher.hash_blocks(whole))]).status is AllocStatus.OK
    assert m.allocate([3], whole) == 0
    m.check_invariants()


@pytest.mark.parametrize("count", [0, 1, 2, 4])
def test_block_hashes_must_be_one_per_full_block(count):
    m = manager()
    toks = list(range(14))  # 3 full blocks and a tail of 2
    hs = (m.hasher.hash_blocks(toks) + [b"extra"])[:count]
    refused(m, ValueError, lambda: m.allocate([1], toks, block_hashes=hs))
    assert m.allocate([1], toks, block_hashes=m.hasher.hash_blocks(toks)) == 0
    m.check_invariants()


# ---------------------------------------------------------------- batches
@pytest.mark.parametrize("caching", [True, False])
def test_a_sequence_twice_in_an_append_batch_or_a_decode_step_is_refused(caching):
    m = manager(blocks=2, caching=caching)
    m.allocate([1], [1, 2, 3, 4, 5, 6, 7])  # 2 blocks, the last 3/4 full: the pool is full
    m.allocate([2], [9])  # cannot fit: None, nothing changes
    refused(m, DuplicateSequenceError, lambda: m.slots.append_batch([(1, [8]), (1, [9])]))
    refused(m, DuplicateSequenceError, lambda: m.slots.append_decodes([1, 1], [8, 9]))
    refused(m, DuplicateSequenceError, lambda: m.slots.append_decodes([1, 1], [8, 9], [1, 2]))
    cows, views, groups = m.slots.append_decodes([1], [8])
    assert not cows[0] and views == [[0, 1]] and groups == 1
    m.check_invariants()


def test_a_sequence_twice_is_refused_in_a_step_after_a_distinct_one():
    m = manager(blocks=16)
    for s in (1, 2, 3):
        m.allocate([s], [s, 5, 6])
    ids = [1, 2, 3]
    assert m.slots.append_decodes(ids, [7, 7, 7])[2] == 1  # checked distinct, remembered
    refused(m, DuplicateSequenceError, lambda: m.slots.append_decodes([1, 2, 1], [8, 8, 8]))
    ids[2] = 1  # the caller's list changed in place: checked again
    refused(m, DuplicateSequenceError, lambda: m.slots.append_decodes(ids, [8, 8, 8]))
    refused(m, DuplicateSequenceError, lambda: m.slots.append_decodes([2, 2], [8, 8]))
    assert m.slots.append_decodes([2, 3], [8, 8])[2] == 1  # another list: checked, distinct
    refused(m, DuplicateSequenceError, lambda: m.slots.append_decodes([2, 3, 2], [9, 9, 9]))
    assert m.slots.append_decodes([1, 2, 3], [9, 9, 9])[2] == 1
    m.check_invariants()


@pytest.mark.parametrize("toks,ends", [([7], None), ([7, 7, 7], None), ([7, 7], [1, 3])])
def test_a_decode_step_with_a_token_count_or_groups_off_its_sequences_is_refused(toks, ends):
    m = manager()
    for s in (1, 2):
        m.allocate([s], [1, 2, 3, 4, 5])
    refused(m, ValueError, lambda: m.slots.append_decodes([1, 2], toks, ends))
    assert m.slots.append_decodes([1, 2], [7, 7], [1, 2])[2] == 2
    m.check_invariants()


def test_allocate_batch_checks_every_request_before_the_first_is_made():
    m = manager(blocks=16)
    m.allocate([2], [1, 2, 3])
    bad = [
        [SeqAlloc([10], [5, 6]), SeqAlloc([2], [7])],  # 2 already has a table
        [SeqAlloc([10], [5, 6]), SeqAlloc([11, 10], [7])],  # 10 listed twice in the batch
        [SeqAlloc([10], [5, 6]), SeqAlloc([11], [8, 9], share_with=12, num_shared=1)],
        [SeqAlloc([10], list(range(8))),  # shares more blocks than 10 will have
         SeqAlloc([11], list(range(12)), share_with=10, num_shared=3)],
        [SeqAlloc([10], list(range(8))),  # its first block holds other tokens
         SeqAlloc([11], [9] + list(range(1, 12)), share_with=10, num_shared=1)],
        [SeqAlloc([10], [5, 6]), SeqAlloc([11], [7, -1])],  # an id outside u32
        [SeqAlloc([10], [5, 6]), SeqAlloc([11], [7], cache_salt=3)],  # type: ignore[arg-type]
    ]
    for reqs in bad:
        refused(m, (ValueError, TypeError, DuplicateSequenceError),
                lambda reqs=reqs: m.prompts.allocate_batch(reqs))
    ok = [SeqAlloc([10], list(range(8))),  # a valid share with a request before it
          SeqAlloc([11], list(range(12)), share_with=10, num_shared=2)]
    assert m.prompts.allocate_batch(ok) == [0, 0]
    assert m.get_block_table(11)[:2] == m.get_block_table(10)
    m.check_invariants()


# ---------------------------------------------------------------- token ids outside u32
@pytest.mark.parametrize("bad", [-1, 2**32, 2**40])
def test_a_token_id_outside_u32_is_refused_by_the_call_that_brings_it(bad):
    m = manager()
    m.allocate([1], [4, 5])  # the last block is 2/4 full: the next append is a fast one
    m.allocate([2], [4, 5, 6, 7])  # full: its next append opens a block (the slow path)
    refused(m, ValueError, lambda: m.append_slots(1, [bad]))  # fast path
    refused(m, ValueError, lambda: m.append_slots(2, [bad]))  # opening a block
    refused(m, ValueError, lambda: m.append_slots(1, [3, bad]))
    refused(m, ValueError, lambda: m.slots.append_batch([(2, [3]), (1, [bad])]))
    refused(m, ValueError, lambda: m.slots.append_decodes([2, 1], [3, bad]))
    refused(m, ValueError, lambda: m.allocate([3], [1, 2, 3, 4, 5, bad]))  # in the tail
    for tok in (7, 8, 9):  # valid appends fill the block and hash it
        assert m.append_slots(1, [tok]) == []
    assert m.get_num_tokens(1) == 5
    m.mark_computed(1)
    assert m.allocate([3], [4, 5, 7, 8, 1]) == BS  # hits the block [4, 5, 7, 8]
    m.check_invariants()


def test_without_prefix_caching_token_ids_are_not_checked():
    m = manager(caching=False)  # nothing is hashed: the ids are the runtime's business
    m.allocate([1], [4, -5])
    assert m.append_slots(1, [-1]) == []
    assert m.slots.append_decodes([1], [2**40])[2] == 1
    m.check_invariants()


def test_ids_up_to_the_largest_u32_are_taken_on_every_path():
    m = manager()
    m.allocate([1], [4, 5])
    m.allocate([2], [4, 5, 6, 7])
    big = [2**30, 2**31, 2**32 - 1]
    assert m.append_slots(1, [big[0]]) == []  # fast path: past its two compares
    assert m.append_slots(2, [big[1]]) == []  # opening a block
    assert m.slots.append_decodes([1, 2], [big[2], big[2]])[2] == 1  # 1's block fills
    assert m.slots.append_batch([(2, [big[0], 1])]) == [[]]
    m.mark_computed(1)
    hashes = m.hasher.hash_blocks([4, 5, big[0], big[2]])
    assert m.device_pool.index.lookup(hashes[0]) == m.get_block_table(1)[0]
    m.check_invariants()
