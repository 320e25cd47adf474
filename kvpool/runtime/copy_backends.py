"""Copy backends: the objects that move block bytes for the :class:`CopyEngine`.

The engine owns ordering, bookkeeping and threads; a backend only executes one batch of
``(src, dst)`` block pairs between two pools and returns when the bytes are in place. The
protocol (:class:`CopyBackend`) is what a CUDA-stream backend will implement later (launch on its
own stream, then synchronize an event before returning, all on the engine's worker thread).
Also here: :data:`COPY_KINDS` (kind -> source and destination pool; re-exported by
copy_engine).

Semantics of one batch, whatever the backend (:func:`plan_copies` enforces them):

- every destination appears at most once (two writes to one block are ambiguous: rejected);
- a source may appear many times (copy-on-write fan-out);
- ``src == dst`` inside one pool is a no-op;
- within one pool, **all reads happen before any write**: a destination that is also another
  pair's source is read first (``1->2, 2->3`` leaves old 1 in 2 and old 2 in 3, and the swap
  ``1->2, 2->1`` exchanges the blocks). The core's defrag planner only moves into free holes,
  so it never needs this, but the engine stays correct if it ever does.

Measured on the 2-core dev box (torch 2.13 CPU, one thread, 256 scattered blocks, ratio to one
contiguous ``copy_`` of the same bytes; 32 KiB / 256 KiB blocks):

    torch._foreach_copy_ over cached per-block views   0.75 / 1.00   <- used
    the same, views created per call (kv[b])           0.47 / 0.90
    Python loop of kv_dst[d].copy_(kv_src[s])          0.44 / 0.85   (~3-8 us dispatch per block)
    index_select + index_copy_                         0.44 / 0.22-0.43 (moves every byte twice)
    fancy indexing dst[idx] = src[idx]                   -  / 0.21

A large CPU batch (``split_min_bytes``, 8 MiB; ``raw_large``) skips torch: one libc
``memmove`` per run through ctypes, on raw pointers into the contiguous pools (ids were checked
against the pools by the engine's submit). ``_foreach_copy_`` costs a dispatch and a
TensorIterator per block (~2-4 us, 10-25 % of a 256 KiB block's copy); a memmove call costs
~0.3 us. ctypes releases the GIL for each call, so compute threads run between blocks.
Measured on the dev box (256 x 256 KiB scattered blocks, median of 35 rounds):
memmove per run 21.4 GB/s, ``_foreach_copy_`` 16.5 GB/s, one contiguous ``copy_`` 19.0 GB/s
on one thread and 21.9 on two.

Runs of consecutive ids become one slice copy (fewer dispatches). Two intra-op threads per
copy were slower than one on this shared box (OpenMP fork/join per block), so each copy runs on
one thread (``num_threads``; the setting is per thread, compute keeps its own). A large batch
(``split_min_bytes``, 8 MiB) is instead copied by ``split_threads`` threads, each taking
chunks of ~1 MiB of runs until none is left (NOTE(straggler)): one thread moves ~6 GB/s here
while a contiguous two-thread ``copy_`` moves ~8.5, so a 64 MiB swap went from 0.61 to >= 0.8
of that memcpy. Small batches (the usual decode-time swaps, copy-on-write) stay on the worker
thread, off compute's core.
``_foreach_copy_`` releases the GIL for the whole batch, so Python compute keeps running.
"""

from __future__ import annotations

import ctypes
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from operator import itemgetter
from typing import Mapping, NamedTuple, Protocol, Sequence

import torch

__all__ = ["COPY_KINDS", "CopyBackend", "CopyPlan", "CopyRun", "TorchCopyBackend",
           "check_destinations", "plan_copies"]


# kind -> (source pool, destination pool)
COPY_KINDS: dict[str, tuple[str, str]] = {
    "swap_out": ("device", "host"),
    "swap_in": ("host", "device"),
    "cow": ("device", "device"),
    "defrag": ("device", "device"),
}


