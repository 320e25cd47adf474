"""Lock-free snapshots of the block manager: counters, usage and fragmentation."""

from __future__ import annotations

import time
from array import array
from dataclasses import dataclass

import numpy as np

from kvpool.core.block import PoolStats


@dataclass(frozen=True, slots=True)
class FragmentationStats:
    """Fragmentation of the device pool at one instant.

    ``internal``: the share of token slots in used blocks that hold no token, i.e.
    ``1 - used_slots / (used_blocks * block_size)``. Only a sequence's last block can be
    partly empty, so it is at most ``(block_size - 1) / block_size`` and usually small.

    ``external``: how scattered the free (content-less) blocks are over the id space,
    ``1 - largest_free_run / num_free``: 0 when all free blocks form one contiguous id range,
    approaching 1 when every free block is isolated; 0 when there is no free block. Paged
    attention does not need contiguity, but contiguous runs make bulk copies and CUDA-graph /
    kernel-fusion friendly layouts cheaper; the defrag planner drives it back to 0.
    """

    internal: float
    external: float
    used_slots: int  # token slots holding a token, over distinct used device blocks
    allocated_slots: int  # used device blocks (excluding defrag reservations) x block_size
    num_free: int  # blocks on the device free list
    largest_free_run: int  # longest run of consecutive free block ids
    free_runs: int  # number of maximal runs of consecutive free block ids


@dataclass(frozen=True, slots=True)
class ManagerStats:
    """A consistent snapshot of the whole block manager (seqlock read, no lock taken)."""

    device: PoolStats
    host: PoolStats
    num_seqs: int  # sequences with a block table
    num_swapped_seqs: int  # of which swapped out to the host pool
    used_slots: int
    internal_fragmentation: float
    prefix_query_tokens: int  # prompt tokens looked up in the prefix cache (monotonic)
    prefix_hit_tokens: int  # of which served from the cache (monotonic)
    cow_copies: int  # copy-on-write block copies (monotonic)
    swap_out_blocks: int  # blocks copied device -> host (monotonic)
    swap_in_blocks: int  # blocks copied host -> device (monotonic)
    swap_in_reused_blocks: int  # swap-in blocks found in the device prefix cache, not copied
    defrag_moves: int  # defrag block moves committed (monotonic)
    defrag_retries: int  # planned moves dropped at commit because a table changed (monotonic)


def free_runs(free_ids: np.ndarray, num_blocks: int) -> tuple[int, int]:
    """(largest run, number of runs) of consecutive ids in ``free_ids``. O(num_blocks)."""
    if free_ids.size == 0:
        return 0, 0
    mask = np.zeros(num_blocks + 2, dtype=np.int8)
    mask[free_ids + 1] = 1
    edges = np.diff(mask)
    starts = np.flatnonzero(edges == 1)
    ends = np.flatnonzero(edges == -1)
    lengths = ends - starts
    return int(lengths.max()), int(lengths.size)


class StatsMixin:
    """Counters and snapshots of BlockSpaceManager (mixed into it)."""

    def _init_stats(self) -> None:
        self._used_slots = 0
        self.prefix_query_tokens = 0
        self.prefix_hit_tokens = 0
        self.cow_copies = 0
        self.swap_out_blocks = 0
        self.swap_in_blocks = 0
        self.swap_in_reused_blocks = 0
        self.num_swapped_seqs = 0
        self.defrag_moves = 0
        self.defrag_retries = 0
        self._frag_cache: tuple[int, FragmentationStats] | None = None

    def _internal(self, used_blocks: int, used_slots: int) -> tuple[float, int]:
        alloc = used_blocks * self.block_size
        return (1.0 - used_slots / alloc if alloc else 0.0), alloc

    def stats(self) -> ManagerStats:
        """Counters of both pools and the manager, consistent with each other, read without
        taking a lock (retries while a writer is inside either pool)."""
        d, h = self.device_pool, self.host_pool
        while True:
            vd, vh = d._seq, h._seq
            if (vd | vh) & 1:
                time.sleep(0)
                continue
            snap = (self.num_seqs_locked(), self.num_swapped_seqs, self._used_slots,
                    self.prefix_query_tokens, self.prefix_hit_tokens, self.cow_copies,
                    self.swap_out_blocks, self.swap_in_blocks, self.swap_in_reused_blocks,
                    self.defrag_moves, self.defrag_retries, d._num_reserved)
            ds, hs = d.stats(), h.stats()
            if d._seq == vd and h._seq == vh and ds.version == vd and hs.version == vh:
                break
        (nseq, nswap, used_slots, pq, ph, cow, so, si, sir, dm, dr, reserved) = snap
        internal, _ = self._internal(ds.num_used - reserved, used_slots)
        return ManagerStats(ds, hs, nseq, nswap, used_slots, internal, pq, ph, cow, so, si, sir,
                            dm, dr)

    def num_seqs_locked(self) -> int:
        return len(self._tables)

    def fragmentation(self) -> FragmentationStats:
        """Internal and external fragmentation of the device pool (see FragmentationStats).
        O(num_blocks) numpy work, memoised per pool version; takes no lock."""
        d = self.device_pool
        while True:
            v = d._seq
            cached = self._frag_cache
            if cached is not None and cached[0] == v and not v & 1:
                return cached[1]
            if v & 1:
                time.sleep(0)
                continue
            raw = d._free.tobytes() + array("i", d._fast).tobytes()
            used_blocks = d.num_used - d._num_reserved
            used_slots = self._used_slots
            if d._seq == v:
                break
        free = np.frombuffer(raw, dtype=np.int32)
        largest, runs = free_runs(free, d.num_blocks)
        internal, alloc = self._internal(used_blocks, used_slots)
        external = 1.0 - largest / free.size if free.size else 0.0
        out = FragmentationStats(internal, external, used_slots, alloc, int(free.size), largest,
                                 runs)
        self._frag_cache = (v, out)
        return out
