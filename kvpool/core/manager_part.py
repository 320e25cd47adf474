"""ManagerPart: what a component of BlockSpaceManager (kvpool/core/manager.py) is lent: the
device pool, the block tables (owned by the manager), its counters and its hasher."""

from __future__ import annotations

from kvpool.core.block_table import BlockTables
from kvpool.core.hashing import BlockHasher
from kvpool.core.pool import BlockPool
from kvpool.core.stats import ManagerCounters

__all__ = ["ManagerPart"]


class ManagerPart:
    """The manager's device pool, tables, counters and hasher, and what the pool fixes (block
    size, prefix caching, its index), for the components that work over them."""

    def __init__(self, device: BlockPool, tables: BlockTables,
                 counters: ManagerCounters, hasher: BlockHasher) -> None:
        self.device_pool = device
        self.tables = tables
        self.counters = counters
        self.hasher = hasher
        self.block_size = device.block_size
        self.caching = device.caching
        self.index = device.index  # None without prefix caching
