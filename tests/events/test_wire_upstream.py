"""kvpool's published KV events read by a decoder written here from vLLM 0.33's own definitions
(vllm/distributed/kv_events.py: ``EventBatch`` array_like, so ``[ts, events,
data_parallel_rank]``; ``KVCacheEvent`` tag=True and omit_defaults, so a map tagged under
"type", fields in declaration order, those with a default left out while they hold it; the
publisher sets the rank, and its PUB and replay framing), no kvpool decoder involved. A real
block manager and publisher, a real SUB and DEALER, all on 127.0.0.1 (docs/kv_events.md
"Wire format")."""

from __future__ import annotations

from typing import Any, Union

import msgspec
import pytest

from kvpool.config import CacheConfig
from kvpool.core.hashing import BlockHasher
from kvpool.core.manager import BlockSpaceManager
from kvpool.events.recorder import KVEventRecorder
from tests.events.helpers import Sub, publisher, wait_subscribed

BS = 4
MODEL = "kvpool-tiny"
END = b"\xff" * 8  # vLLM's END_SEQ: -1 as a signed 8-byte big-endian integer
# vLLM 0.33's fields, in declaration order: those without a default are always on the wire
STORED = ("block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium",
          "lora_name")
STORED_OPTIONAL = ("extra_keys", "group_idx", "kv_cache_spec_kind",
                   "kv_cache_spec_sliding_window", "locality", "ownership", "session_id",
                   "lookahead_token_ids")
REMOVED, REMOVED_OPTIONAL = ("block_hashes", "medium"), ("group_idx", "locality", "ownership")
FIELDS = {"BlockStored": (STORED, STORED_OPTIONAL), "BlockRemoved": (REMOVED, REMOVED_OPTIONAL),
          "AllBlocksCleared": ((), ())}
Hash = Union[bytes, int]  # vLLM's ExternalBlockHash


class BlockStored(msgspec.Struct, omit_defaults=True, gc=False, tag=True):
    """vLLM 0.33's BlockStored, field for field (its msgspec options too)."""

    block_hashes: list[Hash]
    parent_block_hash: Hash | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None
    extra_keys: list[tuple[Any, ...] | None] | None = None
    group_idx: int | None = None
    kv_cache_spec_kind: str | None = None
    kv_cache_spec_sliding_window: int | None = None
    locality: str | None = None
    ownership: str | None = None
    session_id: str | None = None
    lookahead_token_ids: list[list[int]] | None = None


class BlockRemoved(msgspec.Struct, omit_defaults=True, gc=False, tag=True):
    block_hashes: list[Hash]
    medium: str | None
    group_idx: int | None = None
    locality: str | None = None
    ownership: str | None = None


class AllBlocksCleared(msgspec.Struct, omit_defaults=True, gc=False, tag=True):
    pass


class KVEventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list[Union[BlockStored, BlockRemoved, AllBlocksCleared]]
    data_parallel_rank: int | None = None


VLLM_DECODER = msgspec.msgpack.Decoder(KVEventBatch)


def upstream_batch(payload: bytes) -> list[dict]:
    """The events of one batch, checked against vLLM's layout byte by byte where it is fixed."""
    assert payload[0] == 0x93, payload[:1]  # fixarray of 3: the rank is always set
    assert payload[1] == 0xCB  # ts: a float64
    ts, events, rank = msgspec.msgpack.decode(payload)
    assert isinstance(ts, float) and ts > 1e9 and rank == 0 and isinstance(events, list)
    for e in events:
        upstream_event(e)
    return events


def upstream_event(e: dict) -> None:
    """One event: tag first, then vLLM's required fields in order, then optional ones."""
    assert isinstance(e, dict) and list(e)[0] == "type", e
    required, optional = FIELDS[e["type"]]
    keys = list(e)[1:]
    assert keys[:len(required)] == list(required), keys
    extra = keys[len(required):]
    assert extra == [k for k in optional if k in extra], keys  # declared ones, in order
    if "block_hashes" in e:  # ExternalBlockHash = bytes | int; kvpool's are 32-byte digests
        assert e["block_hashes"] and all(type(h) is bytes and len(h) == 32
                                         for h in e["block_hashes"])
        assert e["medium"] in ("GPU", "CPU")
        assert e["group_idx"] == 0  # vLLM's kv_cache_group_id (wire.py NOTE(group-idx))
    if e["type"] == "BlockStored":
        assert e["parent_block_hash"] is None or len(e["parent_block_hash"]) == 32
        assert type(e["block_size"]) is int and e["block_size"] == BS
        assert all(type(t) is int for t in e["token_ids"])
        assert e["lora_id"] is None and e["lora_name"] is None


