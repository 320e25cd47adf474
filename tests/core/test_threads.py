"""Thread safety: batched allocate / append / free from several threads while a reader takes
lock-free snapshots. No block is ever handed out twice, every snapshot is consistent, and
nothing leaks. Bounded by operation count, not by time."""

import random
import sys
import threading

import pytest

from kvpool.config import CacheConfig
from kvpool.core import BlockPool, BlockSpaceManager, Device

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


@pytest.mark.parametrize("caching", [True, False])
def test_manager_under_threads(caching):
    bs = 4
    mgr = BlockSpaceManager(CacheConfig(num_device_blocks=256, num_host_blocks=64, block_size=bs,
                                        enable_prefix_caching=caching))
    owner: dict[int, int] = {}  # block -> seq: setdefault is atomic in CPython
    done = threading.Event()
    snapshots = [0]

    def claim(seq):
        for b in mgr.get_block_table(seq):
            prev = owner.setdefault(b, seq)
            assert prev == seq, f"block {b} handed to {seq} while {prev} holds it"

    def unclaim(seq):
        for b in mgr.get_block_table(seq):
            if owner.get(b) == seq:
                del owner[b]

    def worker(wid):
        rng = random.Random(wid)
        live: list[int] = []
        next_seq = wid * 1_000_000
        for r in range(ROUNDS):
            op = rng.random()
            if op < 0.45 or not live:
                reqs = []
                for _ in range(rng.randint(1, 4)):
                    next_seq += 1
                    # unique tokens per sequence: no sharing, so ownership must be exclusive
                    toks = [next_seq * 64 + i for i in range(rng.randint(1, 6 * bs))]
                    reqs.append((next_seq, toks))
                from kvpool.core import SeqAlloc
                res = mgr.prompts.allocate_batch([SeqAlloc([s], t) for s, t in reqs])
                for (s, _), got in zip(reqs, res):
                    if got is not None:
                        claim(s)
                        mgr.mark_computed(s)
                        live.append(s)
            elif op < 0.75:
                picks = rng.sample(live, min(len(live), 3))
                for s in picks:
                    unclaim(s)
                if op < 0.6:  # one token each: the single-store fast path (seqlock.py)
                    for s in picks:
                        mgr.append_slots(s, [1])
                elif mgr.slots.append_batch([(s, [1, 2]) for s in picks]) is None:
                    pass
                for s in picks:
                    claim(s)
            elif op < 0.8 and caching:
                with mgr.batch():  # several calls under one lock acquisition
                    s = live.pop(rng.randrange(len(live)))
                    unclaim(s)
                    mgr.free(s)
            else:
                k = rng.randint(1, len(live))
                victims, live = live[:k], live[k:]
                for s in victims:
                    unclaim(s)
                mgr.free(*victims)
        for s in live:
            unclaim(s)
        mgr.free(*live)

    def reader():
        while not done.is_set():
            st = mgr.stats()
            d = st.device
            assert d.version % 2 == 0
            # cross-checks between separately kept counters: a torn read breaks them
            assert 0 <= d.num_used <= d.num_blocks and 0 <= d.num_free
            assert st.used_slots <= (d.num_used - d.num_reserved) * bs, st
            assert d.num_used - d.num_reserved >= -(-st.used_slots // bs), st
            assert d.num_cached >= d.num_evictable
            assert st.prefix_hit_tokens <= st.prefix_query_tokens
            assert st.num_swapped_seqs <= st.num_seqs
            assert 0 <= st.internal_fragmentation < 1
            f = mgr.stats.fragmentation()
            assert f.num_free <= d.num_blocks
            snapshots[0] += 1

    workers = [lambda w=w: worker(w) for w in range(N_WORKERS)]

    def workers_then_stop():
        try:
            run_threads(workers)
        finally:
            done.set()

    run_threads([workers_then_stop, reader])
    assert snapshots[0] > 10
    mgr.check_invariants()
    st = mgr.stats()
    assert st.num_seqs == 0
    assert st.device.num_used == 0 and st.host.num_used == 0
    assert st.device.num_free + st.device.num_evictable == 256
    assert not owner


def test_raw_pool_allocate_free_many_threads():
    pool = BlockPool(Device.DEVICE, 512, 16, caching=True)
    held = set()
    held_lock = threading.Lock()  # only guards the test's own bookkeeping
    done = threading.Event()

    def worker(seed):
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

    def reader():
        while not done.is_set():
            s = pool.stats()
            assert 0 <= s.num_used <= s.num_blocks and s.version % 2 == 0

    def all_workers():
        try:
            run_threads([lambda s=s: worker(s) for s in range(6)])
        finally:
            done.set()

    run_threads([all_workers, reader])
    pool.check_invariants()
    assert pool.stats().num_free == 512
