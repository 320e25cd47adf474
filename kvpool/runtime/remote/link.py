"""What the engine needs from a shared remote prefix tier, handed in by the server.

``kvpool.runtime`` and ``kvpool.remote`` are siblings that never import each other
(tests/test_layering.py): the server builds a ``RedisTier`` and its ``Namespace`` / codec and
wraps them in a :class:`RemoteLink`, a plain bundle of callables. The engine's read path
(``reader.py``) and write path (``writer.py``) only see this bundle.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kvpool.errors import ConfigError

WRITE_POLICIES = ("off", "write_through", "write_through_selective", "write_back")
# bench/route.py's trace simulation: write_back 0.2918 total hit rate vs write_through 0.2627
DEFAULT_WRITE_POLICY = "write_back"


@dataclass(slots=True)
class RemoteLink:
    """One tier plus the key and value functions of this replica's namespace."""

    tier: Any  # kvpool.remote.RemoteTier: probe / get_many / put_many / stats / note
    group_keys: Callable[[Sequence[bytes]], list[str]]  # Namespace.group_keys
    encode: Callable[[bytes, Sequence[memoryview]], bytes]  # ValueCodec.encode
    # a value get_many already checked (crc, chain hash) -> its block views (ValueCodec.split)
    split_blocks: Callable[[bytes], list[memoryview]]
    blocks_per_object: int = 1
    write_policy: str = DEFAULT_WRITE_POLICY
    prefetch_timeout_s: float = 0.5  # --remote-prefetch-timeout-ms / 1000
    max_inflight_bytes: int = 64 << 20  # write path: stores beyond this are dropped, counted
    min_fetch_blocks: int = 1  # a remote run shorter than this is recomputed
    # the cost model fetches when fetch_bias x estimated fetch s < estimated recompute s:
    # 1.0 trusts the estimates; 0.0 fetches every run of >= min_fetch_blocks (bench.remote's
    # forced arm measures the break-even with it); > 1 favours recompute (a busy tier)
    fetch_bias: float = 1.0
    # (op, seconds) -> None: the read path reports "prefetch_wait" here (RemoteMetrics.observe)
    observe: Callable[[str, float], None] | None = None
    # (chain hash, root hash, block index) -> the value's key (Namespace.key): the write path
    # names a value by where it sits in its prefix (the key's cluster slot tag)
    key_at: Callable[[bytes, bytes, int], str] | None = None

    def __post_init__(self) -> None:
        if self.write_policy not in WRITE_POLICIES:
            raise ConfigError(f"--remote-write-policy {self.write_policy!r}: use one of "
                              f"{', '.join(WRITE_POLICIES)}")
        if self.write_policy == "write_back" and self.blocks_per_object != 1:
            # NOTE(write-back-groups): an evicted block's group mates may already be reused,
            # so a group of several blocks cannot be assembled at eviction time.
            raise ConfigError("--remote-write-policy write_back stores blocks as they are "
                              "evicted, one per value: use --remote-blocks-per-object 1")
        if self.prefetch_timeout_s <= 0:
            raise ConfigError("--remote-prefetch-timeout-ms must be > 0")
        if self.blocks_per_object < 1:
            raise ConfigError("--remote-blocks-per-object must be >= 1")
        if not self.fetch_bias >= 0:  # also rejects NaN
            raise ConfigError(f"remote fetch_bias {self.fetch_bias!r}: use a number >= 0")
