"""The remote write path: full computed blocks go to the shared tier, off the event loop and
off the step's critical path.

Where blocks come from (``--remote-write-policy``)::

    write_through            every group of full blocks a prefill chunk completed
    write_through_selective  only groups a later request hit locally (hot prefixes)
    write_back               a cached block as the local prefix cache evicts it (the
                             prefix index's eviction hook, before the block is handed out again)

How they travel::

    step thread (or the evicting caller), pool lock held:
        over max_inflight_bytes or no host blocks to lend? -> drop, counted (no queueing)
        lend host blocks; copy engine: device -> host        (enqueue only; FIFO, so a later
                                                              forward that reuses the device
                                                              block waits for this copy)
    copy worker: done -> call_soon_threadsafe(loop)
    event loop:  probe (dedup: skip the leading run already stored)
                 encode + CRC in a worker thread (to_thread)
                 give the host blocks back through HostBlockFront
                 put_many: one pipeline of SET NX
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Sequence

import torch

from kvpool.core import BlockSpaceManager
from kvpool.core.block import Device
from kvpool.runtime.kv.copy_engine import CopyEngine, CopyHandle
from kvpool.runtime.remote.host_front import HostBlockFront
from kvpool.runtime.remote.link import RemoteLink

log = logging.getLogger(__name__)

_Group = tuple[bytes, list[int], str]  # (chain hash of the last block, device blocks, key)


class RemoteWriter:
    def __init__(self, link: RemoteLink, front: HostBlockFront, copies: CopyEngine,
                 host_kv: torch.Tensor, bytes_per_block: int,
                 loop: asyncio.AbstractEventLoop) -> None:
        self.link = link
        self.front = front
        self.manager: BlockSpaceManager = front.manager
        self.copies = copies
        self.host_kv = host_kv
        self.bytes_per_block = bytes_per_block
        self.loop = loop
        self._lock = threading.Lock()  # in-flight bytes: step thread, evicting caller, loop
        self.inflight_bytes = 0
        self.dropped = 0  # groups dropped by backpressure (also counted in the tier)
        self.staged = 0  # groups copied out for storing
        self._tasks: set[asyncio.Task] = set()
        # NOTE(write-back-where): the eviction hook knows a block and its hash only, but a
        # key names the block's place in its prefix (root hash, index: its cluster slot), so
        # the prefill that computed it records that here, per device block (bounded).
        self._where: dict[int, tuple[bytes, str]] = {}  # block -> (hash, key)
        if link.write_policy == "write_back":
            self.manager.lender.set_evict_hook(self._on_evict)

    # ------------------------------------------------------------------ sources
    def on_prefills(self, prefills: Sequence) -> None:
        """Step thread, after ``on_step_done`` registered the chunk's full blocks."""
        policy = self.link.write_policy
        index = self.manager.device_pool.index
        if policy == "off" or index is None:
            return  # nothing to write, or no hashes to name it by (prefix caching off)
        g, bs = self.link.blocks_per_object, self.manager.block_size
        groups: list[_Group] = []
        for p in prefills:
            if policy == "write_through_selective":  # the second use of a prefix
                lo, hi = 0, p.num_cached_tokens // bs
            else:
                lo, hi = p.start // bs, p.end // bs
            for j, h, key in self._placed(index, p.block_ids, lo, hi):
                if policy == "write_back":
                    self._where[p.block_ids[j]] = (h, key)
                elif (j + 1) % g == 0:
                    groups.append((h, list(p.block_ids[j + 1 - g:j + 1]), key))
        if groups:
            self._stage(groups)

    def _placed(self, index, block_ids: Sequence[int], lo: int, hi: int):
        """(position, hash, key) of the hashed blocks ``lo <= position < hi`` of one
        sequence (``index``: the device pool's prefix index)."""
        root = index.hash_of(block_ids[0]) if block_ids else None
        if root is None:
            return
        for j in range(lo, min(hi, len(block_ids))):
            h = index.hash_of(block_ids[j])
            if h is not None:
                yield j, h, self.link.key_at(h, root, j)

    def _on_evict(self, block: int, h: bytes) -> None:
        """The prefix index's eviction hook (pool lock held): snapshot before reuse. A block no
        prefill of this replica computed (one imported from the tier) has no place known
        here and is not stored again."""
        where = self._where.pop(block, None)
        if where is not None and where[0] == h:
            self._stage([(h, [block], where[1])])

    # ------------------------------------------------------------------ staging (any thread)
    def _stage(self, groups: list[_Group]) -> None:
        """Groups staged in parts the host pool can hold, each lent apart (reader.py
        NOTE(host-cap), for stores: one lend for a prefill chunk larger than the pool failed,
        and the whole chunk was dropped, so a small host pool stored nothing)."""
        cap, part, held = self.manager.host_pool.num_blocks, [], 0
        for grp in groups:
            if part and held + len(grp[1]) > cap:
                self._stage_part(part)
                part, held = [], 0
            part.append(grp)
            held += len(grp[1])
        if part:
            self._stage_part(part)

    def _stage_part(self, groups: list[_Group]) -> None:
        n = sum(len(b) for _, b, _ in groups)
        nbytes = n * self.bytes_per_block
        with self._lock:
            over = self.inflight_bytes + nbytes > self.link.max_inflight_bytes
            if not over:
                self.inflight_bytes += nbytes
        host = None if over else self.manager.lender.lend(Device.HOST, n)
        if host is None:  # NOTE(backpressure): drop and count, never queue
            if not over:
                with self._lock:
                    self.inflight_bytes -= nbytes
            self.dropped += len(groups)
            self.loop.call_soon_threadsafe(self.link.tier.note, len(groups))
            return
        dev = [b for _, bl, _ in groups for b in bl]
        h = self.copies.submit("swap_out", zip(dev, host))
        self.staged += len(groups)
        h.add_done_callback(lambda hd: self.loop.call_soon_threadsafe(
            self._copied, groups, host, nbytes, hd))

    # ------------------------------------------------------------------ event loop
    def _copied(self, groups: list[_Group], host: list[int], nbytes: int,
                handle: CopyHandle) -> None:
        t = self.loop.create_task(self._store(groups, host, nbytes, handle.exception() is None))
        self._tasks.add(t)
        t.add_done_callback(self._tasks.discard)

    async def _store(self, groups: list[_Group], host: list[int], nbytes: int,
                     copied: bool) -> None:
        tier = self.link.tier
        try:
            if not copied:
                return
            keys = [key for _, _, key in groups]
            # dedup: a chain's leading run already stored (not a read: NOTE(dedup-probe))
            skip = await tier.probe(keys, purpose="dedup")
            todo = list(range(skip, len(groups)))
            if not todo:
                return
            values = await asyncio.to_thread(self._encode, groups, host, todo)
            await self.front.free_host_blocks(host)
            host = []
            await tier.put_many([(keys[i], v) for i, v in zip(todo, values)])
        except Exception:  # noqa: BLE001 - a store is best effort
            log.exception("remote store failed")
        finally:
            if host:
                await self.front.free_host_blocks(host)
            with self._lock:
                self.inflight_bytes -= nbytes

    def _encode(self, groups: list[_Group], host: list[int], todo: list[int]) -> list[bytes]:
        """Worker thread: header + CRC + bytes per group, read from the lent host blocks."""
        flat = self.host_kv.view(self.host_kv.shape[0], -1)
        offs = [0]
        for _, bl, _ in groups:
            offs.append(offs[-1] + len(bl))
        out = []
        for i in todo:
            h = groups[i][0]
            views = [memoryview(flat[host[k]].view(torch.uint8).numpy())
                     for k in range(offs[i], offs[i + 1])]
            out.append(self.link.encode(h, views))
        return out

    def pending(self) -> int:
        """Store tasks started on the loop and not finished (event-loop thread). With
        ``inflight_bytes == 0`` too, no store is in flight: none is copying either."""
        return len(self._tasks)

    async def aclose(self) -> None:
        if self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)
        self.manager.lender.set_evict_hook(None)
