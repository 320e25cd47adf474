"""BlockLender: blocks lent out of the block tables, for the remote tier.

The remote tier stages bytes through blocks that belong to no sequence: a prefetch lands
fetched bytes in lent host blocks, copies them into lent device blocks and then adopts those
into the prefix cache; a store copies device bytes out through lent host blocks. The lender
keeps a count per block of what it lent, so the manager's ``check_invariants`` can add them
to the table references (a lent block has ref 1 and no table)::

    lend(dev, n) --> [b0 .. bn-1] ref 1, counted --+--> give_back(dev, ids)   free list
                                                   +--> adopt_prefix(ids, hs)  evictable,
                                                                               findable

Invariant: ``lent(device)[b]`` is the number of outstanding loans of block ``b``; every lent
block has at least that many references in its pool.

Locking: each method runs inside the pool's writer section (re-entrant: a manager ``batch()``
may hold it already).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence

from kvpool.core.block import Device
from kvpool.core.pool import BlockPool
from kvpool.core.prefix_index import EvictHook
from kvpool.errors import InvariantError


class BlockLender:
    """Lends blocks of the manager's two pools (owned by the manager, lent to this object)
    and owns the loan counts."""

    def __init__(self, device: BlockPool, host: BlockPool) -> None:
        self.device_pool = device
        self.host_pool = host
        self._lent: dict[Device, Counter[int]] = {Device.DEVICE: Counter(),
                                                  Device.HOST: Counter()}

    def _pool(self, device: Device) -> BlockPool:
        return self.device_pool if device is Device.DEVICE else self.host_pool

    def lent(self, device: Device) -> Counter[int]:
        """A copy of the outstanding loans of ``device``'s pool: block -> count."""
        return Counter(self._lent[device])

    def lend(self, device: Device, n: int) -> list[int] | None:
        """``n`` blocks of ``device``'s pool, ref 1, in no table (the remote tier's staging:
        fetched bytes land in lent host blocks, stored bytes are copied out through them), or
        None when the pool is short (nothing changes). ``manager.check_invariants`` counts
        them until given back."""
        pool = self._pool(device)
        with pool.writing():
            ids = pool.take(n)
            if ids:
                self._lent[device].update(ids)
            return ids

    def give_back(self, device: Device, block_ids: Sequence[int]) -> None:
        """Return lent blocks (unhashed: to the free list); a block that is not lent raises."""
        pool = self._pool(device)
        with pool.writing():
            self._check_lent(device, block_ids)
            lent = self._lent[device]
            for b in block_ids:
                lent[b] -= 1
                if not lent[b]:
                    del lent[b]
            pool.release(list(block_ids), time.monotonic())

    def _check_lent(self, device: Device, block_ids: Sequence[int]) -> None:
        """NOTE(lent-first): every id is checked against the loans (as often as it is
        listed) before anything changes, so a wrong id leaks no loan and hashes nothing."""
        lent = self._lent[device]
        for b, k in Counter(block_ids).items():
            if lent[b] < k:
                raise InvariantError(f"block {b} on {device.value} is not lent"
                                     + (f" {k} times" if k > 1 and lent[b] else ""))

    def adopt_prefix(self, block_ids: Sequence[int], hashes: Sequence[bytes],
                     first_depth: int, tokens: Sequence[int] | None = None,
                     parent: bytes | None = None, salt: str | None = None) -> int:
        """Lent device blocks whose bytes were written join the prefix cache under
        ``hashes`` (block ``i`` at depth ``first_depth + i``) as evictable blocks; a hash
        already cached keeps its block and the duplicate goes back plainly. Returns how many
        became findable. NOTE(confirm): called only after the copy completed, like a
        swap-in's hashes (no prompt hits unwritten bytes). ``tokens`` (the prompt's ids of
        these blocks) and ``parent`` (the hash before ``hashes[0]``) are for the KV events
        (NOTE(event-tokens)); the tokens are not kept for hit verification: the bytes came
        from the remote tier under the hash, not from computing these tokens here. ``salt``:
        the prompt's chain salt, told with block 0 (NOTE(event-salt))."""
        pool = self.device_pool
        n = 0
        bs = pool.block_size
        with pool.writing():
            self._check_lent(Device.DEVICE, block_ids)  # NOTE(lent-first)
            if pool.index is not None:
                for i, (b, h) in enumerate(zip(block_ids, hashes)):
                    toks = None if tokens is None else tokens[i * bs:(i + 1) * bs]
                    up = hashes[i - 1] if i else parent
                    if pool.index.register_block(b, h, first_depth + i, toks, up,
                                                 keep=False, salt=salt) == b:
                        n += 1
            self.give_back(Device.DEVICE, block_ids)
        return n

    def set_evict_hook(self, hook: EvictHook | None) -> None:
        """``hook(block, hash)`` runs under the lock before an evicted cached block is reused;
        None removes it. No-op without prefix caching."""
        if self.device_pool.index is not None:
            self.device_pool.index.set_evict_hook(hook)