# One run: ``(src, dst, length, staged)``: ``dst[dst:dst+length] <- src[src:src+length]``,
# reading the staging buffer instead of the source pool when ``staged`` (``src`` then indexes
# the buffer). A plain tuple: plans are built per batch on the copy path, and creating a
# NamedTuple/dataclass per run cost more than the rest of the planning (measured, 256 runs).
CopyRun = tuple[int, int, int, bool]


class CopyPlan(NamedTuple):
    """Coalesced form of a batch. Invariant: runs are sorted by destination and their
    destination ranges are disjoint; ``stage`` lists the source blocks to snapshot (in this
    order) before any run executes."""

    runs: tuple[CopyRun, ...]
    stage: tuple[int, ...]
    num_blocks: int  # pairs that copy bytes (no-ops excluded)


def check_destinations(pairs: Sequence[tuple[int, int]]) -> None:
    """Raise ``ValueError`` when a destination appears twice (ambiguous plan)."""
    dsts = [d for _, d in pairs]
    if len(set(dsts)) != len(dsts):
        seen: set[int] = set()
        dup = next(d for d in dsts if d in seen or seen.add(d))
        raise ValueError(f"block {dup} is the destination of two copies in one batch; a plan "
                         "must write each destination once")


def plan_copies(pairs: Sequence[tuple[int, int]], same_pool: bool) -> CopyPlan:
    """Coalesce ``pairs`` into runs where both the source and destination ids are consecutive.

    Raises ``ValueError`` when a destination appears twice. With ``same_pool``, sources that are
    also destinations are staged so that all reads happen before writes (module docstring).
    """
    check_destinations(pairs)
    # NOTE(sort): destinations are unique, so sorting by the destination id alone is a total
    # order (and int keys sort several times faster than (dst, src) tuples).
    if same_pool:
        todo = sorted((p for p in pairs if p[0] != p[1]), key=itemgetter(1))
        dst_set = {d for _, d in todo}
        stage_index: dict[int, int] = {}
        for s, _ in todo:
            if s in dst_set and s not in stage_index:
                stage_index[s] = len(stage_index)
    else:
        todo = sorted(pairs, key=itemgetter(1))
        stage_index = {}
    runs: list[CopyRun] = []
    run_src = run_dst = length = 0
    run_staged = False
    for s, d in todo:
        staged = bool(stage_index) and s in stage_index
        src = stage_index[s] if staged else s
        if length and staged == run_staged and d == run_dst + length and src == run_src + length:
            length += 1
            continue
        if length:
            runs.append((run_src, run_dst, length, run_staged))
        run_src, run_dst, length, run_staged = src, d, 1, staged
    if length:
        runs.append((run_src, run_dst, length, run_staged))
    return CopyPlan(tuple(runs), tuple(stage_index), len(todo))


class CopyBackend(Protocol):
    """What the engine needs from a backend. Called only from the engine's worker thread.

    ``attach`` is called once with the pools (``{"device": kv, "host": kv}``) before any copy;
    ``copy`` executes one batch and returns once the destination bytes are final (a CUDA backend
    launches on its stream and synchronizes an event before returning); it raises on failure,
    and the engine then fails only that batch's handle. ``close`` releases backend resources.
    """

    name: str

    def attach(self, pools: Mapping[str, torch.Tensor]) -> None: ...

    def copy(self, src_pool: str, dst_pool: str, pairs: Sequence[tuple[int, int]]) -> int: ...

    def close(self) -> None: ...


