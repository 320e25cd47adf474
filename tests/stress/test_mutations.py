"""Mutation tests of ``stress pool`` against the pool's layered locking (docs/architecture.md
#locking): each mutant patches, in this process only, a copy of one pool path with its lock
(or its version check) taken out, and a short run must report it. No product file is edited.

    refill_unlocked    BlockPool._allocate_slow: free_list.refill() outside ``with lock``
                       (yielding the GIL inside it: ``refill_yielding``)
    free_unlocked      BlockPool.free_many: release() outside the lock
    read_no_retry      SeqLock.read: waits for an even version, reads once, never re-checks
    share_unlocked     BlockSpaceManager.fork: its ref-count increments (pool.share, ``r[b] +=
                       k``, a read then a write) after its writer section, without the lock

What catches them (NOTE(races), stress/pool/races.py): the allocator threads (lock-free
``pool.allocate()`` bursts: the magazine empties often and two find it empty at once), the
sharers (forks and frees over the same blocks from several threads), the ownership ledger, the
quiet probe (a pool whose every consistent snapshot is empty), the check that the load's free
list never changes without its version, and the quiescent ``check_invariants`` every 5 ms and
at the end (a lost block, a ref count off its tables, a leak). The unmutated pool runs the same
configuration clean.

Caught probabilistically: each mutation gets up to ATTEMPTS runs of RUN_S seconds of load
(1.0 to 1.3 s each with the drain and the final check, 2 shared cores) and passes at its first
caught run. Measured on this configuration: every mutation was caught in every run tried
(refill 9 of 9, free 8 of 8, read 10 of 10, share 14 of 14), and the unmutated pool passed 26
of 26. Taking a per-run catch rate of only 0.9, six misses in a row come once in a million.
Six, not three: one CI run beside three other test processes on the 2 cores missed the
unlocked free three times in a row (12 of 12 caught since on a loaded box); a caught mutant
stops at its first run, so the extra attempts cost only a miss.
"""

from __future__ import annotations

import threading
import time

import pytest

from kvpool.core import BlockPool, BlockSpaceManager
from kvpool.core.free_list import MAGAZINE, FreeList
from kvpool.core.seqlock import SeqLock
from stress.pool.mode import PoolConfig, PoolStress
from stress.report import StressReport

RUN_S = 1.0
ATTEMPTS = 6
# the run every test uses, the unmutated pool's included: every thread operation unbatched,
# four sharers, the GIL switched as often as CPython allows, a quiescent check every 5 ms; no
# coroutines (the batched front is not what the mutants touch; one CI run with 20 of them
# reported "1 unknown sequence" in the unmutated pool once, not reproduced since, see the note)
# NOTE(defrag-race): no defragmentation here. These runs found a product race with it on
# (DefragPlanner.plan read the magazine's ids as free, and a lock-free allocate() took one
# before reserve: fixed, NOTE(plan-drain) in kvpool/core/defrag.py, test_defrag.py); one run
# with it on also reported "unknown sequences" once, not reproduced in 40 runs since
CONFIG = dict(threads=4, coroutines=0, duration=RUN_S, blocks=1024, direct=1.0, sharers=4,
              switch_interval=1e-6, check_interval=0.005, defrag=False, progress=False)


def run_once(seed: int) -> StressReport:
    return PoolStress(PoolConfig(seed=seed, **CONFIG)).run()


def caught_within(attempts: int) -> tuple[int, StressReport]:
    """(runs it took, the failing report), or (0, the last report) when every run passed."""
    rep = None
    for i in range(attempts):
        rep = run_once(seed=i)
        if not rep.ok:
            return i + 1, rep
    return 0, rep


# ---------------------------------------------------------------- the mutations
def refill_unlocked(self: BlockPool) -> int | None:
    """pool.py's ``_allocate_slow`` with the refill outside the lock (only the eviction
    fallback keeps it): two callers that found the magazine empty refill at once."""
    fast = self._fast
    while True:
        try:
            b = fast.pop()
            break
        except IndexError:
            pass
        if not refill_yielding(self.free_list):  # the mutation: no ``with self._writer``
            with self._writer:
                ids = self._take_evicting(1)
            if ids is None:
                return None
            b = ids[0]
            break
    self._ref[b] = 1
    return b


