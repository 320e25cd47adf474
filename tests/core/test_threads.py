"""Thread safety: batched allocate / append / free from several threads while a reader takes
lock-free snapshots. No block is ever handed out twice, every snapshot is consistent, and
nothing leaks. Bounded by operation count, not by time."""

import random
import sys
import threading

import pytest

from kvpool.config import CacheConfig
from kvpool.core import BlockPool, BlockSpaceManager, Device, SeqAlloc

N_WORKERS = 4
ROUNDS = 300


@pytest.fixture(autouse=True)
def fast_switching():
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # force many more thread interleavings
    yield
    sys.setswitchinterval(old)


def run_threads(targets):
    errors = []

    def wrap(fn):
        def inner():
            try:
                fn()
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)
        return inner

    ts = [threading.Thread(target=wrap(t)) for t in targets]
    for t in ts:
        t.start()
    for t in ts:
        t.join(timeout=120)
        assert not t.is_alive(), "a thread hung"
    if errors:
        raise errors[0]


def run_with_reader(workers, check) -> int:
    """Run ``workers`` in threads while one more thread calls ``check`` over and over until
    they are done; how many checks it made."""
    done = threading.Event()
    checks = [0]

    def reader():
        while not done.is_set():
            check()
            checks[0] += 1

    def workers_then_stop():
        try:
            run_threads(workers)
        finally:
            done.set()

    run_threads([workers_then_stop, reader])
    return checks[0]


class Owners:
    """Which sequence holds each block: ``setdefault`` is atomic in CPython, so a block handed
    to two live sequences at once is caught."""

    def __init__(self, mgr: BlockSpaceManager) -> None:
        self.mgr = mgr
        self.owner: dict[int, int] = {}  # block -> seq

    def claim(self, seq: int) -> None:
        for b in self.mgr.get_block_table(seq):
            prev = self.owner.setdefault(b, seq)
            assert prev == seq, f"block {b} handed to {seq} while {prev} holds it"

    def unclaim(self, seq: int) -> None:
        for b in self.mgr.get_block_table(seq):
            if self.owner.get(b) == seq:
                del self.owner[b]


def allocate_some(owners: Owners, rng: random.Random, live: list[int], next_seq: int,
                  bs: int) -> int:
    """One batched allocation of 1-4 new sequences; the last sequence id used."""
    reqs = []
    for _ in range(rng.randint(1, 4)):
        next_seq += 1
        # unique tokens per sequence: no sharing, so ownership must be exclusive
        toks = [next_seq * 64 + i for i in range(rng.randint(1, 6 * bs))]
        reqs.append((next_seq, toks))
    mgr = owners.mgr
    res = mgr.prompts.allocate_batch([SeqAlloc([s], t) for s, t in reqs])
    for (s, _), got in zip(reqs, res):
        if got is not None:
            owners.claim(s)
            mgr.mark_computed(s)
            live.append(s)
    return next_seq


def append_some(owners: Owners, picks: list[int], one_token: bool) -> None:
    """Append to ``picks``: one token each (the single-store fast path, seqlock.py) or two
    each in one batch."""
    mgr = owners.mgr
    for s in picks:
        owners.unclaim(s)
    if one_token:
        for s in picks:
            mgr.append_slots(s, [1])
    elif mgr.slots.append_batch([(s, [1, 2]) for s in picks]) is None:
        pass
    for s in picks:
        owners.claim(s)


def manager_worker(owners: Owners, wid: int, caching: bool, bs: int) -> None:
    """ROUNDS random operations on the manager; everything freed at the end."""
    mgr = owners.mgr
    rng = random.Random(wid)
    live: list[int] = []
    next_seq = wid * 1_000_000
    for r in range(ROUNDS):
        op = rng.random()
        if op < 0.45 or not live:
            next_seq = allocate_some(owners, rng, live, next_seq, bs)
        elif op < 0.75:
            append_some(owners, rng.sample(live, min(len(live), 3)), one_token=op < 0.6)
        elif op < 0.8 and caching:
            with mgr.batch():  # several calls under one lock acquisition
                s = live.pop(rng.randrange(len(live)))
                owners.unclaim(s)
                mgr.free(s)
        else:
            k = rng.randint(1, len(live))
            victims, live = live[:k], live[k:]
            for s in victims:
                owners.unclaim(s)
            mgr.free(*victims)
    for s in live:
        owners.unclaim(s)
    mgr.free(*live)


def check_manager_snapshot(mgr: BlockSpaceManager, bs: int) -> None:
    """One lock-free stats snapshot: cross-checks between separately kept counters (a torn
    read breaks them)."""
    st = mgr.stats()
    d = st.device
    assert d.version % 2 == 0
    assert 0 <= d.num_used <= d.num_blocks and 0 <= d.num_free
    assert st.used_slots <= (d.num_used - d.num_reserved) * bs, st
    assert d.num_used - d.num_reserved >= -(-st.used_slots // bs), st
    assert d.num_cached >= d.num_evictable
    assert st.prefix_hit_tokens <= st.prefix_query_tokens
    assert st.num_swapped_seqs <= st.num_seqs
    assert 0 <= st.internal_fragmentation < 1
    f = mgr.stats.fragmentation()
    assert f.num_free <= d.num_blocks


@pytest.mark.parametrize("caching", [True, False])
def test_manager_under_threads(caching):
    bs = 4
    mgr = BlockSpaceManager(CacheConfig(num_device_blocks=256, num_host_blocks=64, block_size=bs,
                                        enable_prefix_caching=caching))
    owners = Owners(mgr)
    workers = [lambda w=w: manager_worker(owners, w, caching, bs) for w in range(N_WORKERS)]
    snapshots = run_with_reader(workers, lambda: check_manager_snapshot(mgr, bs))
    assert snapshots > 10
    mgr.check_invariants()
    st = mgr.stats()
    assert st.num_seqs == 0
    assert st.device.num_used == 0 and st.host.num_used == 0
    assert st.device.num_free + st.device.num_evictable == 256
    assert not owners.owner


def pool_worker(pool: BlockPool, held: set[int], held_lock: threading.Lock, seed: int) -> None:
    """2000 random allocations (single-block and many) and frees; ``held`` (guarded by
    ``held_lock``, the test's own bookkeeping) catches a block handed out twice."""
    rng = random.Random(seed)
    mine: list[int] = []
    for _ in range(2000):
        if rng.random() < 0.55:
            if rng.random() < 0.5:  # the lock-free single-block path
                one = pool.allocate()
                got = [] if one is None else [one]
            else:
                got = pool.allocate_many(rng.randint(1, 8))
            if got:
                with held_lock:
                    assert not held & set(got), "block handed out twice"
                    held.update(got)
                mine += got
        elif mine:
            k = rng.randint(1, len(mine))
            out, mine = mine[:k], mine[k:]
            with held_lock:
                held.difference_update(out)
            pool.free_many(out)
    with held_lock:
        held.difference_update(mine)
    pool.free_many(mine)


def test_raw_pool_allocate_free_many_threads():
    pool = BlockPool(Device.DEVICE, 512, 16, caching=True)
    held: set[int] = set()
    held_lock = threading.Lock()  # only guards the test's own bookkeeping

    def check():
        s = pool.stats()
        assert 0 <= s.num_used <= s.num_blocks and s.version % 2 == 0

    run_with_reader([lambda s=s: pool_worker(pool, held, held_lock, s) for s in range(6)], check)
    pool.check_invariants()
    assert pool.stats().num_free == 512
