"""Frozen, validated configuration dataclasses.

Every validation error is a :class:`~kvpool.errors.ConfigError` whose message names the field,
the bad value and the fix, so a user reading a traceback (or an HTTP 400) knows what to change.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvpool.errors import require

HASH_ALGOS = ("sha256", "blake2b", "xxh3_128")


@dataclass(frozen=True, slots=True)
class CacheConfig:
    """Shape and policy of the paged KV cache (the block manager's view of it).

    ``watermark`` is a fraction of the device pool kept free at admission time so running
    sequences can still decode (vLLM v0's 1 % default); ``watermark_blocks`` is the rounded
    block count the admission formulas use.
    """

    num_device_blocks: int  # blocks in the device (GPU, or "device" CPU) pool
    block_size: int = 16  # token slots per block
    num_host_blocks: int = 0  # blocks in the host swap pool (0 = swapping disabled)
    watermark: float = 0.01  # fraction of device blocks admission keeps free
    enable_prefix_caching: bool = True  # share full blocks by content hash
    hash_algo: str = "sha256"  # prefix hash; sha256 is the safe default (see docs/architecture.md#the-prefix-hash)
    model_id: str = "kvpool-tiny"  # mixed into the first block hash: models never share blocks
    eviction_policy: str = "lru"  # which evictable cached block goes first
    verify_hits: bool = False  # compare token ids on a hash hit (costs memory: tokens kept)

    def __post_init__(self) -> None:
        require(
            isinstance(self.block_size, int) and 1 <= self.block_size <= 4096,
            f"block_size={self.block_size!r} is invalid: use an int in 1..4096 (16 is typical)",
        )
        require(
            isinstance(self.num_device_blocks, int) and self.num_device_blocks >= 1,
            f"num_device_blocks={self.num_device_blocks!r} is invalid: the device pool needs at "
            "least 1 block; raise --kv-cache-memory / --gpu-memory-utilization",
        )
        require(
            isinstance(self.num_host_blocks, int) and self.num_host_blocks >= 0,
            f"num_host_blocks={self.num_host_blocks!r} is invalid: use 0 (no swap) or more; "
            "raise --swap-space to enable swapping",
        )
        require(
            isinstance(self.watermark, (int, float))
            and math.isfinite(self.watermark)
            and 0.0 <= self.watermark < 1.0,
            f"watermark={self.watermark!r} is invalid: use a fraction in [0, 1), e.g. 0.01",
        )
        require(
            self.hash_algo in HASH_ALGOS,
            f"hash_algo={self.hash_algo!r} is unknown: use one of {', '.join(HASH_ALGOS)} "
            "(sha256 is the default and the only one safe against crafted collisions)",
        )
        require(
            isinstance(self.model_id, str) and self.model_id != "",
            "model_id must be a non-empty string (it keeps different models' blocks apart)",
        )

    @property
    def watermark_blocks(self) -> int:
        return int(self.watermark * self.num_device_blocks)
