"""The tier's optional value signature: a keyed MAC over key, header and payload.

Without it, anyone who can write to Redis can plant bytes that a replica serves as another
prompt's KV (the CRC-32 in the header catches accidents, not an adversary: it is linear and
keyless). With a shared secret (``kvpool serve --remote-secret-file``) every value carries a
``TRAILER``-byte tag after its payload, and a value without a valid one is a miss.

    tag = HMAC-SHA256(secret, key || header || payload)      32 bytes, after the payload

NOTE(mac-cost): the MAC must cover the payload (a tag over the header and its CRC alone
lets anyone swap in other bytes with the same CRC, which takes 4 bytes of freedom). SHA-256
runs on the SHA extensions here (~1.8 GB/s a core, blake2b ~0.8); a signed read checks the
tag *instead of* the CRC, so it pays the difference, in the same worker threads that overlap
the CRC with the reads (bench.remote's signed arm measures it).
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Sequence
from pathlib import Path

from kvpool.errors import ConfigError

TRAILER = 32  # bytes of tag after a signed value's payload
MIN_SECRET = 16  # bytes: a shorter secret is refused


class ValueSigner:
    """Tags and checks values with one secret; stateless apart from it, thread-safe."""

    __slots__ = ("_secret",)

    def __init__(self, secret: bytes) -> None:
        if len(secret) < MIN_SECRET:
            raise ConfigError(f"the remote tier's secret has {len(secret)} bytes: use at "
                              f"least {MIN_SECRET} (e.g. head -c 32 /dev/urandom | base64)")
        self._secret = bytes(secret)

    @classmethod
    def from_file(cls, path: str | Path) -> ValueSigner:
        """The secret is the file's bytes without surrounding whitespace."""
        try:
            data = Path(path).read_bytes().strip()
        except OSError as exc:
            raise ConfigError(f"--remote-secret-file {path}: {exc.strerror or exc}") from exc
        return cls(data)

    def tag(self, key: bytes, header: bytes | memoryview,
            payload: Sequence[bytes | memoryview]) -> bytes:
        """The ``TRAILER``-byte tag of one value whose payload is the concatenation of
        ``payload``'s parts (hashlib drops the GIL on large updates)."""
        h = hmac.new(self._secret, key, hashlib.sha256)
        h.update(header)
        for part in payload:
            h.update(part)
        return h.digest()

    def valid(self, key: bytes, header: memoryview, payload: Sequence[memoryview],
              tag: memoryview) -> bool:
        return hmac.compare_digest(self.tag(key, header, payload), bytes(tag))
