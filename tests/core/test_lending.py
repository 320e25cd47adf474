"""BlockLender (core/lending.py): blocks lent out of the tables, on real pools.

A hypothesis state machine lends, gives back and adopts blocks of a cached device pool and an
uncached host pool while a simple model counts the loans; after every rule the lender's counts
equal the model's and each pool's own check passes with exactly those references (a lent block
is in no table, so its loans are its only references). An eviction hook records what lending
evicts: an evicted hash is never findable afterwards.
"""

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from kvpool.core import BlockPool, Device
from kvpool.core.lending import BlockLender
from kvpool.errors import InvariantError

DEVICES = st.sampled_from([Device.DEVICE, Device.HOST])


def make_lender(caching=True):
    return BlockLender(BlockPool(Device.DEVICE, 8, 2, caching=caching),
                       BlockPool(Device.HOST, 6, 2))


class LenderMachine(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.lender = make_lender()
        self.pools = {Device.DEVICE: self.lender.device_pool, Device.HOST: self.lender.host_pool}
        self.loans = {Device.DEVICE: [], Device.HOST: []}  # model: lent block ids
        self.evicted = []  # (block, hash) the hook saw
        self.lender.set_evict_hook(lambda b, h: self.evicted.append((b, h)))
        self.next_hash = 0

    @rule(device=DEVICES, n=st.integers(1, 5))
    def lend(self, device, n):
        free = self.pools[device].num_free_blocks
        seen = len(self.evicted)
        ids = self.lender.lend(device, n)
        if n > free:
            assert ids is None
            return
        assert ids is not None and len(ids) == n and len(set(ids)) == n
        assert not set(ids) & set(self.loans[device])
        self.loans[device] += ids
        for b, h in self.evicted[seen:]:  # evicted to be lent: its hash is gone
            assert b in ids and self.pools[Device.DEVICE].index.lookup(h) is None

    @rule(device=DEVICES, data=st.data())
    def give_back(self, device, data):
        lent = self.loans[device]
        if not lent:
            return
        back = data.draw(st.lists(st.sampled_from(lent), unique=True, min_size=1))
        self.lender.give_back(device, back)
        for b in back:
            lent.remove(b)

    @rule(device=DEVICES, block=st.integers(0, 5))
    def give_back_unlent_raises(self, device, block):
        if block in self.loans[device]:
            return
        with pytest.raises(InvariantError, match="not lent"):
            self.lender.give_back(device, [block])

    @rule(data=st.data(), dup=st.booleans())
    def adopt(self, data, dup):
        lent = self.loans[Device.DEVICE]
        if not lent:
            return
        blocks = data.draw(st.lists(st.sampled_from(lent), unique=True, min_size=1))
        pool = self.pools[Device.DEVICE]
        hashes = []
        for _ in blocks:
            self.next_hash += 1
            hashes.append(self.next_hash.to_bytes(32, "big"))
        if dup and self.next_hash > len(blocks):  # reuse an earlier hash: maybe still cached
            hashes[0] = (self.next_hash - len(blocks)).to_bytes(32, "big")
        before = pool.index.lookup(hashes[0])
        n = self.lender.adopt_prefix(blocks, hashes, 0)
        for b in blocks:
            lent.remove(b)
        assert n == len(blocks) - (before is not None)
        for i, (b, h) in enumerate(zip(blocks, hashes)):
            want = before if i == 0 and before is not None else b
            assert pool.index.lookup(h) == want
        assert pool.num_free_blocks + len(lent) <= pool.num_blocks

    @invariant()
    def counts_match(self):
        for device, pool in self.pools.items():
            lent = self.lender.lent(device)
            assert sorted(lent.elements()) == sorted(self.loans[device])
            pool.check_invariants(lent)


TestLenderMachine = LenderMachine.TestCase
TestLenderMachine.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)


def test_lent_is_a_copy():
    lender = make_lender()
    ids = lender.lend(Device.HOST, 2)
    lender.lent(Device.HOST).clear()
    assert sorted(lender.lent(Device.HOST).elements()) == sorted(ids)


def test_without_caching_adopt_returns_blocks_and_finds_nothing():
    lender = make_lender(caching=False)
    ids = lender.lend(Device.DEVICE, 3)
    lender.set_evict_hook(lambda b, h: None)  # a no-op without prefix caching
    assert lender.adopt_prefix(ids, [bytes(32)] * 3, 0) == 0
    assert not lender.lent(Device.DEVICE) and lender.device_pool.num_free_blocks == 8