def frames_ok(msg: list[bytes], topic: bytes = b"kv") -> int:
    """A live message's frames: [topic, 8-byte unsigned big-endian seq, payload]; its seq."""
    assert len(msg) == 3 and msg[0] == topic and len(msg[1]) == 8 and msg[1][0] < 0x80, msg
    return int.from_bytes(msg[1], "big")


@pytest.fixture(params=[False, True], ids=["tokens-off", "verify-hits"])
def stack(request):
    pub = publisher(buffer_steps=64)
    sub = Sub(pub)
    wait_subscribed(pub, sub)
    cfg = CacheConfig(num_device_blocks=8, block_size=BS, num_host_blocks=8, watermark=0.0,
                      verify_hits=request.param)
    yield pub, sub, BlockSpaceManager(cfg, observer=KVEventRecorder(pub, BS)), request.param
    sub.close()
    pub.close()


def prefill(mgr, seq, ids):
    assert mgr.allocate([seq], ids) is not None
    mgr.mark_computed(seq, len(ids))


def collect(sub, kind, n_hashes):
    """Live messages until ``n_hashes`` hashes of ``kind`` came; (seqs, events)."""
    got = sub.until(lambda ev: sum(len(e["block_hashes"]) for e in ev if e["type"] == kind)
                    >= n_hashes)
    seqs = [frames_ok(m) for m in got]
    return seqs, [e for m in got for e in upstream_batch(m[2]) if e["type"] == kind]


def test_every_field_of_the_live_stream_is_vllms(stack):
    pub, sub, mgr, _ = stack
    first, more = list(range(10, 22)), list(range(50, 58))
    prefill(mgr, 1, first)
    prefill(mgr, 2, first + more)  # extends the first prompt: its chain goes on
    hashes = BlockHasher(BS, MODEL).hash_blocks(first + more)
    seqs, stored = collect(sub, "BlockStored", 5)
    assert [h for e in stored for h in e["block_hashes"]] == hashes
    for e in stored:  # each chain's parent is the hash before its first block
        at = hashes.index(e["block_hashes"][0])
        assert e["parent_block_hash"] == (hashes[at - 1] if at else None)
        assert e["medium"] == "GPU"
        n = len(e["block_hashes"])
        want = (first + more)[at * BS:(at + n) * BS]  # verification on or off alike
        assert e["token_ids"] == want  # vLLM: block_size tokens a block
    mgr.free(1)
    mgr.free(2)
    prefill(mgr, 3, list(range(100, 132)))  # 8 blocks: every cached one is evicted
    more_seqs, removed = collect(sub, "BlockRemoved", 5)
    assert set(hashes) <= {h for e in removed for h in e["block_hashes"]}
    every = seqs + more_seqs
    assert every == list(range(every[0], every[0] + len(every)))  # one step each, no gap


def test_the_replay_is_vllms_and_resends_the_live_bytes(stack):
    pub, sub, mgr, _ = stack
    prefill(mgr, 1, list(range(10, 22)))
    live = {frames_ok(m): m[2] for m in sub.until(
        lambda ev: any(e["type"] == "BlockStored" for e in ev))}
    out = sub.replay([b"", (0).to_bytes(8, "big")])
    assert out[-1] == [b"", b"", END, b""]  # the end marker: empty topic, -1, empty payload
    seqs = []
    for m in out[:-1]:  # [delimiter, topic, seq, payload], as the PUB socket sends them
        assert len(m) == 4 and m[0] == b""
        seqs.append(frames_ok(m[1:]))
        upstream_batch(m[3])
        assert live.get(seqs[-1], m[3]) == m[3]
    assert seqs == list(range(len(seqs))) and set(live) <= set(seqs)
    start = msgspec.msgpack.decode(out[0][3])[1]  # a start says so (pokes may join it)
    assert start and all(e == {"type": "AllBlocksCleared"} for e in start)


def test_vllms_classes_read_group_idx_0_on_every_store_and_removal(stack):
    pub, sub, mgr, _ = stack
    prefill(mgr, 1, list(range(10, 19)))  # 2 full blocks and a partial one
    assert mgr.swap.swap_out([1]) is not None
    mgr.swap.confirm_out([1])  # the host copy: CPU BlockStored
    assert mgr.swap.swap_in([1]) is not None  # CPU BlockRemoved
    mgr.free(1)
    prefill(mgr, 2, list(range(100, 132)))  # 8 blocks: every cached one is evicted (GPU)
    want = {("BlockStored", "GPU"), ("BlockStored", "CPU"), ("BlockRemoved", "GPU"),
            ("BlockRemoved", "CPU")}
    got = sub.until(lambda ev: want <= {(e["type"], e.get("medium")) for e in ev})
    events = [e for m in got for e in VLLM_DECODER.decode(m[2]).events
              if not isinstance(e, AllBlocksCleared)]
    assert want <= {(type(e).__name__, e.medium) for e in events}
    assert {e.group_idx for e in events} == {0}  # before NOTE(group-idx): None
