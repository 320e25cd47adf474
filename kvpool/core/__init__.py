"""kvpool.core: the paged block pool. Pure synchronous Python + numpy.

Vocabulary (vLLM v0's): ``Block`` (PhysicalTokenBlock metadata), ``BlockTable``,
``UncachedBlockAllocator`` / ``CachedBlockAllocator`` (per-device pools), and the
``BlockSpaceManager`` that the scheduler asks ``admission`` -> OK / LATER / NEVER with its reason.
"""

from kvpool.core.allocator import UncachedBlockAllocator
from kvpool.core.block import Admission, AllocStatus, Block, Device, PoolStats
from kvpool.core.block_table import BlockTable
from kvpool.core.cached_allocator import CachedBlockAllocator
from kvpool.core.defrag import DefragPlan, DefragResult
from kvpool.core.eviction import EvictionPolicy, make_policy
from kvpool.core.hashing import HASH_VERSION, BlockHasher
from kvpool.core.manager import BlockSpaceManager, SeqAlloc
from kvpool.core.stats import FragmentationStats, ManagerStats

__all__ = [
    "Admission", "AllocStatus", "Block", "BlockHasher", "BlockSpaceManager", "BlockTable",
    "CachedBlockAllocator", "DefragPlan", "DefragResult", "Device", "EvictionPolicy",
    "FragmentationStats", "HASH_VERSION", "ManagerStats", "PoolStats", "SeqAlloc",
    "UncachedBlockAllocator", "make_policy",
]
