"""The pool's own races, provoked on purpose for ``stress pool`` (NOTE(races)).

The manager-level load rarely reaches the pool's layer-0 paths (docs/architecture.md#locking):
a magazine refill comes once per ``free_list.MAGAZINE`` lock-free pops, and no stats reader of
the load can tell a torn snapshot from a real one. So, next to the load::

    OwnershipLedger   every raw block by its live owner (DirectRuntime.raw_blocks): an id
                      claimed while an owner holds it is one block handed out twice
    allocator threads take raw blocks one by one through the lock-free ``pool.allocate()``, in
                      bursts: the magazine empties often, and with several of them two find
                      it empty at once, the slow path's refill race
    sharer threads    fork a child of their own parent and free it, unbatched; all parents hold
                      the same blocks (prefix hits), so their ref counts move from every sharer
    race reader       ``unversioned_change``: the load's free list must not move while its
                      version (and magazine) stands still; and the quiet probe's reads
    QuietProbe        a small manager of its own whose writer only runs net-zero sections
                      (blocks taken, then given back): any snapshot a version-retry reader
                      returns must show it empty; one that saw inside a section is torn

NOTE(races): the quiet probe's pool is not the load's on purpose. The load's snapshots can
only be checked against relations between their own fields, which a torn read rarely breaks;
the probe's every consistent snapshot is known in advance, so one torn read is enough. CPython
hands the GIL over no faster than a waiting thread's timed wait wakes (tens of microseconds,
whatever ``sys.setswitchinterval`` says), so a window a few bytecodes wide is almost never
entered: the probe also gives ``SeqLock.read`` a read that yields mid-way, as a long snapshot
may, and the sharers and allocators repeat their racy paths thousands of times a second.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from kvpool.config import CacheConfig
from kvpool.core import BlockPool, BlockSpaceManager
from stress.pool.worker import ID_STRIDE

if TYPE_CHECKING:  # direct.py imports the ledger from here
    from stress.pool.direct import DirectRuntime

__all__ = ["OwnershipLedger", "QuietProbe", "race_threads"]


class OwnershipLedger:
    """Raw block id -> the owner holding it now; ``violation`` hears a second owner."""

    def __init__(self, violation: Callable[[str], None]) -> None:
        self._violation = violation
        self._owner: dict[int, object] = {}
        self._lock = threading.Lock()  # the harness's own, never the pool's
        self.claims = 0

    def claim(self, owner: object, block_ids: Sequence[int]) -> None:
        """``owner`` holds ``block_ids`` from now on; an id held already (by anyone, this
        owner included: the same id twice in one hand) is reported, the first owner kept."""
        twice = []
        with self._lock:
            held = self._owner
            for b in block_ids:
                first = held.get(b)
                if first is None:
                    held[b] = owner
                else:
                    twice.append((b, first))
            self.claims += len(block_ids)
        for b, first in twice:
            self._violation(f"block {b} handed to {owner!r} while {first!r} holds it")

    def release(self, owner: object, block_ids: Sequence[int]) -> None:
        """``owner`` gives ``block_ids`` back (before the pool hears it)."""
        with self._lock:
            held = self._owner
            for b in block_ids:
                if held.get(b) == owner:
                    del held[b]


class QuietProbe:
    """A manager that is empty at every version a reader may return (NOTE(races))."""

    BLOCKS = 32

    def __init__(self, block_size: int) -> None:
        self.manager = BlockSpaceManager(CacheConfig(
            num_device_blocks=self.BLOCKS, num_host_blocks=4, block_size=block_size,
            watermark=0.01, enable_prefix_caching=False))
        self.tokens = list(range(3 * block_size + 1))  # four blocks, the last one partial
        self.writes = 0
        self.reads = 0

    def write_main(self, stop: threading.Event) -> None:
        """Net-zero writer sections until ``stop``: blocks taken, a pause (the GIL given
        away, the lock kept), the blocks given back."""
        pool = self.manager.device_pool
        section = pool.writing()
        while not stop.is_set():
            with section:
                ids = pool.take(self.BLOCKS // 2)
                time.sleep(0)  # other threads run while this section is open
                pool.release(ids)
            self.writes += 1
            time.sleep(0)  # the readers get their windows between sections

    def torn(self) -> str | None:
        """Read the manager through every lock-free reader: what a torn snapshot showed, or
        None when each was the empty state."""
        mgr, nb = self.manager, self.BLOCKS
        pool = mgr.device_pool
        self.reads += 1

        def slow_read() -> tuple[int, int]:  # yields mid-read, as a long snapshot may
            first = pool.num_free_blocks
            time.sleep(0)
            return first, pool.num_free_blocks

        (first, last), v = pool.writing().read(slow_read)
        if first != nb or last != nb or v & 1:
            return f"SeqLock.read returned a torn read: {first}, {last} free at version {v}"
        ps = pool.stats()  # SeqLock.read, the pool's own snapshot
        if ps.num_free != nb or ps.version & 1:
            return f"pool.stats() returned a torn snapshot: {ps}"
        st = mgr.stats()  # StatsReader: both pools and the manager's counters
        if (st.num_seqs or st.used_slots or st.device.num_free != nb
                or (st.device.version | st.host.version) & 1):
            return f"manager.stats() returned a torn snapshot: {st}"
        frag = mgr.stats.fragmentation()
        if frag.num_free != nb or frag.used_slots:
            return f"stats.fragmentation() returned a torn snapshot: {frag}"
        return None


def race_threads(rt: DirectRuntime, probe: QuietProbe | None, stop: threading.Event,
                 error: Callable[[str, BaseException], None], taken: dict[int, int], *,
                 first_owner: int, allocators: int, sharers: int) -> list[threading.Thread]:
    """The threads (not started) that provoke the pool's own races until ``stop``:
    ``allocators`` raw-block takers (owners ``first_owner`` on; blocks taken counted in
    ``taken``), ``sharers`` (share_main), and the quiet probe's writer and reader (``rt``
    hears what it saw). The sharers' parents are allocated here, before any thread runs."""

    def allocate_main(owner: int) -> None:
        rng = random.Random(owner)
        try:
            while not stop.is_set():
                n = rt.raw_blocks(owner, rng.randint(1, 32), one_by_one=True)
                taken[owner] = taken.get(owner, 0) + n
        except Exception as e:  # noqa: BLE001 - a bug in the pool: count it, stop this one
            error(f"allocator {owner}", e)

    out = [threading.Thread(target=allocate_main, args=(first_owner + i,), daemon=True,
                            name=f"stress-allocator-{i}") for i in range(allocators)]
    owners = range(first_owner + allocators, first_owner + allocators + sharers)
    prompt = [7] * (8 * rt.bs + 1)  # eight full blocks, every sharer's the same ones
    for owner in owners:  # one after the other: the later ones hit the first one's blocks
        rt.allocate([owner * ID_STRIDE], prompt)
    out += [threading.Thread(target=share_main, args=(rt, owner * ID_STRIDE, stop, error),
                             daemon=True, name=f"stress-sharer-{owner}") for owner in owners]
    out.append(threading.Thread(target=read_main, args=(rt, probe, stop, error), daemon=True,
                                name="stress-race-reader"))
    if probe is not None:
        out.append(threading.Thread(target=probe.write_main, args=(stop,), daemon=True,
                                    name="stress-probe-writer"))
    return out


