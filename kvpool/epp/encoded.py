"""A request body the client compressed (``Content-Encoding: gzip`` or ``deflate``), as the
picker reads it: decoded for the check, the model rewrite and the scoring, the bytes that go
upstream left as they came, or compressed again when a rewrite changed them.

NOTE(encoded-body): the picker checked the raw ext_proc body, so a gzip body was a 400 "not
valid UTF-8" at the gateway where the replicas and ``kvpool router`` serve it (both decode
it: kvpool/server/body_coding.py NOTE(inflate)). A body that does not decode, decodes past
the picker's body bound (a zip bomb), or names another coding is not scored here
(``decoded`` gives None): it is placed as a body too large to check is, and the replica
judges it.
"""

from __future__ import annotations

import gzip
import zlib

from kvpool.server.body_coding import coding_of, decoded

__all__ = ["coding_of", "decoded", "encoded"]


def encoded(raw: bytes, coding: str) -> bytes:
    """``raw`` compressed in ``coding`` again (one ``decoded`` read)."""
    return gzip.compress(raw) if coding in ("gzip", "x-gzip") else zlib.compress(raw)
