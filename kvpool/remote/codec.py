"""One Redis value = a fixed header + the raw bytes of ``blocks_per_object`` blocks.

Invariant: a value :meth:`ValueCodec.decode` accepts was written by :meth:`ValueCodec.encode`
of the same namespace, under the key of the same hash part, and its payload bytes are exactly
those encoded (CRC-32 checked). No lossy codec: the payload is the KV bytes as they are.

Header (little-endian, 68 bytes)::

    off size field
      0    4 magic b"KVPB"
      4    1 codec version (1)
      5    1 prefix hash spec version      (Namespace.hash_spec)
      6    1 layout version                (Namespace.layout)
      7    1 dtype code                    (DTYPE_CODES)
      8    8 namespace digest              (Namespace.digest(), the key's ns as bytes)
     16    4 tokens in the value           (blocks * block_size)
     20    2 blocks in the value
     22    2 flags: bit 0 = signed (a signer.TRAILER-byte tag follows the payload)
     24    8 payload length in bytes
     32    4 CRC-32 of the payload
     36   32 the key's hash part           (Namespace.part of the last block's chain hash:
                                            keyed with a secret; a 16-byte one zero-padded)
     68    - payload: block 0 bytes || block 1 bytes || ...   (equal sizes)
      -   28 signed values only: nonce and tag (``signer.py``) over key, header, payload

One key per value and all of a group's blocks in it: Redis's LRU evicts a group whole, never
half of it (LMCache kept two keys per chunk and Redis evicted one without the other).

:meth:`decode` raises a :class:`RemoteValueError` subclass naming what is wrong; the tier turns
every one of them into a miss, deletes the key and counts ``errors_total{kind}``. With a
``signer`` (a shared secret), a value without a valid tag is such a miss too (``unsigned``,
``forged``), and the tag replaces the CRC check; without one, a signed value's tag is skipped.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass

from kvpool.errors import KVPoolError
from kvpool.remote.keys import DTYPES, Namespace
from kvpool.remote.signer import TRAILER, ValueSigner

MAGIC = b"KVPB"
CODEC_VERSION = 1
DTYPE_CODES = {name: i + 1 for i, name in enumerate(DTYPES)}
_HEADER = struct.Struct("<4sBBBB8sIHHQI32s")
HEADER_SIZE = _HEADER.size  # 68
FLAG_SIGNED = 1


class RemoteValueError(KVPoolError):
    """A value read from the remote tier is unusable; ``kind`` labels the error counter."""

    kind = "invalid"


class ShortValueError(RemoteValueError):
    """Shorter than its header, or than the payload length the header declares."""

    kind = "short"


class CorruptValueError(RemoteValueError):
    """Right shape, wrong bytes: CRC mismatch or trailing bytes."""

    kind = "corrupt"


class UnsignedValueError(RemoteValueError):
    """A secret is set and the value carries no tag."""

    kind = "unsigned"


class ForgedValueError(RemoteValueError):
    """A secret is set and the value's tag is not the one the secret gives."""

    kind = "forged"


class ForeignValueError(RemoteValueError):
    """Written by something else: other magic, versions, namespace, dtype, grouping, or a
    chain hash that is not the key's."""

    kind = "foreign"


@dataclass(frozen=True, slots=True)
class DecodedValue:
    """A checked value: ``blocks`` are zero-copy views into the value's bytes."""

    tokens: int  # tokens the value covers
    chain_hash: bytes  # the key's hash part (Namespace.part of the last block's chain hash)
    blocks: list[memoryview]  # one view per block, in chain order