def unversioned_change(pool: BlockPool) -> str | None:
    """The free list read twice (the GIL given away between) at one seqlock version: a
    change a write makes only inside its writer section (the magazine grew: a refill; the
    free list moved with the magazine still: a release) means one ran without it. Only a
    lock-free pop moves the magazine and no version (NOTE(pop-version), kvpool/core/stats.py);
    and only with a prefix cache is every release a section (without one it is a single
    store, which moves the version just after)."""
    if pool.index is None:
        return None
    free, mag = pool.free_list, pool.free_list.magazine
    v, m = pool.writing().version, len(mag)
    before = len(free)
    time.sleep(0)
    after, m2 = len(free), len(mag)
    if v & 1 or pool.writing().version != v:
        return None
    where = f"{pool.device.value} pool at version {v}"
    if m2 > m:
        return f"{where}: the magazine grew from {m} to {m2} ids, a refill without its section"
    if m2 == m and after != before:
        return (f"{where}: the free list went from {before} to {after} ids, a write without "
                "its section")
    return None


def read_main(rt: DirectRuntime, probe: QuietProbe | None, stop: threading.Event,
              error: Callable[[str, BaseException], None]) -> None:
    """The race reader: ``unversioned_change`` on the load's device pool, and the quiet
    probe's reads, until ``stop``; ``rt`` hears what they saw."""
    pool = rt.device_pool
    while not stop.is_set():
        try:
            # four cheap checks of the load's pool per (retrying, slower) probe read
            torn = (unversioned_change(pool) or unversioned_change(pool)
                    or unversioned_change(pool) or unversioned_change(pool)
                    or (probe.torn() if probe else None))
        except Exception as e:  # noqa: BLE001
            error("race reader", e)
            return
        if torn:
            rt.violation(torn)


def share_main(rt: DirectRuntime, parent: int, stop: threading.Event,
               error: Callable[[str, BaseException], None]) -> None:
    """A sharer: fork a child of ``parent`` and free it, unbatched, until ``stop``, then
    free ``parent``. Every sharer's parent holds the same blocks (prefix hits), so each
    fork and free of any of them moves the same ref counts, from several threads at once."""
    child = parent
    try:
        while not stop.is_set():
            child += 1
            rt.fork_direct(parent, child)
            rt.free_direct(child)
        rt.free_direct(parent)
    except Exception as e:  # noqa: BLE001 - a bug in the pool: count it, stop this one
        error(f"sharer {parent}", e)
