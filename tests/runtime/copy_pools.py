"""The copy engine tests' pools and helpers (tests/runtime/test_copy_*.py; their fixtures are
in tests/runtime/conftest.py)."""

from __future__ import annotations

import torch

BLOCK = (2, 2, 4, 2, 8)  # layers, K|V, block_size, kv_heads, head_dim: 1 KiB float32 blocks
N_DEV, N_HOST = 24, 16


def make_pools(n_dev=N_DEV, n_host=N_HOST):
    """Pools whose every element is distinct: block b of the device pool holds values
    b*1000 + i, of the host pool -(b*1000 + i) - 1."""
    per = torch.Size(BLOCK).numel()
    dev = (torch.arange(n_dev)[:, None] * 1000 + torch.arange(per)).float().view(n_dev, *BLOCK)
    host = -(torch.arange(n_host)[:, None] * 1000 + torch.arange(per)).float() - 1
    return dev.contiguous(), host.view(n_host, *BLOCK).contiguous()


def reference(src, dst, pairs):
    """All reads before writes: dst'[d] = src_before[s]."""
    before = src.clone()
    out = dst.clone()
    if src.data_ptr() == dst.data_ptr():
        out = before.clone()
    for s, d in pairs:
        out[d] = before[s]
    return out




def failed_of(handles, timeout=10):
    """Wait for every handle (None skipped); the failed ones."""
    return [h for h in handles if h is not None and h.exception(timeout) is not None]
