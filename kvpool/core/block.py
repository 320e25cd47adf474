"""Small plain objects that cross layers: devices, admission status, block and pool snapshots,
and the pools' observer protocol.

None of these hold a reference into live pool state; they are copies taken at one instant.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol


class Device(enum.Enum):
    """Which pool a block lives in. ``DEVICE`` is the GPU (or the CPU "device" pool on a
    CPU-only machine); ``HOST`` is the swap pool in host memory."""

    DEVICE = "device"
    HOST = "host"


class AllocStatus(enum.Enum):
    """Answer of an admission check (vLLM v0's table).

    ``OK``: allocate now. ``LATER``: not now, maybe after others finish. ``NEVER``: this
    request cannot fit even into an empty pool (reject it, never retry forever).
    """

    OK = "ok"
    LATER = "later"
    NEVER = "never"


@dataclass(frozen=True, slots=True)
class Admission:
    """Answer of ``BlockSpaceManager.admission``: the status, the blocks behind it, and why.

    ``capacity <= total - watermark`` is what separates NEVER from the rest (judged as if the
    pool were empty); ``need`` is what the request takes from the free set now (prefix hits on
    blocks in use cost nothing), so ``need <= capacity`` and an empty pool answers OK to
    everything that is not NEVER.
    """

    status: AllocStatus
    need: int  # blocks taken from the free set if admitted now
    capacity: int  # blocks it needs in an empty pool
    reason: str  # why it is not OK ("" when OK), written for the client / the log


@dataclass(frozen=True, slots=True)
class Block:
    """Snapshot of one physical block's metadata (vLLM v0's PhysicalTokenBlock).

    The KV bytes live in runtime tensors at index ``block_id`` of the pool for ``device``.
    """

    block_id: int  # index into the device's KV tensor; owned by its BlockPool
    device: Device  # which pool
    block_hash: bytes | None  # content hash when cached (prefix caching), else None
    num_hashed_tokens: int  # tokens covered by block_hash, from the sequence start (0 if none)
    ref_count: int  # number of block-table entries pointing here
    last_accessed: float  # time the block was last released to the evictable set (-1 never)
    computed: bool  # its KV bytes are written (a cached hit may skip recomputing it)


@dataclass(frozen=True, slots=True)
class PoolStats:
    """A consistent snapshot of one pool, taken without the pool lock (seqlock read).

    ``num_used = num_blocks - num_free - num_evictable`` (the pool keeps no separate counter:
    the lock-free allocate path must not need one); ``check_invariants`` verifies it against
    the ref counts.
    """

    device: Device
    num_blocks: int
    num_free: int  # on the free list: no content
    num_evictable: int  # ref 0 but cached content, reusable by a prefix hit or evictable
    num_used: int  # ref >= 1 (includes blocks reserved by an in-flight defrag plan)
    num_cached: int  # blocks with a registered content hash (used or evictable)
    num_reserved: int  # destination blocks held by an in-flight defrag plan
    version: int  # seqlock version the snapshot was read at (even; odd when read inside
    # the reader's own writer section: seqlock.py NOTE(own-reader)); a lock-free allocate()
    # moves no version, only num_free (stats.py NOTE(pop-version))
    evictions: int  # cached blocks evicted so far (monotonic)

    @property
    def num_allocatable(self) -> int:
        """Blocks an allocation can use now: free plus evictable."""
        return self.num_free + self.num_evictable

    @property
    def usage(self) -> float:
        """Fraction of blocks in use (vLLM's ``kv_cache_usage``)."""
        return self.num_used / self.num_blocks if self.num_blocks else 0.0


class PoolObserver(Protocol):
    """Told what becomes findable by content hash and what stops being so (kvpool.events'
    recorder publishes it). Called under the pool's lock, so it must only queue, never wait.

    ``stored``: ``hashes`` became findable in order, a chain continuing ``parent`` (None at a
    prompt's start); ``tokens`` their token ids (NOTE(event-tokens)); ``salt``, given only
    with a chain's first block and a salted chain, the salt its root was made from
    (NOTE(event-salt)). ``removed``: they are no longer findable. ``cleared``: nothing is
    cached on ``device`` any more."""

    def stored(self, device: Device, hashes: Sequence[bytes], parent: bytes | None,
               tokens: Sequence[int] | None = None, *, salt: str | None = None) -> None: ...

    def removed(self, device: Device, hashes: Sequence[bytes]) -> None: ...

    def cleared(self, device: Device) -> None: ...
