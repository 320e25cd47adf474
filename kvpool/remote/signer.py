"""The tier's optional value signature: a keyed MAC over key, header and payload.

Without it, anyone who can write to Redis can plant bytes that a replica serves as another
prompt's KV (the CRC-32 in the header catches accidents, not an adversary: it is linear and
keyless). With a shared secret (``kvpool serve --remote-secret-file``) every value carries a
``TRAILER``-byte trailer after its payload, and a value without a valid one is a miss::

    aes_key = SHA-256("kvpool remote value MAC v1" || secret)          (AES-256)
    nonce   = 12 random bytes, fresh per value
    tag     = AES-GCM(aes_key, nonce, plaintext = key || header, aad = payload).tag
    trailer = nonce || tag                                              (12 + 16 bytes)

GCM authenticates its AAD and plaintext together, so the tag is a MAC over all three (the
ciphertext of the short plaintext is recomputed by the reader, never stored); the payload
goes in as AAD so it is read in place, never copied.

NOTE(mac-cost): the MAC must cover the payload (a tag over the header and its CRC alone lets
anyone swap in other bytes with the same CRC, which takes 4 bytes of freedom). HMAC-SHA256
(~1.8 GB/s a core here, blake2b ~0.8) made a signed 2 MiB read 6-27% slower than an unsigned
one (bench.remote's signed arm); GHASH on the carry-less multiply instructions runs over
20 GB/s, and a signed read checks the tag *instead of* the CRC (~3 GB/s), so signing costs a
read nothing measurable. The ``cryptography`` package provides AES-GCM (OpenSSL's).
"""

from __future__ import annotations

import hashlib
import hmac
import os
from pathlib import Path

from kvpool.errors import ConfigError

NONCE = 12
TAG = 16
TRAILER = NONCE + TAG  # bytes after a signed value's payload
MIN_SECRET = 16  # bytes: a shorter secret is refused
_KEY_LABEL = b"kvpool remote value MAC v1"


def _aesgcm(key: bytes):
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError as exc:  # an optional dependency: only a secret needs it
        raise ConfigError("--remote-secret-file needs the cryptography package: "
                          "pip install 'kvpool[remote-secret]'") from exc
    return AESGCM(key)


def read_secret(flag: str, path: str | Path) -> bytes:
    """A shared secret from the file ``flag`` names: its bytes without surrounding whitespace
    (a mounted secret, never on the command line); ConfigError names the flag and the path."""
    try:
        return Path(path).read_bytes().strip()
    except OSError as exc:
        raise ConfigError(f"{flag} {path}: {exc.strerror or exc}") from exc


class ValueSigner:
    """Tags and checks values with one secret; stateless apart from it, thread-safe."""

    __slots__ = ("_gcm",)

    def __init__(self, secret: bytes) -> None:
        if len(secret) < MIN_SECRET:
            raise ConfigError(f"the remote tier's secret has {len(secret)} bytes: use at "
                              f"least {MIN_SECRET} (e.g. head -c 32 /dev/urandom | base64)")
        self._gcm = _aesgcm(hashlib.sha256(_KEY_LABEL + bytes(secret)).digest())

    @classmethod
    def from_file(cls, path: str | Path) -> ValueSigner:
        """The secret is the file's bytes without surrounding whitespace."""
        return cls(read_secret("--remote-secret-file", path))

    def trailer(self, key: bytes, header: bytes | memoryview, payload: bytes | memoryview
                ) -> bytes:
        """A fresh ``TRAILER``-byte trailer (nonce, tag) for one value."""
        nonce = os.urandom(NONCE)
        return nonce + self._tag(nonce, key, header, payload)

    def valid(self, key: bytes, header: bytes | memoryview, payload: bytes | memoryview,
              trailer: bytes | memoryview) -> bool:
        t = bytes(trailer)
        if len(t) != TRAILER:
            return False
        return hmac.compare_digest(self._tag(t[:NONCE], key, header, payload), t[NONCE:])

    def _tag(self, nonce: bytes, key: bytes, header: bytes | memoryview,
             payload: bytes | memoryview) -> bytes:
        return self._gcm.encrypt(nonce, key + bytes(header), payload)[-TAG:]
