"""``stress pool``'s unbatched share (stress/pool/direct.py, NOTE(direct) in
stress/pool/shadow.py): the direct calls keep the shadow's model whole, and a mutator that lost
its own writer section, invisible while every call ran inside ``manager.batch()``, is caught."""

from __future__ import annotations

import contextlib
import threading

import pytest

from kvpool.config import CacheConfig
from kvpool.core import BlockPool, BlockSpaceManager
from stress.pool.direct import DirectRuntime
from stress.pool.mode import PoolConfig, PoolStress


def test_direct_calls_keep_the_shadow_whole():
    mgr = BlockSpaceManager(CacheConfig(num_device_blocks=64, num_host_blocks=8, block_size=4))
    rt = DirectRuntime(mgr)
    assert rt.allocate_direct([1, 2], list(range(10)), "t") == 0
    assert rt.allocate_direct([3], list(range(9)), "t") == 8  # a prefix hit on 1's blocks
    assert rt.append_slots_direct(2, [9]) != []  # 1 and 2 share a partial block: copied
    assert rt.append_slots_direct(1, [5]) == []  # the one-token fast path
    assert rt.append_slots_direct(1, [6, 7]) == []
    rt.fork_direct(3, 4)
    assert rt.allocate_uncomputed_direct([5], [1, 2, 3])
    assert rt.raw_blocks(0, 3) == 3 and rt.raw_blocks(0, 3, one_by_one=True) == 3
    rt.check_all()
    assert rt.violations == 0 and not rt.in_flight, rt.messages
    rt.free_direct(1, 2)
    rt.free_direct(3, 4)
    rt.check_all()
    assert rt.violations == 0 and mgr.stats().device.num_used == 0, rt.messages


RUNS = 5  # one-second runs at most: 2 of 12 runs caught nothing, so 5 miss ~1 in 8000


@pytest.fixture
def free_without_its_lock(monkeypatch):
    """The probe's i2: ``BlockSpaceManager.free`` without its own writer section (the first
    ``pool.writing()`` on the thread inside ``free`` answers a no-op; inside a batch the lock
    is held anyway, as with the real bug)."""
    local = threading.local()
    writing, free = BlockPool.writing, BlockSpaceManager.free

    def unlocked_free(self, *seq_ids):
        local.skip = True
        try:
            return free(self, *seq_ids)
        finally:
            local.skip = False

    def writing_once_skipped(self):
        if getattr(local, "skip", False):
            local.skip = False
            return contextlib.nullcontext()
        return writing(self)

    monkeypatch.setattr(BlockSpaceManager, "free", unlocked_free)
    monkeypatch.setattr(BlockPool, "writing", writing_once_skipped)


def test_a_free_without_its_writer_section_is_caught(free_without_its_lock):
    """Every thread operation direct, frequent full checks: caught within RUNS one-second
    runs. A race shows only when threads interleave inside the unlocked free: before
    NOTE(drained) (kvpool/core/free_list.py) each of 12 one-second runs caught it; since,
    2 of 12 saw none."""
    for _ in range(RUNS):
        rep = PoolStress(PoolConfig(threads=4, coroutines=20, duration=1.0, blocks=1024,
                                    direct=1.0, check_interval=0.05, progress=False)).run()
        f = rep.figures
        assert f["direct_ops"] > 0 and f["raw_blocks_taken"] > 0
        if f["violations"] + f["errors"] > 0:
            break
    assert f["violations"] + f["errors"] > 0 and not rep.ok
