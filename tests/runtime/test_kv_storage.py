"""KVStorage: budget parsing, sizing arithmetic, errors that name the flag, the pool tensors."""

from __future__ import annotations

import pytest
import torch

from kvpool.config import CacheConfig
from kvpool.errors import ConfigError
from kvpool.runtime.kv.storage import (
    GiB, MiB, KVStorage, device_blocks_for_budget, gpu_kv_budget, parse_bytes, parse_swap_space)
from kvpool.runtime.model import KVCacheLayout, kv_bytes_per_block, tiny_config

CFG = tiny_config()  # 4 layers, 2 KV heads of 32: 32 KiB per 16-token float32 block
BPB = kv_bytes_per_block(CFG, 16, torch.float32)


def test_tiny_block_bytes():
    assert BPB == 4 * 2 * 16 * 2 * 32 * 4 == 32 * 1024


@pytest.mark.parametrize("value, expected", [
    (0, 0), (12345, 12345), ("12345", 12345), ("2GiB", 2 * GiB), ("512MiB", 512 * MiB),
    ("512 mib", 512 * MiB), ("1.5G", 1_500_000_000), ("4KiB", 4096), ("3Mi", 3 * MiB),
    ("1e3", 1000), ("2gb", 2_000_000_000), ("7b", 7), (1.9, 1),
])
def test_parse_bytes(value, expected):
    assert parse_bytes(value) == expected


@pytest.mark.parametrize("value", ["", "lots", "2 GiBs", "-1GiB", "1..2G", -5, True, None,
                                   float("inf")])
def test_parse_bytes_rejects(value):
    with pytest.raises(ConfigError, match="--kv-cache-memory"):
        parse_bytes(value)


def test_parse_swap_space_gib_numbers_and_units():
    assert parse_swap_space(4) == 4 * GiB
    assert parse_swap_space(0.5) == GiB // 2
    assert parse_swap_space("2") == 2 * GiB
    assert parse_swap_space("0") == 0
    assert parse_swap_space("512MiB") == 512 * MiB
    for bad in (-1, "nope", float("nan")):
        with pytest.raises(ConfigError, match="--swap-space"):
            parse_swap_space(bad)


def test_sizing_is_floor_of_budget_over_block_bytes():
    s = KVStorage(CFG, 16, kv_cache_memory=10 * BPB + BPB - 1, swap_space=f"{3 * BPB}B")
    assert s.bytes_per_block == BPB
    assert (s.num_device_blocks, s.num_host_blocks) == (10, 3)
    assert s.device_kv.shape == (10, 4, 2, 16, 2, 32)
    assert s.host_kv.shape == (3, 4, 2, 16, 2, 32)
    assert s.device_bytes == 10 * BPB and s.host_bytes == 3 * BPB
    s.check_invariants()


def test_string_budgets_and_dtype():
    s = KVStorage(CFG, 16, torch.float16, kv_cache_memory="1MiB", swap_space="512KiB")
    assert s.bytes_per_block == BPB // 2
    assert s.num_device_blocks == MiB // (BPB // 2) == 64
    assert s.num_host_blocks == 32
    assert s.device_kv.dtype == s.host_kv.dtype == torch.float16


def test_pools_are_zero_filled_cpu_and_not_pinned():
    s = KVStorage(CFG, 8, kv_cache_memory="256KiB", swap_space="128KiB")
    for t in (s.device_kv, s.host_kv):
        assert t.device.type == "cpu" and t.is_contiguous()
        assert torch.count_nonzero(t) == 0 and torch.isfinite(t).all()
    assert not s.host_kv.is_pinned()
    assert s.pool("device") is s.device_kv and s.pool("host") is s.host_kv
    with pytest.raises(ValueError):
        s.pool("gpu")


def test_swap_zero_gives_empty_host_pool():
    s = KVStorage(CFG, 16, kv_cache_memory="1MiB", swap_space=0)
    assert s.num_host_blocks == 0 and s.host_kv.shape[0] == 0
    assert s.cache_config().num_host_blocks == 0
    s.check_invariants()


def test_budget_too_small_names_the_flag():
    with pytest.raises(ConfigError, match=r"raise --kv-cache-memory") as info:
        KVStorage(CFG, 16, kv_cache_memory=BPB - 1, swap_space=0)
    assert "32.00 KiB" in str(info.value)
    with pytest.raises(ConfigError, match=r"--swap-space"):
        KVStorage(CFG, 16, kv_cache_memory="1MiB", swap_space="1KiB")


def test_budget_larger_than_ram_is_refused_before_allocating():
    with pytest.raises(ConfigError, match="lower --kv-cache-memory"):
        KVStorage(CFG, 16, kv_cache_memory="100TiB", swap_space=0)


def test_block_count_overrides():
    s = KVStorage(CFG, 16, num_device_blocks=5, num_host_blocks=0)
    assert (s.num_device_blocks, s.num_host_blocks) == (5, 0)
    for kwargs in ({"num_device_blocks": 0}, {"num_device_blocks": 2, "num_host_blocks": -1}):
        with pytest.raises(ConfigError):
            KVStorage(CFG, 16, **kwargs)


@pytest.mark.parametrize("block_size", [0, 5000, 1.5, True])
def test_bad_block_size(block_size):
    with pytest.raises(ConfigError, match="block_size"):
        KVStorage(CFG, block_size, num_device_blocks=1, num_host_blocks=0)


def test_cache_config_matches_tensors():
    s = KVStorage(CFG, 16, kv_cache_memory="2MiB", swap_space="1MiB")
    cc = s.cache_config(watermark=0.0, enable_prefix_caching=False)
    assert isinstance(cc, CacheConfig)
    assert (cc.num_device_blocks, cc.num_host_blocks, cc.block_size) == (64, 32, 16)
    assert cc.watermark == 0.0 and not cc.enable_prefix_caching
    with pytest.raises(ConfigError, match="num_device_blocks"):
        s.cache_config(num_device_blocks=3)


def test_gpu_budget_arithmetic():
    # 80 GiB card, 20 GiB already used (weights): 0.9 * 80 - 20 = 52 GiB for the KV pool.
    assert gpu_kv_budget(80 * GiB, 60 * GiB, 0.9) == int(80 * GiB * 0.9) - 20 * GiB
    assert gpu_kv_budget(80 * GiB, 80 * GiB, 1.0) == 80 * GiB
    assert gpu_kv_budget(10 * GiB, 0, 0.5) < 0
    for bad in (0, 1.5, -0.1, float("nan"), True):
        with pytest.raises(ConfigError, match="--gpu-memory-utilization"):
            gpu_kv_budget(GiB, GiB, bad)


def test_cuda_sizing_without_a_gpu():
    layout = KVCacheLayout.for_model(CFG, 16, torch.float16)
    bpb = layout.bytes_per_block
    n = device_blocks_for_budget(layout, "cuda:0", None, 0.9, mem_info=(60 * GiB, 80 * GiB))
    assert n == (int(80 * GiB * 0.9) - 20 * GiB) // bpb
    # An explicit --kv-cache-memory wins over the utilization on any device.
    assert device_blocks_for_budget(layout, "cuda", "1MiB", 0.9, (GiB, GiB)) == MiB // bpb
    with pytest.raises(ConfigError, match="raise --gpu-memory-utilization"):
        device_blocks_for_budget(layout, "cuda", None, 0.5, mem_info=(GiB, 4 * GiB))
    assert device_blocks_for_budget(layout, "cpu", None) == GiB // bpb  # the CPU default
