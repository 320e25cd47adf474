"""The asyncio front of the whole block manager, for the stress harness and bench.async_pool.

The product takes only host blocks from the loop (kvpool/runtime/remote/host_front.py); the stress
harness drives every manager call from coroutines against the same batching (inline when the
pool lock is free, one batch per loop iteration when the step thread holds it), so this front
adds the manager's table and raw-block calls on top of it and nothing else::

    front = PoolFront(manager)
    hit = await front.allocate([seq], token_ids)        # None when the pool is short
    ids = await front.allocate_blocks(8)                # raw device blocks, or None
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from kvpool.core import BlockSpaceManager
from kvpool.runtime.remote.host_front import HostBlockFront


class PoolFront(HostBlockFront):
    """HostBlockFront plus the manager's sequence and raw device-block calls. Each call
    that creates something an abandoned caller would leak carries its undo."""

    def __init__(self, manager: BlockSpaceManager, *, max_pending: int = 100_000,
                 executor: ThreadPoolExecutor | None = None) -> None:
        super().__init__(manager, max_pending=max_pending, executor=executor)
        pool = manager.device_pool
        # NOTE(speed): bound methods looked up once; bench.async_pool calls these per op
        self._allocate_many, self._free_many = pool.allocate_many, pool.free_many

    # ---------------------------------------------------------------- undo (applied, abandoned)
    def _undo_allocate(self, hit: int | None, seq_ids: Sequence[int], *_: Any) -> None:
        if hit is not None:
            self.manager.free(*seq_ids)

    def _undo_fork(self, _: Any, parent: int, child: int) -> None:
        self.manager.free(child)

    def _undo_blocks(self, ids: list[int] | None, _: int) -> None:
        if ids:
            self._free_many(ids)

    def _allocate(self, seq_ids: Sequence[int], token_ids: Sequence[int],
                  cache_salt: str | None) -> int | None:
        return self.manager.allocate(seq_ids, token_ids, cache_salt=cache_salt)

    # ---------------------------------------------------------------- manager operations
    # Plain functions returning call()'s coroutine: one coroutine per call, not two.
    def allocate(self, seq_ids: Sequence[int], token_ids: Sequence[int],
                 cache_salt: str | None = None):
        """Result: prefix-cached token count, or None when the pool is short."""
        return self.call(self._allocate, list(seq_ids), token_ids, cache_salt,
                         undo=self._undo_allocate)

    def append_slots(self, seq_id: int, token_ids: Sequence[int]):
        return self.call(self.manager.append_slots, seq_id, token_ids)

    def fork(self, parent: int, child: int):
        return self.call(self.manager.fork, parent, child, undo=self._undo_fork)

    def free(self, seq_id: int):  # releases: carried out even if cancelled (NOTE(cancel-free))
        return self.call(self.manager.free, seq_id, always=True)

    # ---------------------------------------------------------------- raw blocks
    def allocate_blocks(self, n: int):
        """``n`` device blocks with ref 1 (no table), or None: for KV transfer style users."""
        return self.call(self._allocate_many, n, undo=self._undo_blocks)

    def free_blocks(self, block_ids: Sequence[int]):
        return self.call(self._free_many, block_ids, always=True)
