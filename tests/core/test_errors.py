"""Misuse raises typed errors and leaves the state untouched; bad configs name the fix."""

import pytest

from kvpool.config import CacheConfig
from kvpool.core import BlockPool, BlockSpaceManager, Device
from kvpool.errors import (ConfigError, DoubleFreeError, DuplicateSequenceError,
                           InvalidBlockError, KVPoolError, UnknownSequenceError)


def mgr(**kw):
    return BlockSpaceManager(CacheConfig(**{"num_device_blocks": 16, "num_host_blocks": 8,
                                            "block_size": 4, **kw}))


def test_double_free_of_a_sequence():
    m = mgr()
    m.allocate([1], [1, 2, 3])
    m.free(1)
    with pytest.raises(UnknownSequenceError, match="sequence 1"):
        m.free(1)
    m.check_invariants()


def test_unknown_sequence_everywhere():
    m = mgr()
    for call in (lambda: m.append_slots(7, [1]), lambda: m.fork(7, 8),
                 lambda: m.get_block_table(7), lambda: m.swap.swap_out([7]),
                 lambda: m.slots.can_append([7]), lambda: m.mark_computed(7),
                 lambda: m.slots.append_decodes([7], [1]), lambda: m.get_num_tokens(7)):
        with pytest.raises(UnknownSequenceError, match="never allocated, or already freed") as ei:
            call()
        assert isinstance(ei.value, KeyError) and isinstance(ei.value, KVPoolError)
    assert m.stats().device.num_used == 0


def test_free_batch_with_an_unknown_id_changes_nothing():
    m = mgr()
    m.allocate([1], [1, 2, 3])
    with pytest.raises(UnknownSequenceError):
        m.free(1, 99)
    assert m.has_seq(1)
    with pytest.raises(UnknownSequenceError):
        m.free(1, 1)
    assert m.has_seq(1)
    m.check_invariants()


def test_duplicate_sequence_ids():
    m = mgr()
    m.allocate([1], [1, 2])
    with pytest.raises(DuplicateSequenceError):
        m.allocate([1], [3])
    with pytest.raises(DuplicateSequenceError):
        m.allocate([2, 2], [3])
    with pytest.raises(DuplicateSequenceError):
        m.fork(1, 1)
    m.check_invariants()
    assert m.seq_ids() == [1]


def test_swap_state_errors():
    m = mgr()
    m.allocate([1], [1, 2, 3, 4, 5])
    with pytest.raises(InvalidBlockError, match="on the device"):
        m.swap.swap_in([1])
    m.swap.swap_out([1])
    with pytest.raises(InvalidBlockError, match="swapped out"):
        m.swap.swap_out([1])
    with pytest.raises(InvalidBlockError, match="swapped out"):
        m.append_slots(1, [1])
    m.check_invariants()


def test_pool_double_free_is_typed_and_rolled_back():
    for pool in (BlockPool(Device.DEVICE, 8), BlockPool(Device.DEVICE, 8, caching=True)):
        a = pool.allocate_many(3)
        pool.free_many([a[0]])
        with pytest.raises(DoubleFreeError):
            pool.free_many([a[1], a[0]])  # a[1] valid, a[0] already free
        assert pool.ref_count(a[1]) == 1  # the valid part was rolled back
        pool.check_invariants()
        assert pool.stats().num_used == 2


def test_bad_block_ids_and_registration():
    pool = BlockPool(Device.DEVICE, 4, caching=True)
    with pytest.raises(InvalidBlockError):
        pool.block(9)
    a, b = pool.allocate_many(2)
    with pool.writing():
        pool.index.register_block(a, b"h" * 32, 0)
        with pytest.raises(InvalidBlockError, match="already cached"):
            pool.index.register_block(a, b"g" * 32, 0)
        assert pool.index.register_block(b, b"h" * 32, 0) == a  # a duplicate stays unhashed
        with pytest.raises(InvalidBlockError, match="not in use"):
            pool.share((3,))
    with pytest.raises(InvalidBlockError, match="no prefix cache"):
        BlockPool(Device.HOST, 4).acquire_blocks((0,))
    pool.check_invariants()


def test_empty_and_invalid_requests():
    m = mgr()
    with pytest.raises(ValueError):
        m.allocate([1], [])
    with pytest.raises(ValueError):
        m.allocate([], [1])
    with pytest.raises(ValueError):
        m.admission([(0, ())]).status
    with pytest.raises(ValueError, match="2\\*\\*32"):
        m.allocate([1], [1, 2, 3, -1])
    assert m.stats().device.num_used == 0


@pytest.mark.parametrize("kw,words", [
    ({"num_device_blocks": 0}, "--kv-cache-memory"),
    ({"num_device_blocks": 4, "block_size": 0}, "block_size"),
    ({"num_device_blocks": 4, "num_host_blocks": -1}, "--swap-space"),
    ({"num_device_blocks": 4, "watermark": 1.5}, "fraction"),
    ({"num_device_blocks": 4, "watermark": float("nan")}, "fraction"),
    ({"num_device_blocks": 4, "hash_algo": "crc32"}, "sha256"),
    ({"num_device_blocks": 4, "model_id": ""}, "model_id"),
])
def test_bad_config_names_the_fix(kw, words):
    with pytest.raises(ConfigError, match=words):
        CacheConfig(**kw)


def test_unknown_eviction_policy_lists_the_choices():
    with pytest.raises(ValueError, match="lru"):
        mgr(eviction_policy="nope")
