"""The pool's writer-section API (pool.py docstring) and its SeqLock, driven by hypothesis
against a shadow model of reference counts."""

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from kvpool.core import BlockPool, Device
from kvpool.core.seqlock import SeqLock

N = 12


@given(st.lists(st.booleans(), max_size=40))
def test_seqlock_version_is_odd_exactly_inside_the_outermost_section(opens):
    sl = SeqLock()
    depth = completed = 0
    for enter in opens:
        if enter:
            sl.__enter__()
            depth += 1
        elif depth:
            sl.__exit__(None, None, None)
            depth -= 1
            completed += depth == 0
        assert (sl.version & 1) == (depth > 0)
        assert sl.version == 2 * completed + (depth > 0)
    while depth:
        sl.__exit__(None, None, None)
        depth -= 1


@given(st.lists(st.sampled_from(["enter", "exit", "single"]), max_size=40))
def test_seqlock_single_store_counts_one_write_only_outside_a_section(ops):
    sl = SeqLock()
    depth = completed = 0
    for op in ops:
        if op == "enter":
            sl.__enter__()
            depth += 1
        elif op == "exit" and depth:
            sl.__exit__(None, None, None)
            depth -= 1
            completed += depth == 0
        elif op == "single":
            with sl.lock:
                sl.single_store()
            completed += depth == 0  # inside a section the section's exit counts it
        assert sl.version == 2 * completed + (depth > 0)
    while depth:
        sl.__exit__(None, None, None)
        depth -= 1


def test_seqlock_read_returns_the_version_it_saw():
    sl = SeqLock()
    with sl:
        pass
    assert sl.read(lambda: 7) == (7, 2)


class PoolAPI(RuleBasedStateMachine):
    """Refs in the shadow ``held`` (block -> references the test holds) must match the pool."""

    def __init__(self):
        super().__init__()
        self.pool = BlockPool(Device.DEVICE, N, 4, caching=True)
        self.index = self.pool.index
        self.held: Counter[int] = Counter()
        self.reserved: list[int] = []
        self.next_hash = 0

    def _used(self):
        return sorted(self.held)

    @rule(n=st.integers(0, 4), ref=st.integers(1, 3))
    def take(self, n, ref):
        with self.pool.writing():
            ids = self.pool.take(n, ref)
        if ids is None:
            assert n > self.pool.num_free_blocks
            return
        for b in ids:
            assert b not in self.held and b not in self.reserved
            self.held[b] = ref

    @precondition(lambda self: self.held)
    @rule(data=st.data())
    def release(self, data):
        b = data.draw(st.sampled_from(self._used()))
        with self.pool.writing():
            self.pool.release((b,), 1.0)
        self.held[b] -= 1
        if not self.held[b]:
            del self.held[b]

    @precondition(lambda self: self.held)
    @rule(data=st.data(), k=st.integers(1, 2))
    def share(self, data, k):
        b = data.draw(st.sampled_from(self._used()))
        with self.pool.writing():
            self.pool.share((b,), k)
        self.held[b] += k

    @precondition(lambda self: self.held)
    @rule(data=st.data())
    def register(self, data):
        b = data.draw(st.sampled_from(self._used()))
        if self.index.hash_of(b) is not None:
            return
        self.next_hash += 1
        h = self.next_hash.to_bytes(4, "little")
        with self.pool.writing():
            assert self.index.register_block(b, h, 0) == b
        assert self.index.lookup(h) == b

    @rule(data=st.data())
    def acquire_cached(self, data):
        cached = [b for b in range(N) if self.index.hash_of(b) is not None]
        if not cached:
            return
        b = data.draw(st.sampled_from(cached))
        with self.pool.writing():
            self.pool.acquire_blocks((b,))
        self.held[b] += 1

    @precondition(lambda self: not self.reserved)
    @rule(k=st.integers(1, 3))
    def reserve(self, k):
        free = self.pool.free_list.ids()[:k]
        with self.pool.writing():
            self.pool.reserve(free)
        self.reserved = list(free)
        assert self.pool.num_reserved == len(free)

    @precondition(lambda self: self.reserved)
    @rule(data=st.data())
    def move_or_unreserve(self, data):
        dst = self.reserved.pop()
        srcs = [b for b in self._used() if b not in self.reserved]
        with self.pool.writing():
            if srcs and data.draw(st.booleans()):
                src = data.draw(st.sampled_from(srcs))
                h = self.index.hash_of(src)
                self.pool.move(src, dst)
                self.held[dst] = self.held.pop(src)
                assert self.index.hash_of(src) is None and self.index.hash_of(dst) == h
            else:
                self.pool.unreserve(dst)

    @invariant()
    def pool_matches_shadow(self):
        refs = Counter(self.held)
        refs.update(self.reserved)
        self.pool.check_invariants(refs)
        assert self.pool.num_reserved == len(self.reserved)
        assert self.pool.writing().version % 2 == 0


TestPoolAPI = PoolAPI.TestCase
TestPoolAPI.settings = settings(max_examples=60, stateful_step_count=40, deadline=None)


