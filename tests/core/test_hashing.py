"""Prefix hash spec v1: published test vectors, an independent re-derivation of the byte
encoding from the spec text, cross-interpreter stability and tenant isolation."""

import hashlib
import os
import struct
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kvpool.config import CacheConfig
from kvpool.core import BlockHasher, BlockSpaceManager
from kvpool.errors import ConfigError

# Published vectors (kvpool/core/hashing.py, spec version 1). Changing the encoding must
# change these, and bump HASH_VERSION.
VECTORS = {
    "root(m,4,None)": "206e10dc028c4a2e27a7a3b320a770693d390cf4d0f556d6e238a5d58c52a874",
    "root(m,4,'tenant-a')": "7a2c99cb4d2b6862ee04601e076010a882c34aeaf78ee84f8f9d7dda15eedd52",
    "blocks(m,4,[1..9])": [
        "50b408aeceef04a2562e9f108549d79db9a6622cb470ed29050eb856dfeed780",
        "b8443ee4a816c7542979259a9e0d8b7d0bfcba6da8f8412f5234dcd00b212db2",
    ],
    "blocks(m,4,[1..4],'tenant-a',[7,'lora',b'\\x01'])": [
        "cb108ab4ea2c5fe34c7b8e06db0a76f85b9814b057e82ec240ec1b3753e5e080",
    ],
    "blake2b(llama,16,[0..15])": "44c52ed96a3a15d1d3c4f25254f813a6f2655d28cf5f578f49b8fb87b23d67cd",
}


def spec_sha256(model_id, block_size, salt, tokens, extra=()):
    """The spec's encoding written out again, straight from the docstring."""
    def s(x):
        raw = x.encode()
        return struct.pack("<I", len(raw)) + raw

    saltb = b"N" if salt is None else b"S" + s(salt)
    parent = hashlib.sha256(b"kvpool/prefix/v1\x00" + s(model_id) + struct.pack("<I", block_size)
                            + saltb).digest()
    ext = b""
    if extra:
        ext = b"X" + struct.pack("<I", len(extra))
        for k in extra:
            if isinstance(k, int):
                ext += b"i" + struct.pack("<q", k)
            elif isinstance(k, str):
                ext += b"s" + s(k)
            else:
                ext += b"b" + struct.pack("<I", len(k)) + k
    out = []
    for i in range(len(tokens) // block_size):
        blk = tokens[i * block_size:(i + 1) * block_size]
        parent = hashlib.sha256(parent + struct.pack(f"<{block_size}I", *blk) + ext).digest()
        out.append(parent)
    return out


def test_published_vectors():
    h = BlockHasher(4, "m")
    assert h.root().hex() == VECTORS["root(m,4,None)"]
    assert h.root("tenant-a").hex() == VECTORS["root(m,4,'tenant-a')"]
    assert [x.hex() for x in h.hash_blocks(list(range(1, 10)))] == VECTORS["blocks(m,4,[1..9])"]
    got = h.hash_blocks([1, 2, 3, 4], "tenant-a", [7, "lora", b"\x01"])
    assert [x.hex() for x in got] == VECTORS["blocks(m,4,[1..4],'tenant-a',[7,'lora',b'\\x01'])"]
    b2 = BlockHasher(16, "llama", "blake2b").hash_blocks(list(range(16)))
    assert b2[0].hex() == VECTORS["blake2b(llama,16,[0..15])"]


@settings(max_examples=60, deadline=None)
@given(
    tokens=st.lists(st.integers(0, 2**32 - 1), max_size=70),
    bs=st.sampled_from([1, 3, 16]),
    salt=st.none() | st.text(max_size=8),
    extra=st.lists(st.integers(-2**63, 2**63 - 1) | st.text(max_size=4) | st.binary(max_size=4),
                   max_size=3),
)
def test_matches_spec_encoding(tokens, bs, salt, extra):
    got = BlockHasher(bs, "model-x").hash_blocks(tokens, salt, extra)
    assert got == spec_sha256("model-x", bs, salt, tokens, tuple(extra))


def test_chain_continuation_and_single_block_api():
    h = BlockHasher(4, "m")
    toks = list(range(20))
    full = h.hash_blocks(toks)
    assert h.hash_blocks(toks[8:], parent=full[1]) == full[2:]
    assert h.hash_block(full[0], toks[4:8]) == full[1]
    with pytest.raises(ValueError, match="full blocks"):
        h.hash_block(full[0], toks[4:7])


def test_stable_across_interpreters_with_different_hash_seeds():
    code = ("from kvpool.core.hashing import BlockHasher;"
            "print(BlockHasher(16,'m').hash_blocks(list(range(64)),'salt',['k',3])[-1].hex())")
    outs = set()
    for seed in ("0", "12345", "random"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           env=env, check=True, cwd=os.path.dirname(os.path.dirname(
                               os.path.dirname(os.path.abspath(__file__)))))
        outs.add(r.stdout.strip())
    assert len(outs) == 1
    assert outs.pop() == BlockHasher(16, "m").hash_blocks(list(range(64)), "salt",
                                                          ["k", 3])[-1].hex()


def test_salts_models_and_block_sizes_share_nothing():
    toks = list(range(64))
    a = BlockHasher(16, "m").hash_blocks(toks, "tenant-a")
    b = BlockHasher(16, "m").hash_blocks(toks, "tenant-b")
    none = BlockHasher(16, "m").hash_blocks(toks)
    other_model = BlockHasher(16, "m2").hash_blocks(toks, "tenant-a")
    assert not set(a) & set(b)
    assert not set(a) & set(none)
    assert not set(a) & set(other_model)
    # the empty string is a salt, distinct from no salt
    assert not set(BlockHasher(16, "m").hash_blocks(toks, "")) & set(none)


def test_different_salts_share_no_block_in_the_manager():
    mgr = BlockSpaceManager(CacheConfig(num_device_blocks=64, block_size=4))
    prompt = list(range(33))
    mgr.allocate([1], prompt, cache_salt="a")
    mgr.mark_computed(1)
    assert mgr.allocate([2], prompt, cache_salt="b") == 0
    assert mgr.allocate([3], prompt, cache_salt="a") == 32
    assert not set(mgr.get_block_table(1)) & set(mgr.get_block_table(2))
    assert mgr.get_block_table(3)[:8] == mgr.get_block_table(1)[:8]
    mgr.check_invariants()


def test_bad_inputs():
    h = BlockHasher(4, "m")
    with pytest.raises(ValueError, match="2\\*\\*32"):
        h.hash_blocks([1, 2, -3, 4])
    with pytest.raises(TypeError):
        h.hash_blocks([1, 2, 3, 4], extra_keys=[1.5])
    with pytest.raises(ConfigError, match="sha256"):
        CacheConfig(num_device_blocks=8, hash_algo="md5")


def test_long_salts_are_not_remembered():
    """The router hashes a request's prompt before its replica can refuse a megabyte salt:
    the root memo kept up to 4096 of them, whole (150 requests with 3 MiB salts: +475 MiB).
    Only salts of at most 256 characters are remembered now; the hashes are the same."""
    import gc
    import tracemalloc

    hasher = BlockHasher(16, "m")
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for i in range(40):
            salt = f"{i}:" + "s" * (1 << 20)  # 1 Mi characters each
            assert hasher.root(salt) == BlockHasher(16, "m").root(salt)
            del salt
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept < 4 << 20, f"{kept} bytes still held after 40 distinct 1 MiB salts"
    assert hasher.root("short") == hasher.root("short")
