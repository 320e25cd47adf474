"""The key spec: pinned vectors, and the same keys from interpreters with different hash seeds."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from kvpool.core.hashing import BlockHasher
from kvpool.errors import ConfigError
from kvpool.remote.keys import Namespace, hash_of_key, segment_of
from tests.remote.conftest import NS

VECTOR_NS = "29a6de07f8a04e4a"  # keys.py's docstring; changing the encoding breaks this

_CHILD = r"""
import json, sys
from kvpool.core.hashing import BlockHasher
from kvpool.remote.keys import Namespace
ns = Namespace(model_id="tiny", weights="seed0", dtype="float32", block_size=16, layers=2,
               kv_heads=2, head_dim=16, blocks_per_object=2)
hashes = BlockHasher(16, "tiny").hash_blocks(list(range(100, 164)), cache_salt="tenant-a")
print(json.dumps({"ns": ns.ns, "keys": ns.group_keys(hashes), "set": sorted({"a", "b", "c"})}))
"""


def test_vector():
    assert NS.ns == VECTOR_NS
    assert NS.canonical_json() == (
        '{"block_size":16,"blocks_per_object":1,"dtype":"float32","hash_spec":1,"head_dim":16,'
        '"kv_heads":2,"layers":2,"layout":1,"model_id":"tiny","tp_rank":0,"tp_size":1,'
        '"weights":"seed0"}')
    h, root = bytes(range(32)), bytes(range(32, 64))
    assert NS.key(h, root, 100) == f"kvp:2:{VECTOR_NS}:{{2021222324252627:1}}:" + h.hex()
    assert NS.name(h) == f"kvp:2:{VECTOR_NS}:" + h.hex()
    assert NS.key(h) == NS.key(h, h, 0) == f"kvp:2:{VECTOR_NS}:{{0001020304050607:0}}:" + h.hex()
    assert hash_of_key(NS.key(b"\x07" * 32)) == b"\x07" * 32


def test_keyed_vector():
    """keys.py NOTE(keyed-names): with a secret the hash part, the tag and the MAC's name are
    an HMAC of the chain hash (openssl agrees with the vector); ns and unkeyed keys stay."""
    keyed = NS.keyed(b"0123456789abcdef")
    h, root = bytes(range(32)), bytes(range(32, 64))
    part = "82c8923e43f28fcf3375ee16e39d90cd0ff5080f7b350d8828bd6d49bda50a2a"
    assert keyed.ns == VECTOR_NS and keyed.canonical_json() == NS.canonical_json()
    assert keyed.key(h, root, 100) == f"kvp:2:{VECTOR_NS}:{{a44514dc21f2ea27:1}}:{part}"
    assert keyed.part(h).hex() == part and keyed.name(keyed.part(h)) == f"kvp:2:{VECTOR_NS}:{part}"
    assert hash_of_key(keyed.key(h, root, 100)).hex() == part
    assert "0123456789abcdef" not in repr(keyed) and NS.part(h) == h
    hashes = BlockHasher(16, "tiny").hash_blocks(list(range(16 * 70)))
    keys = keyed.group_keys(hashes)
    assert keys == [keyed.key(x, hashes[0], i) for i, x in enumerate(hashes)]
    assert not any(x.hex()[:16] in k for x in hashes for k in keys)
    assert not set(keys) & set(NS.group_keys(hashes))
    assert not set(keys) & set(NS.keyed(b"another secret, 16 bytes").group_keys(hashes))


def test_same_keys_across_processes_with_different_hash_seeds():
    outs = []
    for seed in ("0", "1", "12345", "random"):
        env = {**os.environ, "PYTHONHASHSEED": seed, "PYTHONPATH": os.getcwd()}
        r = subprocess.run([sys.executable, "-c", _CHILD], env=env, capture_output=True,
                           text=True, timeout=60, check=True)
        outs.append(json.loads(r.stdout))
    assert all(o == outs[0] for o in outs)
    hashes = BlockHasher(16, "tiny").hash_blocks(list(range(100, 164)), cache_salt="tenant-a")
    here = Namespace(model_id="tiny", weights="seed0", dtype="float32", block_size=16,
                     layers=2, kv_heads=2, head_dim=16, blocks_per_object=2)
    assert outs[0]["keys"] == here.group_keys(hashes) and len(outs[0]["keys"]) == 2


def test_every_field_changes_the_namespace():
    variants = [dict(model_id="x"), dict(weights="seed1"), dict(dtype="bfloat16"),
                dict(block_size=32), dict(layers=3), dict(kv_heads=4), dict(head_dim=32),
                dict(layout=2), dict(tp_size=2), dict(tp_size=2, tp_rank=1),
                dict(blocks_per_object=2), dict(hash_spec=2)]
    seen = {NS.ns}
    base = dict(model_id="tiny", weights="seed0", dtype="float32", block_size=16, layers=2,
                kv_heads=2, head_dim=16)
    for v in variants:
        seen.add(Namespace(**{**base, **v}).ns)
    assert len(seen) == len(variants) + 1


def test_salt_stays_inside_the_hash():
    h = BlockHasher(16, "tiny")
    toks = list(range(32))
    a = NS.group_keys(h.hash_blocks(toks, cache_salt="tenant-a"))
    b = NS.group_keys(h.hash_blocks(toks, cache_salt="tenant-b"))
    assert not set(a) & set(b)
    assert all("tenant" not in k for k in a + b)


def test_group_keys_use_the_last_block_of_each_full_group():
    ns = Namespace(model_id="tiny", weights="seed0", dtype="float32", block_size=16, layers=2,
                   kv_heads=2, head_dim=16, blocks_per_object=3)
    hashes = [bytes([i]) * 32 for i in range(8)]
    assert ns.group_keys(hashes) == [ns.key(hashes[2], hashes[0], 2),
                                     ns.key(hashes[5], hashes[0], 5)]


def test_a_segment_of_64_blocks_shares_one_hash_tag():
    hashes = BlockHasher(16, "tiny").hash_blocks(list(range(16 * 140)))
    keys = NS.group_keys(hashes)
    tags = [segment_of(k) for k in keys]
    assert tags[:64] == [tags[0]] * 64 and tags[64:128] == [tags[64]] * 64
    assert len(set(tags)) == 3 and tags[0] == "{" + hashes[0][:8].hex() + ":0}"
    assert [hash_of_key(k) for k in keys] == hashes


@pytest.mark.parametrize("bad", [dict(dtype="float64"), dict(block_size=0), dict(tp_rank=1),
                                 dict(layers=True), dict(blocks_per_object=70000)])
def test_bad_namespace_is_a_config_error(bad):
    base = dict(model_id="tiny", weights="seed0", dtype="float32", block_size=16, layers=2,
                kv_heads=2, head_dim=16)
    with pytest.raises(ConfigError):
        Namespace(**{**base, **bad})


@pytest.mark.parametrize("key", ["kvp:1:0011223344556677:00", "kvp:2:short:{a:0}:00", "foo",
                                 "kvp:2:0011223344556677:{a:0}:zz",
                                 "kvp:2:0011223344556677:00"])
def test_foreign_key_is_rejected(key):
    with pytest.raises(ValueError):
        hash_of_key(key)
