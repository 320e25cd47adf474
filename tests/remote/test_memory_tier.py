"""InMemoryTier (the unit-test stand-in) keeps the RemoteTier contract; a hypothesis state
machine checks probe/put/get against a plain dict model and the byte bound."""

from __future__ import annotations

import asyncio

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from kvpool.remote import RemoteTier, ValueCodec
from kvpool.remote.memory_tier import InMemoryTier
from tests.remote.conftest import NS

HASHES = [bytes([i]) * 32 for i in range(6)]
KEYS = [NS.key(h) for h in HASHES]


def run(coro):
    return asyncio.run(coro)


class MemoryTierMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.codec = ValueCodec(NS)
        self.value_len = len(self.codec.encode(HASHES[0], [b"v" * 16]))
        self.tier = InMemoryTier(self.codec, max_bytes=4 * self.value_len)
        self.model: dict[str, bytes] = {}

    @rule(i=st.integers(0, 5), fill=st.integers(0, 255))
    def put(self, i, fill):
        v = self.codec.encode(HASHES[i], [bytes([fill]) * 16])
        stored = run(self.tier.put_many([(KEYS[i], v)]))
        if KEYS[i] in self.model:
            assert stored == 0  # SET NX
        else:
            assert stored == 1
            self.model[KEYS[i]] = v

    @rule(i=st.integers(0, 5))
    def plant_corrupt(self, i):
        v = bytearray(self.codec.encode(HASHES[i], [b"c" * 16]))
        v[-1] ^= 1
        self.tier.set_raw(KEYS[i], bytes(v))
        self.model.pop(KEYS[i], None)
        assert run(self.tier.get_many([KEYS[i]])) == [None]
        assert KEYS[i] not in self.tier

    @rule(start=st.integers(0, 5))
    def probe(self, start):
        n = run(self.tier.probe(KEYS[start:]))
        want = 0
        for k in KEYS[start:]:
            if k not in self.tier:
                break
            want += 1
        assert n == want

    @rule()
    def get(self):
        got = run(self.tier.get_many(KEYS))
        for k, v in zip(KEYS, got):
            if v is not None:
                assert self.model[k] == v  # never a value that was not stored under k
            else:
                self.model.pop(k, None)  # evicted (LRU) or never stored

    @invariant()
    def bounded(self):
        self.tier.check_invariants()
        for k in KEYS:
            if k not in self.tier:
                self.model.pop(k, None)


MemoryTierMachine.TestCase.settings = settings(max_examples=60, stateful_step_count=30,
                                               deadline=None)
TestMemoryTier = MemoryTierMachine.TestCase


async def test_it_is_a_remote_tier_and_lru_keeps_probed_keys():
    codec = ValueCodec(NS)
    vlen = len(codec.encode(HASHES[0], [b"v" * 16]))
    tier = InMemoryTier(codec, max_bytes=3 * vlen)
    assert isinstance(tier, RemoteTier)
    await tier.put_many([(KEYS[i], codec.encode(HASHES[i], [b"v" * 16])) for i in range(3)])
    assert await tier.probe(KEYS[:1]) == 1  # refresh key 0
    await tier.put_many([(KEYS[3], codec.encode(HASHES[3], [b"v" * 16]))])
    assert KEYS[0] in tier and KEYS[1] not in tier  # key 1 was the oldest
    st = tier.stats()
    assert st.puts == 4 and st.hit_blocks == 1
