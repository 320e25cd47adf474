"""Every BlockStored carries its blocks' token ids, hit verification off (the default) as on,
as vLLM's does, so an indexer that keys blocks on their tokens finds them: llm-d's kv-cache
indexer computes its own key per block, a hash over (parent key, the block's tokens), and maps
the engine's hash to it to chain the next event; an empty ``token_ids`` indexes nothing
(docs/kv_events.md "What is published"). A real block manager and publisher, a real pyzmq SUB
on 127.0.0.1, and a decoder and a small llm-d-like index written here."""

from __future__ import annotations

import hashlib

import msgspec
import pytest
import zmq

from kvpool.config import CacheConfig
from kvpool.core.block import Device
from kvpool.core.hashing import BlockHasher
from kvpool.core.manager import BlockSpaceManager
from kvpool.events.recorder import KVEventRecorder
from tests.events.helpers import DEADLINE, publisher

BS = 4
MODEL = "kvpool-tiny"


def decode(payload: bytes) -> list[dict]:
    """vLLM's EventBatch by hand: [ts, [{"type": ..., field: value}, ...], rank]."""
    ts, events, _rank = msgspec.msgpack.decode(payload)
    assert isinstance(ts, float)
    return [e for e in events if isinstance(e, dict) and e.get("type") == "BlockStored"]


class TokenIndex:
    """llm-d's idea: request key = H(parent request key, block tokens); the engine's hash maps
    to it so a later event's parent_block_hash continues the chain; an event whose parent is
    unknown is skipped; too few tokens for a block index nothing."""

    ROOT = b"root"

    def __init__(self) -> None:
        self.by_engine: dict[bytes, bytes] = {}
        self.keys: set[bytes] = set()

    @staticmethod
    def key(parent: bytes, tokens: list[int]) -> bytes:
        return hashlib.sha256(parent + msgspec.msgpack.encode(tokens)).digest()

    def add(self, e: dict) -> None:
        parent = self.ROOT
        if e["parent_block_hash"] is not None:
            if e["parent_block_hash"] not in self.by_engine:
                return
            parent = self.by_engine[e["parent_block_hash"]]
        toks, bs = e["token_ids"], e["block_size"]
        for i, h in enumerate(e["block_hashes"]):
            chunk = toks[i * bs:(i + 1) * bs]
            if len(chunk) < bs:
                return
            parent = self.key(parent, chunk)
            self.keys.add(parent)
            self.by_engine[h] = parent

    def hits(self, prompt: list[int], bs: int) -> int:
        """Leading full blocks of ``prompt`` the index holds."""
        parent, n = self.ROOT, 0
        for i in range(len(prompt) // bs):
            parent = self.key(parent, prompt[i * bs:(i + 1) * bs])
            if parent not in self.keys:
                break
            n += 1
        return n


@pytest.fixture
def stack():
    pub = publisher(buffer_steps=64)
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"kv")
    sub.connect(pub.endpoint)
    cfg = CacheConfig(num_device_blocks=16, block_size=BS, num_host_blocks=8, watermark=0.0)
    assert not cfg.verify_hits  # the default under test
    mgr = BlockSpaceManager(cfg, observer=KVEventRecorder(pub, BS))
    yield pub, sub, mgr
    sub.close(linger=0)
    ctx.term()
    pub.close()


def stored_until(pub, sub, hashes: set[bytes]) -> list[dict]:
    """BlockStored events until every hash in ``hashes`` was stored (a PUB drops what comes
    before the subscription lands, so the test's events are sent only after the first poke)."""
    got: list[dict] = []
    seen: set[bytes] = set()
    while not hashes <= seen:
        assert sub.poll(int(DEADLINE * 1000)), f"missing {len(hashes - seen)} hashes"
        for e in decode(sub.recv_multipart()[2]):
            got.append(e)
            seen.update(e["block_hashes"])
    return got


def subscribed(pub, sub) -> None:
    from kvpool.events.wire import AllBlocksCleared
    for _ in range(int(DEADLINE / 0.2)):
        pub.submit(AllBlocksCleared())
        if sub.poll(200):
            while sub.poll(200):
                sub.recv_multipart()
            return
    raise AssertionError("the subscription never reached the publisher")


def check_chain(events: list[dict], prompt: list[int], hashes: list[bytes]) -> None:
    """Each event: block_size tokens a block, the prompt's own, its parent the hash before."""
    for e in events:
        at = hashes.index(e["block_hashes"][0])
        n = len(e["block_hashes"])
        assert e["block_hashes"] == hashes[at:at + n]
        assert e["parent_block_hash"] == (hashes[at - 1] if at else None)
        assert e["block_size"] == BS and e["medium"] == "GPU"
        assert e["token_ids"] == prompt[at * BS:(at + n) * BS]


def test_prefill_and_decode_blocks_carry_their_tokens(stack):
    pub, sub, mgr = stack
    subscribed(pub, sub)
    prompt = list(range(1000, 1010))  # 2 full blocks and 2 tokens
    assert mgr.allocate([1], prompt) == 0
    mgr.mark_computed(1, len(prompt))
    decoded = [7, 8, 9, 11, 12]  # fill block 2 on decode, then open block 3
    for tok in decoded:
        assert mgr.append_slots(1, [tok]) is not None
    mgr.mark_computed(1)
    seq = prompt + decoded
    hashes = BlockHasher(BS, MODEL).hash_blocks(seq)
    events = stored_until(pub, sub, set(hashes))
    check_chain(events, seq, hashes)
    index = TokenIndex()
    for e in events:
        index.add(e)
    assert index.hits(seq, BS) == 3  # every stored block found by a lookup of the prompt
    assert index.hits(prompt + [7, 0], BS) == 2  # and nothing it does not hold


def test_extension_and_remote_import_chain_on(stack):
    pub, sub, mgr = stack
    subscribed(pub, sub)
    base = list(range(50, 58))  # 2 blocks
    longer = base + list(range(60, 76))  # 6 blocks: 2 hits, 4 stored
    hashes = BlockHasher(BS, MODEL).hash_blocks(longer)
    assert mgr.allocate([1], base + [0]) == 0
    mgr.mark_computed(1)
    assert mgr.allocate([2], longer[:16] + [0]) == 8
    mgr.mark_computed(2)
    dev = mgr.lender.lend(Device.DEVICE, 2)  # blocks 4, 5 fetched from the remote tier
    assert mgr.lender.adopt_prefix(dev, hashes[4:6], 4, longer[16:24], hashes[3]) == 2
    events = stored_until(pub, sub, set(hashes))
    check_chain(events, longer, hashes)
    index = TokenIndex()
    for e in events:
        index.add(e)
    assert index.hits(longer, BS) == 6


def test_no_token_ids_are_kept_without_events() -> None:
    cfg = CacheConfig(num_device_blocks=16, block_size=BS, num_host_blocks=8, watermark=0.0)
    assert not BlockSpaceManager(cfg).device_pool.index.wants_tokens
