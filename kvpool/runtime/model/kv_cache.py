"""The paged KV pool tensor: one tensor per pool, block-major.

::

    kv[num_blocks, num_layers, 2, block_size, num_kv_heads, head_dim]
       \\_ block id  \\_ layer   \\_ 0 = K, 1 = V
                                   \\_ slot offset inside the block

Each block's bytes for every layer form one contiguous chunk of
:meth:`KVCacheLayout.bytes_per_block` bytes, so swap, copy-on-write and defrag move a block with
a single ``kv[dst].copy_(kv[src])`` (or a host<->device copy of ``kv[b]``), whatever the depth.

NOTE(finite): pools are zero-filled, not ``torch.empty``. The batched decode gathers whole blocks
and masks the slots past each sequence's length; a masked slot contributes exactly 0 only if its
bytes are finite (``-inf + NaN`` and ``0 * NaN`` are NaN). Zero-filled pools that are only ever
written with real K/V or block copies stay finite; never fill a pool with ``torch.empty``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .config import ModelConfig

__all__ = ["KVCacheLayout", "allocate_kv_cache", "kv_bytes_per_block"]


@dataclass(frozen=True, slots=True)
class KVCacheLayout:
    """Geometry of one pool. Invariant: every field positive; ``dtype`` is a floating dtype."""

    num_layers: int
    block_size: int  # tokens per block
    num_kv_heads: int
    head_dim: int
    dtype: torch.dtype

    def __post_init__(self) -> None:
        for name in ("num_layers", "block_size", "num_kv_heads", "head_dim"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ValueError(f"KVCacheLayout.{name} must be a positive int, got {value!r}")
        if not isinstance(self.dtype, torch.dtype) or not self.dtype.is_floating_point:
            raise ValueError(
                f"KVCacheLayout.dtype must be a floating torch.dtype, got {self.dtype!r}")

    @classmethod
    def for_model(cls, config: ModelConfig, block_size: int, dtype: torch.dtype) -> "KVCacheLayout":
        return cls(config.num_hidden_layers, block_size, config.num_key_value_heads,
                   config.head_dim, dtype)

    @classmethod
    def of(cls, kv: torch.Tensor) -> "KVCacheLayout":
        """The layout of an existing pool tensor (raises if it is not block-major 6-D)."""
        if kv.dim() != 6 or kv.shape[2] != 2:
            raise ValueError("expected a pool tensor [num_blocks, num_layers, 2, block_size, "
                             f"num_kv_heads, head_dim], got shape {tuple(kv.shape)}")
        _, layers, _, block_size, heads, head_dim = kv.shape
        return cls(layers, block_size, heads, head_dim, kv.dtype)

    def shape(self, num_blocks: int) -> tuple[int, ...]:
        return (num_blocks, self.num_layers, 2, self.block_size, self.num_kv_heads, self.head_dim)

    @property
    def elements_per_block(self) -> int:
        return self.num_layers * 2 * self.block_size * self.num_kv_heads * self.head_dim

    @property
    def bytes_per_block(self) -> int:
        return self.elements_per_block * torch.empty((), dtype=self.dtype).element_size()

    def num_blocks_for_bytes(self, budget_bytes: int) -> int:
        """How many blocks fit in ``budget_bytes`` (for sizing a pool from a memory budget)."""
        return max(0, int(budget_bytes) // self.bytes_per_block)

    def allocate(self, num_blocks: int, device: torch.device | str = "cpu") -> torch.Tensor:
        if isinstance(num_blocks, bool) or not isinstance(num_blocks, int) or num_blocks <= 0:
            raise ValueError(f"num_blocks must be a positive int, got {num_blocks!r}")
        # NOTE(inference-mode): allocate a normal tensor even when called under
        # torch.inference_mode(), else copies made outside it (swap, defrag) would raise.
        with torch.inference_mode(False):
            return torch.zeros(self.shape(num_blocks), dtype=self.dtype, device=device)


def allocate_kv_cache(num_blocks: int, model_config: ModelConfig, block_size: int,
                      dtype: torch.dtype = torch.float32,
                      device: torch.device | str = "cpu") -> torch.Tensor:
    """A zeroed block-major pool ``[num_blocks, layers, 2, block_size, kv_heads, head_dim]``."""
    return KVCacheLayout.for_model(model_config, block_size, dtype).allocate(num_blocks, device)


def kv_bytes_per_block(model_config: ModelConfig, block_size: int,
                       dtype: torch.dtype = torch.float32) -> int:
    """Bytes one block holds across all layers (K and V): the unit of swap/defrag copies."""
    return KVCacheLayout.for_model(model_config, block_size, dtype).bytes_per_block
