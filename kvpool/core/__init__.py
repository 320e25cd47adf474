"""kvpool.core: the paged block pool. Pure synchronous Python + numpy.

Vocabulary (vLLM v0's, where it has one): ``Block`` (PhysicalTokenBlock metadata),
``BlockTable``, ``BlockPool`` (per-device pools; with prefix caching each owns a
``PrefixIndex``), and the ``BlockSpaceManager`` that the scheduler asks ``admission`` -> OK /
LATER / NEVER with its reason.
"""

from kvpool.core.block import Admission, AllocStatus, Block, Device, PoolStats
from kvpool.core.block_table import BlockTable
from kvpool.core.defrag import DefragPlan, DefragResult
from kvpool.core.eviction import EvictionPolicy, make_policy
from kvpool.core.hashing import HASH_VERSION, BlockHasher
from kvpool.core.manager import BlockSpaceManager, SeqAlloc
from kvpool.core.pool import BlockPool
from kvpool.core.prefix_index import PrefixIndex
from kvpool.core.stats import FragmentationStats, ManagerStats

__all__ = [
    "Admission", "AllocStatus", "Block", "BlockHasher", "BlockPool", "BlockSpaceManager",
    "BlockTable", "DefragPlan", "DefragResult", "Device", "EvictionPolicy",
    "FragmentationStats", "HASH_VERSION", "ManagerStats", "PoolStats", "PrefixIndex",
    "SeqAlloc", "make_policy",
]
