"""What the CopyEngine refuses up front (kv/copy_checks.py) and what it does not count: pools
it could not write in place (NOTE(inference-pool)), pairs given as a mapping
(NOTE(pairs-mapping)), and no-op pairs in one pool (NOTE(no-op-pairs)). Real tensors."""

from __future__ import annotations

import pytest
import torch

from kvpool.runtime.kv.copy_engine import CopyEngine
from kvpool.runtime.model.attention import KVCacheLayout
from tests.runtime.copy_pools import BLOCK, make_pools, reference


@pytest.mark.parametrize("which", ["device", "host"])
def test_a_pool_made_under_inference_mode_is_refused_at_construction(which):
    dev, host = make_pools()
    with torch.inference_mode():
        made = (dev if which == "device" else host).clone()
    pools = (made, host) if which == "device" else (dev, made)
    with pytest.raises(ValueError, match=f"the {which} pool was created under "
                                         r"torch.inference_mode\(\)"):
        CopyEngine(*pools)


def test_a_pool_that_requires_grad_is_refused_at_construction():
    dev, host = make_pools()
    with pytest.raises(ValueError, match="the device pool requires grad"):
        CopyEngine(dev.requires_grad_(True), host)


def test_the_runtime_s_pools_made_under_inference_mode_copy_small_batches():
    layers, _, bs, heads, dim = BLOCK
    layout = KVCacheLayout(layers, bs, heads, dim, torch.float32)
    with torch.inference_mode():  # NOTE(inference-mode): allocate() makes normal tensors
        dev, host = layout.allocate(8), layout.allocate(8)
    dev.copy_(torch.arange(dev.numel(), dtype=torch.float32).view_as(dev))
    with CopyEngine(dev, host) as eng:
        assert eng.submit("swap_out", [(0, 0), (5, 1)]).wait(timeout=10).exception() is None
        assert eng.submit("cow", [(1, 2)]).wait(timeout=10).exception() is None
    assert torch.equal(host[0], dev[0]) and torch.equal(host[1], dev[5])
    assert torch.equal(dev[2], dev[1])


def test_pairs_given_as_a_mapping_get_a_clear_error(engine):
    with pytest.raises(TypeError, match=r"not a mapping: pass list\(mapping.items\(\)\)"):
        engine.submit("swap_in", {1: 2, 3: 4})
    with pytest.raises(ValueError, match="pairs must be .* got 3"):
        engine.submit("cow", [(1, 2), 3])
    assert engine.stats().pending == 0


def test_no_op_pairs_are_not_copied_bytes(engine, pools):
    dev, host = pools
    want = reference(dev, dev, [(3, 3), (6, 7)])
    h = engine.submit("cow", [(3, 3), (6, 7)])
    assert h.num_blocks == 1 and h.wait(timeout=10).exception() is None
    assert torch.equal(dev, want)
    s = engine.stats()
    assert s.blocks["cow"] == 1 and s.bytes["cow"] == engine.bytes_per_block
    engine.submit("cow", [(3, 3), (4, 4), (5, 5)]).wait(timeout=10)  # runs, moves nothing
    after = engine.stats()
    assert after.blocks["cow"] == 1 and after.bytes["cow"] == engine.bytes_per_block
    assert after.bandwidth["cow"] == s.bandwidth["cow"]  # a 0-byte batch is no rate
    with pytest.raises(ValueError, match="block 3 is the destination of two copies"):
        engine.submit("defrag", [(3, 3), (4, 3)])  # a no-op pair still claims its block
    engine.submit("swap_out", [(3, 3)]).wait(timeout=10)  # two pools: a real copy
    assert engine.stats().blocks["swap_out"] == 1 and torch.equal(host[3], dev[3])
