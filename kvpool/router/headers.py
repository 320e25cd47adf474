"""Which headers cross the router, each way (RFC 9110 section 7.6.1, connection-specific fields).

A proxy forwards every end-to-end header and drops the hop-by-hop ones, so what a replica sees
of a request is what the client sent::

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

Responses come back the same way, minus Content-Length (the router may stream or rewrite the
body) and the Server/Date aiohttp sets for its own connection.
"""

from __future__ import annotations

from collections.abc import Mapping

__all__ = ["request_headers", "response_headers"]

# lower-case names; Proxy-* is matched by prefix
_HOP_BY_HOP = frozenset({"connection", "keep-alive", "te", "trailer", "trailers",
                         "transfer-encoding", "upgrade", "host", "content-length", "expect"})
_RESPONSE_OWN = frozenset({"server", "date"})


def _named_by_connection(headers: Mapping[str, str]) -> set[str]:
    """Headers the sender marked hop-by-hop by listing them in Connection."""
    names: set[str] = set()
    for value in _all(headers, "Connection"):
        names.update(n.strip().lower() for n in value.split(",") if n.strip())
    return names


def _all(headers: Mapping[str, str], name: str) -> list[str]:
    getall = getattr(headers, "getall", None)
    if getall is not None:
        return list(getall(name, []))
    value = headers.get(name)
    return [] if value is None else [value]


def _end_to_end(headers: Mapping[str, str], also_drop: frozenset[str]) -> list[tuple[str, str]]:
    drop = _named_by_connection(headers)
    return [(k, v) for k, v in headers.items()
            if (low := k.lower()) not in _HOP_BY_HOP and low not in drop
            and low not in also_drop and not low.startswith("proxy-")]


def request_headers(headers: Mapping[str, str]) -> list[tuple[str, str]]:
    """The client's end-to-end request headers, in order, repeats kept (for the replica)."""
    return _end_to_end(headers, frozenset())


def response_headers(headers: Mapping[str, str]) -> list[tuple[str, str]]:
    """The replica's end-to-end response headers (for the client)."""
    return _end_to_end(headers, _RESPONSE_OWN)
