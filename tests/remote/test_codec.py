"""The value codec: round trips (property), and every kind of bad value rejected by kind."""

from __future__ import annotations

import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvpool.remote.codec import (HEADER_SIZE, CorruptValueError, ForeignValueError,
                                 ShortValueError, ValueCodec)
from kvpool.remote.keys import Namespace
from tests.remote.conftest import NS


def ns_with(**kw):
    base = dict(model_id="tiny", weights="seed0", dtype="float32", block_size=16, layers=2,
                kv_heads=2, head_dim=16)
    return Namespace(**{**base, **kw})


@settings(max_examples=60, deadline=None)
@given(group=st.integers(1, 5), size=st.integers(1, 300), data=st.data())
def test_round_trip(group, size, data):
    codec = ValueCodec(ns_with(blocks_per_object=group), block_nbytes=size)
    blocks = [data.draw(st.binary(min_size=size, max_size=size)) for _ in range(group)]
    h = data.draw(st.binary(min_size=32, max_size=32))
    value = codec.encode(h, blocks)
    assert len(value) == HEADER_SIZE + group * size
    dec = codec.decode(value, h)
    assert [bytes(b) for b in dec.blocks] == blocks and dec.tokens == group * 16
    # split: the same views without the second CRC pass (for values get_many checked)
    assert [bytes(b) for b in codec.split(value)] == blocks
    with pytest.raises(ShortValueError):
        codec.split(value[:HEADER_SIZE - 1])
    with pytest.raises(CorruptValueError):
        codec.split(value[:-1])


@settings(max_examples=60, deadline=None)
@given(pos=st.integers(HEADER_SIZE, HEADER_SIZE + 127), bit=st.integers(0, 7))
def test_any_payload_bit_flip_is_corrupt(pos, bit):
    codec = ValueCodec(NS)
    h = b"\x11" * 32
    value = bytearray(codec.encode(h, [bytes(range(128))]))
    value[pos] ^= 1 << bit
    with pytest.raises(CorruptValueError):
        codec.decode(bytes(value), h)


@settings(max_examples=40, deadline=None)
@given(cut=st.integers(0, HEADER_SIZE + 63))
def test_truncated_is_short(cut):
    codec = ValueCodec(NS)
    value = codec.encode(b"\x11" * 32, [b"x" * 64])
    with pytest.raises(ShortValueError):
        codec.decode(value[:cut], b"\x11" * 32)


def test_foreign_values():
    h = b"\x22" * 32
    codec = ValueCodec(NS, block_nbytes=64)
    good = codec.encode(h, [b"y" * 64])
    others = [ValueCodec(ns_with(model_id="m")).encode(h, [b"y" * 64]),
              ValueCodec(ns_with(dtype="float16")).encode(h, [b"y" * 64]),
              ValueCodec(ns_with(blocks_per_object=2)).encode(h, [b"y" * 32, b"y" * 32]),
              ValueCodec(NS).encode(h, [b"y" * 32]),  # other block geometry
              b"XXXX" + good[4:],
              good[:4] + b"\x02" + good[5:]]
    for v in others:
        with pytest.raises(ForeignValueError):
            codec.decode(v, h)
    with pytest.raises(ForeignValueError):  # a value under another block's key
        codec.decode(good, b"\x23" * 32)


def test_trailing_bytes_and_bad_lengths_are_corrupt():
    codec = ValueCodec(NS)
    h = b"\x33" * 32
    value = codec.encode(h, [b"z" * 64])
    with pytest.raises(CorruptValueError):
        codec.decode(value + b"\0", h)
    # a header that declares 0 payload bytes
    zero = value[:24] + struct.pack("<Q", 0) + value[32:HEADER_SIZE]
    with pytest.raises(CorruptValueError):
        codec.decode(zero, h)


def test_encode_rejects_wrong_shapes():
    codec = ValueCodec(ns_with(blocks_per_object=2))
    with pytest.raises(ValueError):
        codec.encode(b"h" * 32, [b"a" * 8])
    with pytest.raises(ValueError):
        codec.encode(b"h" * 32, [b"a" * 8, b"a" * 9])
    with pytest.raises(ValueError):
        codec.encode(b"", [b"a" * 8, b"a" * 8])
