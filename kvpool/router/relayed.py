"""What of a request the router relays: its headers (each way) and its body, checked.

Headers: a proxy forwards every end-to-end header and drops the hop-by-hop ones (RFC 9110
section 7.6.1), so what a replica sees of a request is what the client sent::

    forwarded:  everything else: Authorization, Content-Type, Accept, X-Request-Id,
                traceparent / tracestate, the replicas' --tenant-header, ...
    dropped:    Connection and every header it names, Keep-Alive, Proxy-*, TE, Trailer,
                Transfer-Encoding, Upgrade; Host and Content-Length (the router's own
                connection sets them); Expect (the router has read the body already)

NOTE(identity): the tenant header (``kvpool serve --tenant-header``) must reach the replica on
the lookup too: a replica answers a lookup within the caller's own tenant namespace, and its
quota keys on the same identity; a router that dropped it made every client the anonymous
tenant. The router trusts what the client sent exactly as a direct replica does; an operator
who lets clients reach the router but wants the header set by a gateway strips it there.

NOTE(identity-encoding): on POST /v1/responses the router must read the answer's start (the
response id it learns, affinity.py), so there it asks for the answer uncompressed: the client's
Accept-Encoding is replaced by ``identity``. Otherwise a replica that compresses (as a proxy in
front of it may) sent a gzip body the router could not read: each follow-up naming that id
then cost a search of every replica, and was placed by load (a 404 where it landed wrong) once
the searches were at their cap. The client gets the answer uncompressed, which HTTP allows
whatever it accepts.

Responses come back the same way, minus Content-Length (the router may stream or rewrite the
body) and the Server/Date aiohttp sets for its own connection.

The body is read bounded by the app's ``client_max_size`` (``--max-body-bytes``, the server's
default: past it 413 OpenAI error JSON, from the shared error middleware; a declared length
past it, or a transfer coding before ``chunked`` (501), is refused from the head, before any of
the body is read and with no ``100 Continue``: body_coding.py ``refuse_from_head``, expect.py
NOTE(expect-bound)), then checked as the replica checks it (json_body.py, the same code)::

    more than CHECKED_VALUES JSON values   -> passed on unchecked: the replica, which knows its
                                              context length, answers it (400 when it cannot
                                              fit); NOTE(gil) in json_body.py
    up to INLINE_BYTES                     -> decoded on the event loop (cheaper than a hop)
    larger                                 -> decoded on one worker thread
    not UTF-8 JSON, not an object, too deep -> 400 OpenAI error JSON, no replica asked

NOTE(gil): ``json.loads`` holds the GIL for a whole call, on any thread, and costs per value
(~75 ns each here): 2M values (a 4 MiB token list) stall every stream and /health for ~0.15 s.
The router only checks what it relays, so past CHECKED_VALUES (a few ms of decoding) it leaves
the work to the replica, whose own bound depends on its context length.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping

import aiohttp
from aiohttp import web

from kvpool.server.json_body import (DEFAULT_BODY_TIMEOUT, MAX_JSON_DEPTH, ParsePool,
                                     decode_json_body, structural_commas)
from kvpool.server.tenant import header_values

__all__ = ["CHECKED_VALUES", "INLINE_BYTES", "BodyReader", "asking_identity", "own_session",
           "request_headers", "response_headers"]

# lower-case names; Proxy-* is matched by prefix
_HOP_BY_HOP = frozenset({"connection", "keep-alive", "te", "trailer", "trailers",
                         "transfer-encoding", "upgrade", "host", "content-length", "expect"})
_RESPONSE_OWN = frozenset({"server", "date"})
# the router relays a request body decoded (BodyReader: kvpool/server/body_coding.py
# NOTE(inflate)): forwarded with its Content-Encoding, a gzip body reached the replica as plain
# JSON labelled gzip (a 400 there)
_REQUEST_DECODED = frozenset({"content-encoding"})


def _named_by_connection(headers: Mapping[str, str]) -> set[str]:
    """Headers the sender marked hop-by-hop by listing them in Connection."""
    names: set[str] = set()
    for value in header_values(headers, "Connection"):
        names.update(n.strip().lower() for n in value.split(",") if n.strip())
    return names


def _end_to_end(headers: Mapping[str, str], also_drop: frozenset[str]) -> list[tuple[str, str]]:
    drop = _named_by_connection(headers)
    return [(k, v) for k, v in headers.items()
            if (low := k.lower()) not in _HOP_BY_HOP and low not in drop
            and low not in also_drop and not low.startswith("proxy-")]


def request_headers(headers: Mapping[str, str]) -> list[tuple[str, str]]:
    """The client's end-to-end request headers, in order, repeats kept (for the replica),
    but Content-Encoding: the relayed body is the decoded one."""
    return _end_to_end(headers, _REQUEST_DECODED)


def asking_identity(headers: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """``headers`` asking for an uncompressed answer (NOTE(identity-encoding))."""
    return [*((k, v) for k, v in headers if k.lower() != "accept-encoding"),
            ("Accept-Encoding", "identity")]


def own_session(connect_timeout: float, keepalive: float,
                tls: ssl.SSLContext | None = None) -> aiohttp.ClientSession:
    """The session of what the router asks the replicas itself (beats, scrapes, kv_events
    info, lookups: those pass ``asking_identity``'s headers), trusting ``tls``' CAs for
    https:// replicas (None: the system's; replica_tls.py NOTE(replica-ca)). NOTE(own-asks):
    every answer is asked uncompressed, as NOTE(identity-encoding) asks a relayed one the
    router reads; the session decodes nothing, so a compressing proxy in front of the
    replicas made each answer "not JSON" (0 hits, no load) for every client that accepts
    gzip."""
    return aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=connect_timeout),
        auto_decompress=False, cookie_jar=aiohttp.DummyCookieJar(),
        headers={"Accept-Encoding": "identity"},
        connector=aiohttp.TCPConnector(limit=0, keepalive_timeout=keepalive,
                                       ssl=tls if tls is not None else True))


def response_headers(headers: Mapping[str, str]) -> list[tuple[str, str]]:
    """The replica's end-to-end response headers (for the client)."""
    return _end_to_end(headers, _RESPONSE_OWN)

CHECKED_VALUES = 65536  # values the router decodes itself (a few ms of GIL)
INLINE_BYTES = 64 * 1024  # smaller bodies decode in well under a ms


def check_body(raw: bytes) -> dict | None:
    """The JSON object ``raw`` holds, None when it is too large to check here; RequestError
    (400 by the error middleware) when it is not a JSON object."""
    if structural_commas(raw, CHECKED_VALUES) > CHECKED_VALUES:
        return None  # the replica decides (module docstring)
    # max_model_len only words the value-count error, which the line above rules out
    return decode_json_body(raw, max_json_depth=MAX_JSON_DEPTH,
                            max_body_commas=CHECKED_VALUES, max_model_len=0)


class BodyReader:
    """Reads and checks generation request bodies; large ones on its own worker thread (the
    server's ParsePool, with the router's inline bound)."""

    def __init__(self, body_timeout: float = DEFAULT_BODY_TIMEOUT) -> None:
        self._pool = ParsePool(1, inline_bytes=INLINE_BYTES, name="router-body")
        self._pool.body_timeout = body_timeout  # NOTE(slow-body), every route's body

    @property
    def off_loop(self) -> int:
        """Bodies checked on the worker thread so far (tests read it)."""
        return self._pool.offloaded

    async def check(self, raw: bytes) -> dict | None:
        """The decoded body (None: too large to decode here); RequestError unless ``raw`` is
        a JSON object the router may relay. NOTE(once): callers hand the object on (the
        prompt hashing reads it), so a body is decoded once in the router."""
        return await self._pool.parse(raw, check_body)

    async def raw(self, request: web.Request) -> bytes:
        """The whole body, within the body timeout (408 past it: NOTE(slow-body))."""
        return await self._pool.read(request)

    async def read(self, request: web.Request) -> tuple[bytes, dict | None]:
        """The raw body (what is relayed) and its decoded object (``check``)."""
        raw = await self.raw(request)
        return raw, await self.check(raw)

    def close(self) -> None:
        self._pool.close()