@settings(max_examples=200, deadline=None)
@given(refs=st.lists(st.integers(0, 3), min_size=N, max_size=N),
       hashed=st.lists(st.booleans(), min_size=N, max_size=N),
       order=st.lists(st.integers(0, N - 1), max_size=3 * N),
       kind=st.sampled_from(["list", "tuple", "iter"]), caching=st.booleans())
def test_release_counts_or_rolls_back_exactly(refs, hashed, order, kind, caching):
    """release() returns how many blocks left use; a double free anywhere in the list (also
    of an id listed twice, also from a generator) leaves refs, free list and cache as they
    were."""
    from kvpool.errors import DoubleFreeError
    pool = BlockPool(Device.DEVICE, N, 4, caching=caching)
    ids = pool.allocate_many(N)
    with pool.writing():
        for b, k, h in zip(ids, refs, hashed):
            if k > 1:
                pool.share((b,), k - 1)
            if caching and h:
                pool.index.register_block(b, bytes([b]) * 32, 0)
    pool.free_many([b for b, k in zip(ids, refs) if k == 0])
    st0 = pool.stats()
    before = ([pool.ref_count(b) for b in range(N)], sorted(pool.free_list.ids()),
              st0.num_evictable, st0.num_cached)
    shadow = before[0][:]
    ok, released = True, 0
    for b in order:
        shadow[b] -= 1
        if shadow[b] < 0:
            ok = False
            break
        released += shadow[b] == 0
    arg = {"list": list, "tuple": tuple, "iter": iter}[kind](order)
    with pool.writing():
        if ok:
            assert pool.release(arg) == released
        else:
            with pytest.raises(DoubleFreeError):
                pool.release(arg)
    if not ok:
        st1 = pool.stats()  # a seqlock read: outside the writer section
        after = ([pool.ref_count(b) for b in range(N)], sorted(pool.free_list.ids()),
                 st1.num_evictable, st1.num_cached)
        assert after == before
    pool.check_invariants()


@settings(max_examples=150, deadline=None)
@given(cached=st.lists(st.booleans(), min_size=N, max_size=N),
       query=st.lists(st.integers(0, N + 3), max_size=2 * N), limit=st.integers(0, 2 * N))
def test_leading_and_prefix_hits_are_the_leading_cached_run(cached, query, limit):
    pool = BlockPool(Device.DEVICE, N, 4, caching=True)
    ids = pool.allocate_many(N)
    key = {i: bytes([i]) * 32 for i in range(N + 4)}  # ids >= N are never cached
    with pool.writing():
        for b, c in zip(ids, cached):
            if c:
                pool.index.register_block(b, key[b], 0)
    hashes = [key[i] for i in query]
    run = []
    for i in query:
        if i >= N or not cached[i]:
            break
        run.append(i)
    assert pool.index.prefix_hits(hashes) == len(run)
    assert pool.index.leading_hits(hashes, limit) == run[:limit]


@pytest.mark.parametrize("caching", [False, True])
@pytest.mark.parametrize("kind", [list, tuple])
def test_release_of_exclusive_ids_listed_twice_rolls_back(caching, kind):
    """release()'s fast path (every listed id has ref 1) must still see an id listed twice:
    DoubleFreeError, refs and free list as they were; a clean list takes the fast path."""
    from kvpool.errors import DoubleFreeError
    pool = BlockPool(Device.DEVICE, N, 4, caching=caching)
    ids = pool.allocate_many(N)
    before = ([pool.ref_count(b) for b in range(N)], sorted(pool.free_list.ids()))
    with pool.writing():
        with pytest.raises(DoubleFreeError):
            pool.release(kind([ids[3], ids[1], ids[3]]))
    assert ([pool.ref_count(b) for b in range(N)], sorted(pool.free_list.ids())) == before
    with pool.writing():
        assert pool.release(kind([ids[3], ids[1]])) == 2
    assert pool.free_list.ids()[-2:] == [ids[3], ids[1]]  # pushed in the given order (LIFO reuse)
    assert pool.ref_count(ids[3]) == pool.ref_count(ids[1]) == 0
    pool.check_invariants()


def test_take_evicts_through_the_index_whose_hook_sees_the_hash_first():
    """A cached pool parks a released hashed block in its index (still findable, allocatable)
    and evicts it only when the free list is short; the hook registered on the index sees the
    victim while its hash is still there. An uncached pool has no index."""
    pool = BlockPool(Device.DEVICE, 2, 4, caching=True)
    h = b"a" * 32
    seen = []
    pool.index.set_evict_hook(lambda b, hb: seen.append((b, hb, pool.index.lookup(hb))))
    a, b = pool.allocate_many(2)
    with pool.writing():
        pool.index.register_block(a, h, 0)
        assert pool.release((a, b), 1.0) == 2
    assert pool.stats().num_evictable == 1 and pool.num_free_blocks == 2
    assert pool.block(a).last_accessed == 1.0 and pool.index.lookup(h) == a
    with pool.writing():
        assert pool.take(2) == [b, a]  # the free block first, then the victim
    assert seen == [(a, h, a)]
    assert pool.index.lookup(h) is None and pool.stats().evictions == 1
    pool.check_invariants()
    assert BlockPool(Device.HOST, 2).index is None
