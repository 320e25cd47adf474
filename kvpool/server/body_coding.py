"""A request body the client compressed (``Content-Encoding: gzip`` or ``deflate``), decoded by
kvpool, bounded, off the event loop; aiohttp's own decoding is off (connections.py).

NOTE(inflate): aiohttp inflates a compressed request body as its bytes arrive, on the event
loop, and after a 413 its lingering read (NOTE(linger) in connections.py) inflates what still
comes too. A 1 MB gzip body that inflates to 1 GiB got its 413 in 0.09 s and then held the
loop for 1-2 s: other clients' streams stalled, /health answered late, and a router in front
marked the replica down (503s for everyone else); the router's own loop stalled the same way.
Now the listener hands the handlers the body as it came, bounded by ``--max-body-bytes``, and
``inflate`` decodes it on the parse pool's thread, never past that bound: such a bomb costs a
thread a few milliseconds and the loop nothing. vLLM (Starlette) does not decode request
bodies at all; kvpool keeps reading gzip and deflate, as it did through aiohttp
(docs/architecture.md, Request bodies).

``refuse_from_head``: what a request's head alone already refuses, before any of its body is
read; the body reader (json_body.ParsePool) and the ``Expect: 100-continue`` handler
(expect.py) ask the same function, so the two cannot drift apart.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping

from aiohttp import web

__all__ = ["coding_of", "decoded", "inflate", "left_encoded", "refuse_from_head"]

_WBITS = {"gzip": 16 + zlib.MAX_WBITS, "x-gzip": 16 + zlib.MAX_WBITS, "deflate": zlib.MAX_WBITS}


def coding_of(headers: Mapping[str, str]) -> str | None:
    """The body's content coding, None for none (``identity``)."""
    coding = headers.get("content-encoding", "identity").strip().lower()
    return None if coding in ("", "identity") else coding


def refuse_from_head(request: web.BaseRequest) -> None:
    """Raise the client error a request's head already earns, if any.

    NOTE(declared): a Content-Length past the app's bound (``client_max_size``, from
    ``--max-body-bytes``) is a 413 before any of the body is read, not a wait for bytes the
    client may never send, nor (with ``Expect: 100-continue``) an invitation to send them.

    NOTE(transfer-coding): aiohttp's parser frames a request by its final ``chunked`` coding
    and hands the app the de-chunked bytes with any coding listed before it (``gzip,
    chunked``) still applied, undecoded. RFC 9112 6.1 / RFC 9110 15.6.2: a transfer coding
    the server does not understand is a 501, not a body read as if it were plain (that was a
    400 for "invalid UTF-8"). A TE whose last coding is not chunked is aiohttp's 400 before
    the app runs, as RFC 9112 6.3 asks. ``Content-Encoding: gzip`` is the way to send a
    compressed body."""
    sent = ",".join(request.headers.getall("Transfer-Encoding", []))
    codings = [c.strip().lower() for c in sent.split(",") if c.strip()]
    if codings[:-1]:
        raise web.HTTPNotImplemented(
            text=f"Transfer-Encoding {sent.strip()!r} is not supported: chunked is the only "
                 "transfer coding read here (send a compressed body with Content-Encoding)")
    limit = request.client_max_size
    if limit and (request.content_length or 0) > limit:
        raise web.HTTPRequestEntityTooLarge(limit, request.content_length)


def left_encoded(request: web.BaseRequest) -> str | None:
    """The coding of ``request``'s body when its listener left it encoded (connections.py's
    guarded one), None when it came uncompressed or aiohttp decoded it (an app served by
    aiohttp's own listener: a test server, ``web.run_app``)."""
    if not getattr(request.protocol, "bodies_encoded", False):
        return None
    return coding_of(request.headers)


def decoded(raw: bytes, coding: str, limit: int) -> bytes | None:
    """``raw`` decoded, or None: a coding not read here, a corrupt body, or one that decodes
    to more than ``limit`` bytes (inflated no further than that)."""
    return _decode(raw, coding, limit)[0]


def inflate(raw: bytes, coding: str, limit: int) -> bytes:
    """NOTE(inflate): ``raw`` decoded, at most ``limit`` bytes; an aiohttp HTTP error for the
    client otherwise: 415 for a coding not read here (RFC 9110 15.5.16), 413 past ``limit``,
    400 for a corrupt body (as aiohttp's own decoding failed)."""
    out, status = _decode(raw, coding, limit)
    if out is not None:
        return out
    if status == 415:
        raise web.HTTPUnsupportedMediaType(
            text=f"Content-Encoding {coding!r} is not supported: send the body as gzip, "
                 "deflate or uncompressed")
    if status == 413:
        raise web.HTTPRequestEntityTooLarge(
            limit, limit + 1, text=f"the {coding} body decodes to more than {limit} bytes "
                                   "(--max-body-bytes)")
    raise web.RequestPayloadError(f"not valid {coding} data")  # NOTE(gzip) in middleware.py


def _decode(raw: bytes, coding: str, limit: int) -> tuple[bytes | None, int]:
    """(``raw`` decoded, 200), or (None, the client error's status: 415, 413 or 400).
    ``deflate`` without its zlib header (raw DEFLATE, which some clients send) is read too,
    as aiohttp read it."""
    wbits = _WBITS.get(coding)
    if wbits is None:
        return None, 415
    if wbits == zlib.MAX_WBITS and raw and raw[0] & 0x0F != 8:  # no zlib header
        wbits = -zlib.MAX_WBITS
    stream = zlib.decompressobj(wbits)
    try:
        out = stream.decompress(raw, limit + 1)
    except zlib.error:
        return None, 400
    if len(out) > limit or stream.unconsumed_tail:
        return None, 413
    return (out, 200) if stream.eof else (None, 400)
