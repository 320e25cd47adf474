"""CopyEngine and its CPU backend on real tensors: every kind moves exactly its pairs' bytes,
runs coalesce, moves within a pool read before they write (property-checked against a per-block
reference, split over helper threads too), and a swap round trip keeps the model's outputs."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from kvpool.runtime.kv.copy_backends import TorchCopyBackend, plan_copies
from kvpool.runtime.kv.copy_engine import COPY_KINDS, CopyEngine
from tests.runtime.copy_pools import N_DEV, N_HOST, make_pools, reference


# ---------------------------------------------------------------- every kind moves the right bytes
@pytest.mark.parametrize("kind", list(COPY_KINDS))
def test_each_kind_copies_exactly_the_pairs(engine, pools, kind):
    dev, host = pools
    src_pool, dst_pool = COPY_KINDS[kind]
    src = dev if src_pool == "device" else host
    dst = dev if dst_pool == "device" else host
    pairs = {"swap_out": [(3, 0), (17, 9), (4, 1), (5, 2)],
             "swap_in": [(0, 20), (9, 3), (1, 21), (15, 0)],
             "cow": [(2, 10), (2, 11), (7, 23)],  # fan-out from one source
             "defrag": [(20, 1), (21, 2), (22, 3), (19, 6)]}[kind]
    expected = reference(src, dst, pairs)
    untouched_src = src.clone()
    h = engine.submit(kind, pairs, tag="req-1")
    assert h.wait(timeout=10) is h
    assert torch.equal(dst, expected)
    if src is not dst:
        assert torch.equal(src, untouched_src)
    assert (h.kind, h.pairs, h.num_blocks, h.tag) == (kind, tuple(pairs), len(pairs), "req-1")
    assert h.bytes == len(pairs) * 1024
    assert h.seconds is not None  # the batch's duration is recorded (never asserted on)
    assert h.done() and h.exception() is None and not h.cancelled()
    st_ = engine.stats()
    assert st_.blocks[kind] == len(pairs) and st_.bytes[kind] == len(pairs) * 1024
    assert st_.batches[kind] == 1 and st_.pending == 0
    assert engine.bandwidth(kind) > 0 and engine.bandwidth() > 0


def test_kinds_in_sequence_and_empty_batch(engine, pools):
    dev, host = pools
    engine.submit("swap_out", [(1, 1)]).wait()
    engine.submit("swap_in", [(1, 5)]).wait()
    assert torch.equal(dev[5], dev[1])
    engine.submit("cow", [(5, 6)]).wait()
    engine.submit("defrag", [(6, 7)]).wait()
    assert torch.equal(dev[7], dev[1])
    h = engine.submit("cow", [])
    assert h.done() and h.bytes == 0


# ---------------------------------------------------------------- coalescing and overlap semantics
def test_plan_coalesces_consecutive_runs():
    plan = plan_copies([(10, 0), (11, 1), (12, 2), (30, 3), (5, 7), (6, 8)], same_pool=True)
    assert [r[:3] for r in plan.runs] == [(10, 0, 3), (30, 3, 1), (5, 7, 2)]
    assert plan.num_blocks == 6 and plan.stage == ()
    # Runs are found whatever the submission order.
    plan = plan_copies([(12, 2), (10, 0), (11, 1)], same_pool=False)
    assert [r[:3] for r in plan.runs] == [(10, 0, 3)]


def test_plan_rejects_duplicate_destinations(engine):
    with pytest.raises(ValueError, match="destination of two copies"):
        plan_copies([(1, 2), (3, 2)], same_pool=True)
    with pytest.raises(ValueError, match="destination of two copies"):
        engine.submit("defrag", [(1, 2), (3, 2)])
    assert engine.stats().pending == 0


def test_overlapping_moves_read_before_write(engine, pools):
    dev, _ = pools
    old = dev.clone()
    # A chain (1->2->3->4) and a swap (10<->11) and a no-op (5->5) in one batch.
    engine.submit("defrag", [(1, 2), (2, 3), (3, 4), (10, 11), (11, 10), (5, 5)]).wait()
    for s, d in [(1, 2), (2, 3), (3, 4), (10, 11), (11, 10), (5, 5)]:
        assert torch.equal(dev[d], old[s])
    assert torch.equal(dev[1], old[1])


pair_lists = st.integers(1, 20).flatmap(lambda n: st.tuples(
    st.lists(st.integers(0, N_DEV - 1), min_size=n, max_size=n),
    st.lists(st.integers(0, N_DEV - 1), min_size=n, max_size=n, unique=True),
)).map(lambda t: list(zip(*t)))


@settings(max_examples=150, deadline=None)
@given(pairs=pair_lists, cache_views=st.booleans())
def test_coalesced_same_pool_copy_equals_per_block_reference(pairs, cache_views):
    dev, _ = make_pools()
    expected = reference(dev, dev, pairs)
    backend = TorchCopyBackend(num_threads=None, cache_views=cache_views)
    backend.attach({"device": dev})
    backend.copy("device", "device", pairs)
    assert torch.equal(dev, expected)


@settings(max_examples=100, deadline=None)
@given(pairs=st.lists(st.tuples(st.integers(0, N_DEV - 1), st.integers(0, N_HOST - 1)),
                      max_size=N_HOST, unique_by=lambda p: p[1]))
def test_coalesced_cross_pool_copy_equals_per_block_loop(pairs):
    dev, host = make_pools()
    expected = host.clone()
    for s, d in pairs:  # the plain per-block loop
        expected[d].copy_(dev[s])
    backend = TorchCopyBackend(num_threads=None)
    backend.attach({"device": dev, "host": host})
    assert backend.copy("device", "host", pairs) == len(pairs)
    assert torch.equal(host, expected)


@settings(max_examples=100, deadline=None)
@given(pairs=pair_lists, threads=st.integers(1, 4), raw=st.booleans(),
       cross=st.booleans())
def test_large_batches_equal_the_per_block_reference(pairs, threads, raw, cross):
    """Large batches (memmove per run, or torch views) split over helper threads: the same
    bytes as the per-block loop, read-before-write included, within a pool and across two."""
    dev, host = make_pools(n_host=N_DEV)
    dst = host if cross else dev
    expected = reference(dev, dst, pairs)
    moved = []

    class Spy(TorchCopyBackend):
        @staticmethod
        def _memmove_runs(moves):
            moved.append(len(moves))
            TorchCopyBackend._memmove_runs(moves)

    backend = Spy(num_threads=None, split_threads=threads, split_min_bytes=0, raw_large=raw)
    backend.attach({"device": dev, "host": host})
    try:
        backend.copy("device", "host" if cross else "device", pairs)
    finally:
        backend.close()
    assert torch.equal(dst, expected)
    assert bool(moved) == (raw and (cross or any(s != d for s, d in pairs)))


# ---------------------------------------------------------------- the model's view
def test_swap_round_trip_keeps_model_outputs():
    """The tiny model decodes the same logits after its blocks went device -> host -> other
    device blocks (and a defrag move), with the freed blocks overwritten in between."""
    from kvpool.runtime.kv.storage import KVStorage
    from kvpool.runtime.model import PagedBatch, SeqChunk, build_tiny_model

    config, model, _ = build_tiny_model()
    storage = KVStorage(config, 4, num_device_blocks=16, num_host_blocks=8)
    kv = storage.device_kv
    prompt = list(range(40, 50))  # 10 tokens: blocks 0, 1, 2 (the last one partial)
    model(PagedBatch([SeqChunk(prompt, 0, [0, 1, 2])]), kv)
    expected = model(PagedBatch([SeqChunk([77], 10, [0, 1, 2])]), kv.clone())
    with CopyEngine.for_storage(storage) as eng:
        eng.submit("swap_out", [(0, 5), (1, 6), (2, 7)]).wait()
        kv[:3].fill_(3.0)  # the freed device blocks are reused by someone else
        eng.submit("swap_in", [(5, 9), (6, 10), (7, 4)]).wait()
        eng.submit("defrag", [(4, 11)]).wait()
    got = model(PagedBatch([SeqChunk([77], 10, [9, 10, 11])]), kv)
    torch.testing.assert_close(got, expected, rtol=0, atol=0)
    storage.check_invariants()
