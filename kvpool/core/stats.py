"""The block manager's counters, and lock-free snapshots of them, usage and fragmentation."""

from __future__ import annotations

import time
from collections.abc import Sized
from dataclasses import dataclass

import numpy as np

from kvpool.core.block import PoolStats
from kvpool.core.pool import BlockPool


@dataclass(slots=True)
class ManagerCounters:
    """The BlockSpaceManager's counters. Owned by the manager; its swap and defrag planners
    update them inside the pool's writer section, so a seqlock read sees them consistent with
    the pools. ``used_slots`` equals the filled token slots of the distinct used device blocks
    (checked by ``BlockSpaceManager.check_invariants``)."""

    used_slots: int = 0  # token slots holding a token (allocate / append / free / swap)
    num_swapped_seqs: int = 0  # sequences whose table is on the host (swap, fork, free)
    tail_sharers: int = 0  # live tables with shares_tail (fork, n > 1 allocation, free)
    # NOTE(preempted-queries) (block_table.py): first admissions and re-admissions apart;
    # an allocation of n sequences counts n lookups (NOTE(child-lookups), prompt_alloc.py)
    prefix_query_tokens: int = 0  # prompt tokens looked up in the prefix cache (allocate)
    prefix_hit_tokens: int = 0  # of which served from the cache (allocate)
    preempted_query_tokens: int = 0  # tokens looked up re-admitting preempted sequences
    preempted_hit_tokens: int = 0  # of which served from the cache
    cow_copies: int = 0  # copy-on-write block copies (append)
    swap_out_blocks: int = 0  # blocks copied device -> host (swap planner)
    swap_in_blocks: int = 0  # blocks copied host -> device (swap planner)
    swap_in_reused_blocks: int = 0  # swap-in blocks found in the prefix cache (swap planner)
    defrag_moves: int = 0  # defrag moves committed (defrag planner)
    defrag_retries: int = 0  # planned moves dropped at commit (defrag planner)


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
    # first admissions only; a preempted request's re-admission (its prompt and generated
    # tokens) is counted in the preempted_* pair: NOTE(preempted-queries), block_table.py
    prefix_query_tokens: int  # prompt tokens looked up in the prefix cache (monotonic)
    prefix_hit_tokens: int  # of which served from the cache (monotonic)
    preempted_query_tokens: int  # tokens looked up re-admitting preempted sequences
    preempted_hit_tokens: int  # of which served from the cache (monotonic)
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


class StatsReader:
    """Consistent snapshots of a manager's pools and counters, read without a lock (retried
    while a writer is inside either pool): call it for ``ManagerStats``; ``fragmentation`` is
    memoised per pool version."""

    def __init__(self, device: BlockPool, host: BlockPool,
                 counters: ManagerCounters, tables: Sized) -> None:
        self.device = device
        self.host = host
        self.counters = counters  # the manager's, read only here
        self.tables = tables  # the manager's seq -> table map, only its length is read
        self._frag_cache: tuple[tuple[int, int], FragmentationStats] | None = None

    def _internal(self, used_blocks: int, used_slots: int) -> tuple[float, int]:
        alloc = used_blocks * self.device.block_size
        return (1.0 - used_slots / alloc if alloc else 0.0), alloc

    def __call__(self) -> ManagerStats:
        """``manager.stats()``: counters of both pools and the manager, consistent with each
        other, lock-free (seqlock read)."""
        d, h, c = self.device, self.host, self.counters
        sd, sh = d.writing(), h.writing()  # the pools' seqlocks
        while True:
            vd, vh = sd.version, sh.version
            if (vd | vh) & 1 and not self._own_sections(vd, vh):
                time.sleep(0)
                continue
            snap = (len(self.tables), c.num_swapped_seqs, c.used_slots, c.prefix_query_tokens,
                    c.prefix_hit_tokens, c.preempted_query_tokens, c.preempted_hit_tokens,
                    c.cow_copies, c.swap_out_blocks, c.swap_in_blocks,
                    c.swap_in_reused_blocks, c.defrag_moves, c.defrag_retries, d.num_reserved)
            ds, hs = d.stats(), h.stats()
            if sd.version == vd and sh.version == vh and ds.version == vd and hs.version == vh:
                break
        (nseq, nswap, used_slots, pq, ph, ppq, pph, cow, so, si, sir, dm, dr, reserved) = snap
        internal, _ = self._internal(ds.num_used - reserved, used_slots)
        return ManagerStats(ds, hs, nseq, nswap, used_slots, internal, pq, ph, ppq, pph, cow,
                            so, si, sir, dm, dr)

    def _own_sections(self, vd: int, vh: int) -> bool:
        """Whether every pool with an odd version is in a writer section of this thread
        (NOTE(own-reader), seqlock.py): its state cannot move while this thread reads it."""
        return ((not vd & 1 or self.device.writing().held_here())
                and (not vh & 1 or self.host.writing().held_here()))

    def fragmentation(self) -> FragmentationStats:
        """Internal and external fragmentation of the device pool (see FragmentationStats).
        O(num_blocks) numpy work, memoised per pool version and magazine length
        (NOTE(pop-version)); takes no lock. Inside a writer section of this thread it reads
        directly and memoises nothing (NOTE(own-reader))."""
        d = self.device
        mag, seq = d.free_list.magazine, d.writing()
        while True:
            # NOTE(pop-version): pool.allocate()'s lock-free magazine pop moves no version (a
            # bump there would be a read-modify-write racing the writers' own, without the
            # lock). Between two versions the magazine only shrinks, one id per pop, so the
            # version and its length together name the state; equal before and after a read,
            # no pop came in between.
            v = seq.version
            key = (v, len(mag))
            cached = self._frag_cache
            if cached is not None and cached[0] == key and not v & 1 and seq.version == v:
                return cached[1]
            if v & 1 and not seq.held_here():
                time.sleep(0)
                continue
            raw = d.free_list.id_bytes()
            ds = d.stats()
            used_blocks = ds.num_used - ds.num_reserved
            used_slots = self.counters.used_slots
            if seq.version == v and len(mag) == key[1]:
                break
        out = self._measure(raw, used_blocks, used_slots)
        if not v & 1:
            self._frag_cache = (key, out)
        return out

    def _measure(self, raw: bytes, used_blocks: int, used_slots: int) -> FragmentationStats:
        """FragmentationStats of a consistent read: the free ids' bytes and the counts."""
        d = self.device
        free = np.frombuffer(raw, dtype=np.int32)
        largest, runs = free_runs(free, d.num_blocks)
        internal, alloc = self._internal(used_blocks, used_slots)
        external = 1.0 - largest / free.size if free.size else 0.0
        return FragmentationStats(internal, external, used_slots, alloc, int(free.size), largest,
                                  runs)
