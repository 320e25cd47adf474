"""Redis key spec for the shared prefix tier (key spec version 2), stable across processes.

A key names one value: ``blocks_per_object`` consecutive full blocks of a prefix chain::

    key(chain_hash, root, index) = "kvp:2:" || ns || ":{" || tag || "}:" || hex(part(chain_hash))
    tag             = hex(part(root))[:16] || ":" || decimal(index // SEGMENT_BLOCKS)
    name(part)      = "kvp:2:" || ns || ":" || hex(part)   (the MAC's key, codec.py)
    part(h)         = h                                    (no secret; keyed: see below)
    ns              = hex(SHA-256(canonical_json(namespace fields)))[:16]
    canonical_json  = json.dumps(fields, sort_keys=True, separators=(",", ":"),
                                 ensure_ascii=True)

    fields = {"hash_spec": 1, "model_id": str, "weights": str (fingerprint), "dtype": str,
              "block_size": int, "layers": int, "kv_heads": int, "head_dim": int,
              "layout": int, "tp_size": int, "tp_rank": int, "blocks_per_object": int}

``ns`` fingerprints everything that makes two replicas' bytes incompatible: the prefix hash
spec version (``kvpool.core.hashing.HASH_VERSION``), the model and its weights, the KV dtype and
geometry, the tensor layout version, the tensor-parallel shard, and the grouping (a value of 4
blocks must never be read by a replica that expects 2). ``chain_hash`` is the full chain hash of
the *last* block in the value (``BlockHasher.hash_blocks``), so it commits to every token before
it and to the root, which mixes in ``cache_salt``: tenants get disjoint keys and the salt itself
never reaches Redis.

The ``{tag}`` is a Redis Cluster hash tag: only it decides the key's slot. ``root`` is the chain
hash of the prefix's first block (block 0) and ``index`` the 0-based position of the value's
last block, so the values of one segment of ``SEGMENT_BLOCKS`` (64) blocks of one prefix share a
slot: a probe script or an MGET over one segment never gets CROSSSLOT, and a long prefix spreads
over the cluster segment by segment. A single server uses the same keys (one spec).

Grouping, ``blocks_per_object = 3`` (``h_i`` = chain hash of block i; a tail group shorter
than 3 blocks is not stored)::

    blocks   b0 b1 b2     | b3 b4 b5     | b6 b7
    keys     key(h2,h0,2) | key(h5,h0,5) | (none)

Test vectors (``tests/remote/test_keys.py`` checks them in subprocesses run under different
``PYTHONHASHSEED`` values): ``Namespace(model_id="tiny", weights="seed0", dtype="float32",
block_size=16, layers=2, kv_heads=2, head_dim=16)`` has ``ns == "29a6de07f8a04e4a"``; with
``h = bytes(range(32))`` and ``root = bytes(range(32, 64))`` its key at block index 100 is
``"kvp:2:29a6de07f8a04e4a:{2021222324252627:1}:000102...1f"`` (the hash in full hex, 64
digits), and ``name(h)`` is ``"kvp:2:29a6de07f8a04e4a:000102...1f"``. ``key(h)`` alone is the
key of a one-block chain (``root = h``, index 0).

NOTE(keyed-names): with a shared secret (``--remote-secret-file``, ``Namespace.keyed``) the
names are keyed too. The plain chain hash let anyone who reads Redis (SCAN, or a value's
header) test a guessed prompt: ``BlockHasher(...).hash_blocks(prompt)[-1]`` is its key's hash.
A keyed name needs the secret to compute::

    part(h)  = HMAC-SHA-256(name_key, h)[:len(h)]
    name_key = SHA-256("kvpool remote key name v1" || secret)

``part`` replaces the hash in the key, in the hash tag (``part(root)``), in ``name`` (the MAC's
key) and in a value's header (codec.py), so nothing in Redis carries a chain hash. The values
stay unencrypted KV: a reader of Redis who holds the weights can still read what a value says
(give Redis ACLs and TLS). ``ns`` does not change with the secret. Replicas with different
secrets (or one without) share no key, so each one's lookups miss the others' values rather
than reading and deleting them. So that they can tell, one key is never keyed, the marker
``"kvp:2:" || ns || ":secret"``; its value says how names are keyed, ``b"plain"`` or
``b"keyed:" || hex(HMAC-SHA-256(name_key, b"kvpool secret check")[:8])`` (the secret below
gives ``b"keyed:e9b492aab0ac91b9"``), and a replica finding another's there says it once
(NOTE(secret-marker) in secret_marker.py). Test vector: the namespace above keyed with the
secret ``b"0123456789abcdef"`` keeps ``ns``; ``h``, ``root`` and index 100 above key as
``"kvp:2:29a6de07f8a04e4a:{a44514dc21f2ea27:1}:82c8923e...bda50a2a"`` (``part(h)`` is
``82c8923e43f28fcf3375ee16e39d90cd0ff5080f7b350d8828bd6d49bda50a2a``; openssl agrees). Signed
values written before keyed names sit under plain keys no replica reads: they age out of the
LRU.

Version 1 keys (``kvp:1:ns:hash``, no tag) are never read by this version: they age out of the
LRU.

Nothing here uses Python's ``hash()`` or any process state.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace

from kvpool.core.hashing import HASH_VERSION
from kvpool.errors import ConfigError

KEY_SPEC_VERSION = 2
# blocks of one prefix whose keys share a cluster slot: NOTE(segment-size) in segments.py
SEGMENT_BLOCKS = 64
LAYOUT_VERSION = 1  # kvpool.runtime's per-block byte layout; bump when it changes
KEY_PREFIX = f"kvp:{KEY_SPEC_VERSION}:"
_NAME_KEY_LABEL = b"kvpool remote key name v1"  # NOTE(keyed-names)
DTYPES = ("float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2", "int8")


@dataclass(frozen=True, slots=True)
class Namespace:
    """Everything that decides whether two replicas may share a value. Owned by the caller."""

    model_id: str  # model name/path as the replicas report it
    weights: str  # fingerprint of the weights (kvpool/runtime/model/fingerprint.py)
    dtype: str  # KV-cache dtype name, one of DTYPES
    block_size: int  # tokens per block
    layers: int  # transformer layers holding KV
    kv_heads: int  # KV heads held by this rank
    head_dim: int
    layout: int = LAYOUT_VERSION  # byte layout of one block's KV
    tp_size: int = 1
    tp_rank: int = 0
    blocks_per_object: int = 1  # blocks grouped into one value
    hash_spec: int = HASH_VERSION  # prefix hash spec version of the chain hashes
    # the HMAC key of keyed names (NOTE(keyed-names)); None: keys name the chain hashes.
    # Not one of ns's fields: set it with keyed()
    name_key: bytes | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise ConfigError(f"Namespace.dtype={self.dtype!r}: use one of {', '.join(DTYPES)}")
        for name in ("block_size", "layers", "kv_heads", "head_dim", "tp_size",
                     "blocks_per_object"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ConfigError(f"Namespace.{name}={v!r}: must be an integer >= 1")
        if not 0 <= self.tp_rank < self.tp_size:
            raise ConfigError(f"Namespace.tp_rank={self.tp_rank}: must be in [0, tp_size)")
        if self.blocks_per_object > 0xFFFF:
            raise ConfigError("Namespace.blocks_per_object must be <= 65535")

    def keyed(self, secret: bytes) -> Namespace:
        """This namespace with names keyed by ``secret`` (NOTE(keyed-names))."""
        return replace(self, name_key=hashlib.sha256(_NAME_KEY_LABEL + bytes(secret)).digest())

    def canonical_json(self) -> str:
        fields = asdict(self)
        del fields["name_key"]  # keyed names change every key, not ns (NOTE(keyed-names))
        return json.dumps(fields, sort_keys=True, separators=(",", ":"), ensure_ascii=True)

    def digest(self) -> bytes:
        """The 8 bytes whose hex is ``ns`` (also written into every value header)."""
        return hashlib.sha256(self.canonical_json().encode("ascii")).digest()[:8]

    @property
    def ns(self) -> str:
        return self.digest().hex()

    def part(self, chain_hash: bytes) -> bytes:
        """What a key names of ``chain_hash``: the hash itself, or its keyed hash when a
        secret is set (NOTE(keyed-names)); ``hash_of_key`` reads it back from a key."""
        if self.name_key is None:
            return bytes(chain_hash)
        return hmac.digest(self.name_key, bytes(chain_hash), "sha256")[:len(chain_hash)]

    def key(self, chain_hash: bytes, root: bytes | None = None, index: int = 0) -> str:
        """The key of the value ending at block ``index`` of the chain whose first block's
        hash is ``root`` (default: ``chain_hash`` itself, a one-block chain)."""
        if not isinstance(chain_hash, (bytes, bytearray)) or not chain_hash:
            raise TypeError("chain_hash must be non-empty bytes")
        root = chain_hash if root is None else root
        return (f"{KEY_PREFIX}{self.ns}:{{{self.part(root)[:8].hex()}:"
                f"{index // SEGMENT_BLOCKS}}}:{self.part(chain_hash).hex()}")

    def name(self, part: bytes) -> str:
        """The value's identity without its slot tag (what a signed value's MAC covers), from
        its key's hash part (``part``, ``hash_of_key``)."""
        return f"{KEY_PREFIX}{self.ns}:{bytes(part).hex()}"

    def group_keys(self, chain_hashes: Sequence[bytes]) -> list[str]:
        """Keys of every complete group of ``chain_hashes`` (a prefix's block hashes, in order)."""
        g = self.blocks_per_object
        if len(chain_hashes) < g:
            return []
        ns = f"{KEY_PREFIX}{self.ns}:{{{self.part(chain_hashes[0])[:8].hex()}:"
        return [f"{ns}{(i - 1) // SEGMENT_BLOCKS}}}:{self.part(chain_hashes[i - 1]).hex()}"
                for i in range(g, len(chain_hashes) + 1, g)]


def segment_of(key: str) -> str:
    """The hash tag of a key (its slot's name): keys with the same one share a slot. A key
    without one (not of this spec) is its own slot's name, as Redis hashes it whole."""
    i = key.find("{")
    j = key.find("}", i + 2) if i >= 0 else -1
    return key if j < 0 else key[i:j + 1]


def hash_of_key(key: str) -> bytes:
    """The hash part a key names: its chain hash, or with a secret the keyed hash
    (``Namespace.part``); raises ValueError on a key not of this spec."""
    if not key.startswith(KEY_PREFIX):
        raise ValueError(f"not a kvpool key: {key!r}")
    parts = key.split(":")
    if (len(parts) != 6 or len(parts[2]) != 16 or not parts[3].startswith("{")
            or not parts[4].endswith("}")):
        raise ValueError(f"not a kvpool key: {key!r}")
    return bytes.fromhex(parts[5])
