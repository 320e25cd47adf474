"""The KV event messages and their framing, as vLLM publishes them (docs/kv_events.md).

One message on the PUB socket is three ZMQ frames::

    topic      utf-8 bytes (the config's ``topic``, "" by default; SUB filters by prefix)
    seq        8-byte big-endian unsigned sequence number, 0, 1, 2, ... per publisher start
    payload    msgpack of KVEventBatch

KVEventBatch is a msgpack *array* ``[ts, events, data_parallel_rank]`` (array-like struct;
``data_parallel_rank`` omitted when None). Each event is a msgpack *map* tagged by its class
name under ``"type"``; fields with a default are left out when they hold it::

    {"type": "BlockStored", "block_hashes": [...], "parent_block_hash": h | None,
     "token_ids": [...], "block_size": n, "lora_id": None, "medium": "GPU", "lora_name": None,
     "extra_keys": [[salt], None, ...], "group_idx": 0}   (extra_keys: a salted chain's start)
    {"type": "BlockRemoved", "block_hashes": [...], "medium": "GPU", "group_idx": 0}
    {"type": "AllBlocksCleared"}

Block hashes are kvpool's own prefix hashes (kvpool.core.hashing, 32-byte digests), sent as
msgpack bin. vLLM 0.33 sends ints by default (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1: the
digest's last 8 bytes, big-endian) and bytes with it set to 0; its decoder, and this one,
accept either (docs/kv_events.md "What is published").

Replay (ROUTER socket): a subscriber sends ``[b"", seq]`` from a DEALER (not a REQ: it takes
only the first answer of the many) with ``seq`` 8-byte big-endian; the publisher answers
``[b"", topic, seq_i, payload_i]`` for every buffered batch with ``seq_i >= seq``, oldest first,
then the end marker ``[b"", b"", END_SEQ, b""]`` (END_SEQ is -1 as a signed 8-byte integer).
"""

from __future__ import annotations

from typing import Annotated, Union

import msgspec

__all__ = ["END_SEQ", "KV_GROUP", "MEDIUM_CPU", "MEDIUM_GPU", "AllBlocksCleared", "BlockRemoved",
           "BlockStored", "KVEventBatch", "decode_batch", "decode_seq", "encode_seq",
           "new_encoder"]

# NOTE(medium): vLLM names the engine's own KV pool "GPU" and the host-memory tier "CPU", and
# routers key on those names; kvpool's device pool is "GPU" whatever torch device holds it (a
# CPU-only replica too), its host (swap) pool is "CPU".
MEDIUM_GPU = "GPU"
MEDIUM_CPU = "CPU"
END_SEQ = (-1).to_bytes(8, "big", signed=True)
# NOTE(group-idx): vLLM 0.33 sets group_idx to the block's KV cache group on every BlockStored
# and BlockRemoved (its kv_cache_group_id: 0 for a model with one attention type), so it is on
# the wire; omitted, vLLM's decoder read None. kvpool's pool is one group: 0 on each, sent
# (omit_defaults leaves out only the default, None).
KV_GROUP = 0

# NOTE(hash-size): a digest is 32 bytes (kvpool's, vLLM's); a longer "hash" can match no chain,
# and a router that kept it would grow by its size: decoding refuses more than MAX_HASH_BYTES
MAX_HASH_BYTES = 64
BlockHash = Union[Annotated[bytes, msgspec.Meta(max_length=MAX_HASH_BYTES)], int]


class BlockStored(msgspec.Struct, tag="BlockStored", tag_field="type", omit_defaults=True,
                  gc=False):
    """Blocks that became findable by hash, a chain in order (``parent_block_hash`` is the
    hash before the first one, None at a prompt's start)."""

    block_hashes: list[BlockHash]
    parent_block_hash: BlockHash | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None
    # one entry per block: vLLM's untagged extra keys (kvpool sends only block 0's
    # published salt, as [salt]: recorder.py NOTE(event-salt)), None for a block without;
    # None (omitted) when no block has any. Read as any list: vLLM's entries also hold LoRA
    # names and multimodal [hash, offset] pairs, and a batch typed narrower was dropped whole
    # by the router
    extra_keys: list | None = None
    group_idx: int | None = None  # KV_GROUP from the recorder (NOTE(group-idx))


class BlockRemoved(msgspec.Struct, tag="BlockRemoved", tag_field="type", omit_defaults=True,
                   gc=False):
    """Blocks no longer findable by hash (evicted, or dropped by a cache reset)."""

    block_hashes: list[BlockHash]
    medium: str | None
    group_idx: int | None = None  # KV_GROUP from the recorder (NOTE(group-idx))


class AllBlocksCleared(msgspec.Struct, tag="AllBlocksCleared", tag_field="type",
                       omit_defaults=True, gc=False):
    """Nothing is cached any more (a fresh start or a whole-cache reset): drop what you know."""


Event = Union[BlockStored, BlockRemoved, AllBlocksCleared]


class KVEventBatch(msgspec.Struct, array_like=True, omit_defaults=True, gc=False):
    ts: float
    events: list[Event]
    data_parallel_rank: int | None = None


def new_encoder() -> msgspec.msgpack.Encoder:
    """An encoder for KVEventBatch (one per thread: encoders keep a buffer)."""
    return msgspec.msgpack.Encoder()


_DECODER = msgspec.msgpack.Decoder(KVEventBatch)


def decode_batch(payload: bytes) -> KVEventBatch:
    """The batch in ``payload``; raises msgspec.DecodeError / ValidationError on bad input,
    whatever it is: a value nested past the decoder's recursion limit too (``extra_keys`` is
    any list: a 5 KB batch of nested lists raised RecursionError, which ended the router's
    reader of that replica for good)."""
    try:
        return _DECODER.decode(payload)
    except RecursionError:
        raise msgspec.DecodeError("a value is nested too deeply") from None


def encode_seq(seq: int) -> bytes:
    return seq.to_bytes(8, "big")


def decode_seq(frame: bytes) -> int:
    """The sequence number of an 8-byte frame; ValueError for any other length."""
    if len(frame) != 8:
        raise ValueError(f"a sequence frame is 8 bytes, got {len(frame)}")
    return int.from_bytes(frame, "big", signed=True)
