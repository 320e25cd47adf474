"""A request body the client compressed (``Content-Encoding: gzip`` or ``deflate``), as the
picker reads it: decoded for the check, the model rewrite and the scoring, the bytes that go
upstream left as they came, or compressed again when a rewrite changed them.

NOTE(encoded-body): the picker checked the raw ext_proc body, so a gzip body was a 400 "not
valid UTF-8" at the gateway where the replicas (kvpool/server/middleware.py NOTE(gzip)) and
``kvpool router`` (aiohttp decodes before the router reads) serve it. A body that does not
decode, decodes past the picker's body bound (a zip bomb), or names another coding is not
scored here (``decoded`` gives None): it is placed as a body too large to check is, and the
replica judges it.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Mapping

__all__ = ["coding_of", "decoded", "encoded"]

_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


def coding_of(headers: Mapping[str, str]) -> str | None:
    """The body's content coding, None for none (``identity``)."""
    coding = headers.get("content-encoding", "identity").strip().lower()
    return None if coding in ("", "identity") else coding


def decoded(raw: bytes, coding: str, limit: int) -> bytes | None:
    """``raw`` decoded, or None: a coding the picker does not read, a corrupt body, or one
    that decodes to more than ``limit`` bytes (read no further than that)."""
    wbits = _WBITS.get(coding)
    if wbits is None:
        return None
    stream = zlib.decompressobj(wbits)
    try:
        out = stream.decompress(raw, limit + 1)
    except zlib.error:
        return None
    if len(out) > limit or stream.unconsumed_tail or not stream.eof:
        return None
    return out


def encoded(raw: bytes, coding: str) -> bytes:
    """``raw`` compressed in ``coding`` again (one ``decoded`` read)."""
    return gzip.compress(raw) if _WBITS[coding] > zlib.MAX_WBITS else zlib.compress(raw)