def refill_yielding(free_list: FreeList) -> bool:
    """free_list.py's ``refill``, the GIL given up between taking the chunk and cutting it
    from bulk: the interleaving an unlocked refill allows, which CPython's switch interval
    makes rare (one CI run on 2 loaded cores missed it 3 times in a row) made likely."""
    bulk = free_list.bulk
    k = min(len(bulk), MAGAZINE)
    if not k:
        return False
    chunk = bulk[len(bulk) - k:]
    time.sleep(0)
    del bulk[len(bulk) - k:]
    free_list.magazine.extend(chunk)
    free_list.refills += 1
    return True


def free_unlocked(self: BlockPool, block_ids) -> None:
    """pool.py's ``free_many`` without its lock: the release races every locked take."""
    self.release(block_ids, time.monotonic())


def read_no_retry(self: SeqLock, fn):
    """seqlock.py's ``read`` without its re-check: it waits out a writer, then returns what
    it read whatever happened meanwhile."""
    while True:
        v = self.version
        if not v & 1 or self.held_here():
            return fn(), v
        time.sleep(0)


def share_read_then_write(self: BlockPool, block_ids, k: int = 1) -> None:
    """pool.py's ``share`` as a read of the counts, then a write of count + k: the same
    result under the lock, a lost update without it."""
    r = self._ref
    counts = [r[b] for b in block_ids]
    for b, c in zip(block_ids, counts):
        r[b] = c + k


def share_unlocked(monkeypatch: pytest.MonkeyPatch) -> None:
    """``fork`` whose ``pool.share`` is put off until its writer section is over: its
    increments, read then written, run without the lock (a batched fork still holds the
    batch's)."""
    local = threading.local()
    share, fork = BlockPool.share, BlockSpaceManager.fork

    def share_later(self, block_ids, k=1):
        pending = getattr(local, "pending", None)
        if pending is None:
            return share(self, block_ids, k)
        pending.append((self, list(block_ids), k))

    def fork_then_share(self, parent_seq_id, child_seq_id):
        local.pending = []
        try:
            fork(self, parent_seq_id, child_seq_id)
        finally:
            pending, local.pending = local.pending, None
        for pool, ids, k in pending:
            share_read_then_write(pool, ids, k)  # outside the lock

    monkeypatch.setattr(BlockPool, "share", share_later)
    monkeypatch.setattr(BlockSpaceManager, "fork", fork_then_share)


# ---------------------------------------------------------------- the tests
def test_the_unmutated_pool_runs_clean():
    rep = run_once(seed=0)
    f = rep.figures
    assert rep.ok, (rep.failures(), f["violation_messages"])
    assert f["magazine_refills"] > 0 and f["ledger_claims"] > 0
    assert f["quiet_probe_reads"] > 10 and f["quiet_probe_writes"] > 10
    assert f["op_counts"].get("fork", 0) > 0


@pytest.mark.parametrize("cls, name, mutant", [
    (BlockPool, "_allocate_slow", refill_unlocked),
    (BlockPool, "free_many", free_unlocked),
    (SeqLock, "read", read_no_retry),
], ids=["refill-unlocked", "free-unlocked", "read-no-retry"])
def test_an_unlocked_pool_path_is_caught(monkeypatch, cls, name, mutant):
    monkeypatch.setattr(cls, name, mutant)
    runs, rep = caught_within(ATTEMPTS)
    assert runs, f"{name} mutated: {ATTEMPTS} runs passed"


def test_fork_increments_outside_the_lock_are_caught(monkeypatch):
    share_unlocked(monkeypatch)
    runs, rep = caught_within(ATTEMPTS)
    assert runs, f"fork's share outside the lock: {ATTEMPTS} runs passed"
