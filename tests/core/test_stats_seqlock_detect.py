"""The lock-free readers' contract, checked where a thread race would only show it now and then
(kvpool/core/seqlock.py, kvpool/core/stats.py; docs/architecture.md#locking):

* a seqlock read that a writer changed while it ran is retried (``SeqLock.read``);
* every public write moves its pool's version, the single-store fast paths too
  (``append_slots``' one-token path, ``free_many`` without a prefix cache), so the
  ``fragmentation()`` memo, kept per version, never outlives the state it measured;
* ``manager.stats()`` and ``fragmentation()`` return the counters they read at the version
  they report, never a value read again after the version check.

Deterministic: the "concurrent writer" is a whole writer section run in the middle of the read,
so each test fails at once if a reader skips its retry or a writer its version bump.
"""

from collections.abc import Callable

import pytest

from kvpool.config import CacheConfig
from kvpool.core import BlockSpaceManager
from kvpool.core.seqlock import SeqLock


def manager(caching: bool) -> BlockSpaceManager:
    return BlockSpaceManager(CacheConfig(num_device_blocks=64, num_host_blocks=8,
                                         block_size=16, enable_prefix_caching=caching))


# ---------------------------------------------------------------- SeqLock.read retries
@pytest.mark.parametrize("write", ["section", "single_store"])
def test_a_read_a_writer_changed_is_retried(write):
    sl = SeqLock()
    seen: list[int] = []

    def read() -> int:
        seen.append(sl.version)
        if len(seen) == 1:  # a writer completes while this read is under way
            if write == "section":
                with sl:
                    pass
            else:
                with sl.lock:
                    sl.single_store()
        return len(seen)

    out, v = sl.read(read)
    assert (out, v, seen) == (2, 2, [0, 2])  # the torn first read was thrown away


def test_a_read_nobody_changed_runs_once():
    sl = SeqLock()
    with sl:
        pass
    assert sl.read(lambda: "x") == ("x", 2)


# ---------------------------------------------------------------- every write moves the version
def writes(mgr: BlockSpaceManager) -> list[tuple[str, Callable[[], object]]]:
    """One manager's public writes, in an order where each one applies (bs 16)."""
    pool = mgr.device_pool
    raw: list[int] = []
    return [
        ("allocate", lambda: mgr.allocate([1], list(range(5)))),
        ("mark_computed", lambda: mgr.mark_computed(1)),
        ("append_slots one token (fast path)", lambda: mgr.append_slots(1, [7])),
        ("append_slots a new block", lambda: mgr.append_slots(1, list(range(11)))),
        ("fork", lambda: mgr.fork(1, 2)),
        ("append_slots copy-on-write", lambda: mgr.append_slots(2, [3])),
        ("free one of two", lambda: mgr.free(2)),
        ("allocate_many", lambda: raw.extend(pool.allocate_many(10))),
        ("free_many", lambda: pool.free_many(raw)),
        ("free", lambda: mgr.free(1)),
    ]


@pytest.mark.parametrize("caching", [False, True])
def test_every_write_moves_the_version_and_fragmentation_follows(caching):
    """BlockPool.allocate() (the lock-free magazine pop) is not listed: it moves no version by
    design (kvpool/core/stats.py NOTE(pop-version)); test_pool_allocate_race.py follows it."""
    mgr = manager(caching)
    pool = mgr.device_pool
    for name, write in writes(mgr):
        mgr.stats.fragmentation()  # memoised at this version
        v0 = pool.writing().version
        assert write() is not None or name not in ("allocate", "append_slots a new block")
        v = pool.writing().version
        assert v > v0 and not v & 1, f"{name}: version {v0} -> {v}"
        f, st = mgr.stats.fragmentation(), mgr.stats()
        assert (f.used_slots, f.num_free) == (st.used_slots, st.device.num_free), name
    mgr.check_invariants()
    assert mgr.stats().device.num_used == 0


# ---------------------------------------------------------------- counters read at the version
class StrikingCounters:
    """The manager's counters, except that reading ``used_slots`` the n-th time, n in
    ``strikes``, first runs a whole writer section on the device pool that changes it (a
    writer thread that got in between). ``at_version``: its value at each pool version."""

    def __init__(self, real, pool, strikes: tuple[int, ...]) -> None:
        self._real, self._pool, self._strikes = real, pool, strikes
        self.value = real.used_slots
        self.reads = 0
        self.at_version = {pool.writing().version: self.value}

    def __getattr__(self, name: str):
        return getattr(self._real, name)

    @property
    def used_slots(self) -> int:
        self.reads += 1
        if self.reads in self._strikes:
            with self._pool.writing():
                self.value += 1
            self.at_version[self._pool.writing().version] = self.value
        return self.value


@pytest.mark.parametrize("reader", ["stats", "fragmentation"])
def test_used_slots_is_the_value_at_the_version_read(reader, monkeypatch):
    mgr = manager(caching=True)
    mgr.allocate([1], list(range(40)))
    spy = StrikingCounters(mgr.counters, mgr.device_pool, strikes=(1, 3))
    monkeypatch.setattr(mgr.stats, "counters", spy)
    if reader == "stats":
        st = mgr.stats()
        used, version = st.used_slots, st.device.version
    else:
        used, version = mgr.stats.fragmentation().used_slots, mgr.device_pool.writing().version
    assert spy.reads >= 2, "the first read was changed under it: it must read again"
    assert used == spy.at_version[version], (used, version, spy.at_version)