class TorchCopyBackend:
    """Synchronous torch copies (the CPU backend): coalesced runs through one
    ``torch._foreach_copy_`` call over cached block views.

    Invariant: ``_views[pool][b]`` is ``None`` or the view ``pools[pool][b]``; views are created
    on first use and kept (one small tensor object per touched block) because creating a view
    costs about as much as copying a 32 KiB block.
    """

    name = "torch"
    CHUNK_BYTES = 1 << 20  # a split batch is taken in chunks of about this many bytes ...
    CHUNKS_PER_THREAD = 4  # ... and at least this many chunks per thread (NOTE(straggler))

    def __init__(self, num_threads: int | None = 1, cache_views: bool = True,
                 split_threads: int | None = None, split_min_bytes: int = 8 << 20,
                 raw_large: bool = True) -> None:
        self.num_threads = num_threads  # intra-op threads for copies on the worker thread
        self.cache_views = cache_views
        # threads sharing one large batch (the worker included); default: up to 2 cores
        self.split_threads = (min(2, os.cpu_count() or 1) if split_threads is None
                              else split_threads)
        if self.split_threads < 1:
            raise ValueError(f"split_threads must be >= 1, got {split_threads}")
        self.split_min_bytes = split_min_bytes
        self.raw_large = raw_large  # large CPU batches by memmove (NOTE(memmove)), else torch
        self._pools: dict[str, torch.Tensor] = {}
        self._views: dict[str, list[torch.Tensor | None]] = {}
        self._threads_set = False
        self._foreach = getattr(torch, "_foreach_copy_", None)
        self._helpers: ThreadPoolExecutor | None = None  # split_threads - 1, on first use

    def attach(self, pools: Mapping[str, torch.Tensor]) -> None:
        for name, kv in pools.items():
            if kv.dim() < 1 or not kv.is_contiguous():
                raise ValueError(f"pool {name!r} must be a contiguous block-major tensor")
        self._pools = dict(pools)
        self._views = {name: [None] * kv.shape[0] for name, kv in self._pools.items()}

    def _block(self, pool: str, b: int) -> torch.Tensor:
        if not self.cache_views:
            return self._pools[pool][b]
        cache = self._views[pool]
        v = cache[b]
        if v is None:
            v = cache[b] = self._pools[pool][b]
        return v

    def copy(self, src_pool: str, dst_pool: str, pairs: Sequence[tuple[int, int]]) -> int:
        """Execute one batch; returns the number of blocks whose bytes were copied."""
        if not self._threads_set and self.num_threads is not None:
            # NOTE(threads): torch's intra-op thread count is per thread; this sets the worker's
            # only, the compute thread keeps its own setting.
            torch.set_num_threads(self.num_threads)
            self._threads_set = True
        src_kv, dst_kv = self._pools[src_pool], self._pools[dst_pool]
        plan = plan_copies(pairs, same_pool=src_pool == dst_pool)
        if not plan.runs:
            return 0
        staged = None
        if plan.stage:
            # NOTE(read-before-write): snapshot the sources that this batch also overwrites.
            index = torch.tensor(plan.stage, dtype=torch.long, device=src_kv.device)
            staged = src_kv.index_select(0, index)
        bpb = dst_kv[0].nbytes  # bytes per block
        large = plan.num_blocks * bpb >= self.split_min_bytes
        if large and self.raw_large and src_kv.device.type == dst_kv.device.type == "cpu":
            self._memmove_plan(plan.runs, src_kv, dst_kv, staged, bpb)
            return plan.num_blocks
        dsts, srcs = self._run_views(src_pool, dst_pool, plan.runs, staged)
        if large:
            self._run_shares(lambda part: self._copy_runs(*zip(*part)), list(zip(dsts, srcs)),
                             plan.runs, bpb)
        else:
            self._copy_runs(dsts, srcs)
        return plan.num_blocks

    def _memmove_plan(self, runs: Sequence[CopyRun], src_kv: torch.Tensor,
                      dst_kv: torch.Tensor, staged: torch.Tensor | None, bpb: int) -> None:
        """NOTE(memmove): one libc memmove per run, GIL released per call (module docstring)."""
        d0, s0 = dst_kv.data_ptr(), src_kv.data_ptr()
        g0 = staged.data_ptr() if staged is not None else 0
        moves = [(d0 + d * bpb, (g0 if st else s0) + s * bpb, n * bpb)
                 for s, d, n, st in runs]
        self._run_shares(self._memmove_runs, moves, runs, bpb)

    def _run_views(self, src_pool: str, dst_pool: str, runs: Sequence[CopyRun],
                   staged: torch.Tensor | None) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """The destination and source tensor of each run: a cached block view for one block,
        a slice of the pool (or of the staged snapshot) for a longer run."""
        src_kv, dst_kv = self._pools[src_pool], self._pools[dst_pool]
        dsts: list[torch.Tensor] = []
        srcs: list[torch.Tensor] = []
        block = self._block
        for src, dst, length, from_stage in runs:
            if length == 1:
                dsts.append(block(dst_pool, dst))
                srcs.append(staged[src] if from_stage else block(src_pool, src))
            else:
                dsts.append(dst_kv[dst:dst + length])
                srcs.append((staged if from_stage else src_kv)[src:src + length])
        return dsts, srcs

    def _copy_runs(self, dsts: Sequence[torch.Tensor], srcs: Sequence[torch.Tensor]) -> None:
        if self._foreach is not None:
            self._foreach(list(dsts), list(srcs))
        else:  # older torch: same semantics, one dispatch per run
            for d, s in zip(dsts, srcs):
                d.copy_(s)

    @staticmethod
    def _memmove_runs(moves: Sequence[tuple[int, int, int]]) -> None:
        mm = ctypes.memmove
        for dst, src, n in moves:
            mm(dst, src, n)

    def _run_shares(self, run: Callable[[list], None], items: list, runs: Sequence[CopyRun],
                    block_bytes: int) -> None:
        """``run`` over ``items`` (one per run) on ``split_threads`` threads, the helpers and
        this one, each taking the next chunk of about equal bytes from one shared cursor until
        none is left. Every chunk finishes (or fails) before this returns; the first error is
        raised.

        NOTE(straggler): chunks are taken, not dealt. With fixed halves a batch took as long as
        its slower thread, twice as long when the other core was busy; pulling chunks, the
        thread that runs does the work."""
        k = self.split_threads
        if k < 2 or len(items) < k:
            run(items)
            return
        chunks = iter(self._chunks(items, runs, block_bytes))
        take = threading.Lock()

        def drain() -> None:
            while True:
                with take:
                    part = next(chunks, None)
                if part is None:
                    return
                run(part)

        self._drain_on_all(drain)

    def _chunks(self, items: list, runs: Sequence[CopyRun], block_bytes: int) -> list[list]:
        """``items`` cut into consecutive chunks of about equal bytes: at least
        ``CHUNKS_PER_THREAD`` per thread, else one per ``CHUNK_BYTES``."""
        total = sum(r[2] for r in runs)
        n = min(len(items), max(self.CHUNKS_PER_THREAD * self.split_threads,
                                total * block_bytes // self.CHUNK_BYTES))
        cuts, acc, j = [0], 0, 1
        for i, r in enumerate(runs):
            acc += r[2]
            if j < n and acc * n >= total * j:
                cuts.append(i + 1)
                j += 1
        cuts.append(len(items))
        return [items[a:b] for a, b in zip(cuts, cuts[1:]) if b > a]

    def _drain_on_all(self, drain: Callable[[], None]) -> None:
        """``drain`` on the ``split_threads - 1`` helpers and on this thread; returns when every
        call has returned, raising the first error."""
        k = self.split_threads
        if self._helpers is None:
            self._helpers = ThreadPoolExecutor(
                k - 1, thread_name_prefix="kvpool-copy-split",
                initializer=torch.set_num_threads, initargs=(1,))
        futures = [self._helpers.submit(drain) for _ in range(k - 1)]
        error: BaseException | None = None
        try:
            drain()
        except BaseException as e:  # noqa: BLE001 (re-raised below, after the helpers)
            error = e
        for f in futures:
            try:
                f.result()
            except BaseException as e:  # noqa: BLE001
                error = error or e
        if error is not None:
            raise error

    def close(self) -> None:
        if self._helpers is not None:
            self._helpers.shutdown(wait=True)
            self._helpers = None
        self._views.clear()
        self._pools.clear()