class ValueCodec:
    """Encode/decode values of one namespace. Stateless apart from its constants; thread-safe,
    so callers may run it in an executor (large payloads: the CRC releases the GIL)."""

    __slots__ = ("namespace", "block_nbytes", "signer", "_ns", "_dtype", "_g")

    def __init__(self, namespace: Namespace, block_nbytes: int | None = None,
                 signer: ValueSigner | None = None) -> None:
        if block_nbytes is not None and block_nbytes < 1:
            raise ValueError("block_nbytes must be >= 1 (or None: any equal block size)")
        self.namespace = namespace
        self.block_nbytes = block_nbytes  # if set, decode also checks each block's size
        self.signer = signer  # if set, values are signed and decode requires a valid tag
        self._ns = namespace.digest()
        self._dtype = DTYPE_CODES[namespace.dtype]
        self._g = namespace.blocks_per_object

    def encode(self, chain_hash: bytes, blocks: Sequence[bytes | bytearray | memoryview]
               ) -> bytes:
        """Header + the blocks' bytes; ``blocks`` holds exactly ``blocks_per_object`` blocks.
        The header and the MAC name the key's hash part of ``chain_hash`` (NOTE(keyed-names)
        in keys.py), never the chain hash itself when a secret keys the names."""
        if len(blocks) != self._g:
            raise ValueError(f"a value holds blocks_per_object={self._g} blocks, "
                             f"got {len(blocks)}")
        if not 0 < len(chain_hash) <= 32:
            raise ValueError("chain_hash must be 1..32 bytes")
        views = [memoryview(b).cast("B") for b in blocks]
        size = views[0].nbytes
        if any(v.nbytes != size for v in views) or size == 0:
            raise ValueError("every block of a value must have the same, non-zero size")
        if self.block_nbytes is not None and size != self.block_nbytes:
            raise ValueError(f"block of {size} bytes, codec expects {self.block_nbytes}")
        crc = 0
        for v in views:
            crc = zlib.crc32(v, crc)
        ns, signer = self.namespace, self.signer
        part = ns.part(chain_hash)
        header = _HEADER.pack(MAGIC, CODEC_VERSION, ns.hash_spec, ns.layout, self._dtype,
                              self._ns, self._g * ns.block_size, self._g,
                              0 if signer is None else FLAG_SIGNED, size * self._g, crc,
                              part.ljust(32, b"\0"))
        if signer is None:
            return b"".join([header, *views])
        payload = views[0] if len(views) == 1 else b"".join(views)  # the MAC reads one buffer
        trailer = signer.trailer(ns.name(part).encode(), header, payload)
        return b"".join([header, payload, trailer])

    def max_value_nbytes(self) -> int | None:
        """The largest value this codec writes (signed), or None when the block size is
        open: a longer string under one of its keys is no value of its (NOTE(probe))."""
        if self.block_nbytes is None:
            return None
        return HEADER_SIZE + self._g * self.block_nbytes + TRAILER

    def decode(self, value: bytes | memoryview, chain_hash: bytes) -> DecodedValue:
        """Check ``value`` (read under a key whose hash part, ``hash_of_key``, is
        ``chain_hash``: the chain hash itself unless a secret keys the names) and split it
        into block views."""
        mv = memoryview(value).cast("B")
        nblocks, plen, crc, flags = self._header(mv, chain_hash)
        have = mv.nbytes - HEADER_SIZE - (TRAILER if flags & FLAG_SIGNED else 0)
        if have < plen:
            raise ShortValueError(f"payload of {have} bytes, header declares {plen}")
        if have > plen:
            raise CorruptValueError(f"{have - plen} bytes after the declared payload")
        if plen % nblocks or plen == 0:
            raise CorruptValueError(f"payload of {plen} bytes does not split into {nblocks} "
                                    "blocks")
        size = plen // nblocks
        if self.block_nbytes is not None and size != self.block_nbytes:
            raise ForeignValueError(f"blocks of {size} bytes, this replica's are "
                                    f"{self.block_nbytes}")
        payload = mv[HEADER_SIZE:HEADER_SIZE + plen]
        self._check_payload(mv, payload, crc, flags, chain_hash)
        blocks = [payload[i * size:(i + 1) * size] for i in range(nblocks)]
        return DecodedValue(tokens=nblocks * self.namespace.block_size,
                            chain_hash=bytes(chain_hash), blocks=blocks)

    def _header(self, mv: memoryview, chain_hash: bytes) -> tuple[int, int, int, int]:
        """(blocks, payload length, CRC, flags) of a header that is this namespace's and
        names ``chain_hash``; raises otherwise."""
        if mv.nbytes < HEADER_SIZE:
            raise ShortValueError(f"value of {mv.nbytes} bytes is shorter than the "
                                  f"{HEADER_SIZE}-byte header")
        (magic, ver, spec, layout, dtype, ns, tokens, nblocks, flags, plen, crc,
         h) = _HEADER.unpack_from(mv)
        want = self.namespace
        if magic != MAGIC or ver != CODEC_VERSION:
            raise ForeignValueError(f"magic/version {magic!r}/{ver} is not {MAGIC!r}/"
                                    f"{CODEC_VERSION}")
        if (spec, layout, dtype, ns) != (want.hash_spec, want.layout, self._dtype, self._ns):
            raise ForeignValueError("value of another namespace (hash spec, layout, dtype or "
                                    "model fingerprint differ)")
        if h != bytes(chain_hash).ljust(32, b"\0"):
            raise ForeignValueError("value's chain hash is not its key's")
        if nblocks != self._g or tokens != self._g * want.block_size:
            raise ForeignValueError(f"value holds {nblocks} blocks / {tokens} tokens, expected "
                                    f"{self._g} / {self._g * want.block_size}")
        return nblocks, plen, crc, flags

    def _check_payload(self, mv: memoryview, payload: memoryview, crc: int, flags: int,
                       chain_hash: bytes) -> None:
        """The CRC without a signer; with one, the tag instead (it covers the payload)."""
        signer = self.signer
        if signer is None:
            if zlib.crc32(payload) != crc:
                raise CorruptValueError("payload CRC-32 mismatch")
            return
        if not flags & FLAG_SIGNED:
            raise UnsignedValueError("the value carries no tag and a secret is set")
        key = self.namespace.name(bytes(chain_hash)).encode()
        end = HEADER_SIZE + payload.nbytes
        if not signer.valid(key, mv[:HEADER_SIZE], payload, mv[end:end + TRAILER]):
            raise ForgedValueError("the value's tag is not the secret's (forged, or written "
                                   "with another secret)")

    def split(self, value: bytes | memoryview) -> list[memoryview]:
        """The block views of a value ``RemoteTier.get_many`` already checked, without a
        second pass over the payload (``decode`` would CRC it again); only its shape is
        re-read from the header. Use ``decode`` for a value from anywhere else."""
        mv = memoryview(value).cast("B")
        if mv.nbytes < HEADER_SIZE:
            raise ShortValueError(f"value of {mv.nbytes} bytes is shorter than the header")
        fields = _HEADER.unpack_from(mv)
        nblocks, flags, plen = fields[7], fields[8], fields[9]
        trailer = TRAILER if flags & FLAG_SIGNED else 0
        if nblocks == 0 or plen % nblocks or mv.nbytes - HEADER_SIZE - trailer != plen:
            raise CorruptValueError("value's shape does not match its header")
        size = plen // nblocks
        return [mv[HEADER_SIZE + i * size:HEADER_SIZE + (i + 1) * size] for i in range(nblocks)]
