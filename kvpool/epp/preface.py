"""What a connection to the picker's port sent instead of the HTTP/2 client preface, and what
to do about it (docs/epp.md, "Plaintext h2c: configuring the gateway").

NOTE(plaintext-h2c): the port serves HTTP/2 over cleartext TCP (h2c, "prior knowledge": the
client preface is the first thing on the wire) and nothing else; no TLS, no HTTP/1.1 Upgrade.
The Inference Extension's reference picker serves TLS by default (its --secure-serving), so a
gateway configured for it sends a TLS ClientHello here. Such a connection used to get a GOAWAY
PROTOCOL_ERROR and a close with nothing logged or counted: the gateway answered every request
503 and the picker's log was empty. Its first bytes now say what it was (``sniff``); the
connection is counted by that reason (kvpool_epp_connections_refused_total{reason}) and logged
as one WARNING per reason every 10 s at most with the count, naming the fix (``ADVICE``).
"""

from __future__ import annotations

from kvpool.epp.calls import PREFACE

__all__ = ["ADVICE", "PREFACE_REASONS", "mismatch", "sniff"]

# TLS record type 22 (handshake), then the record's protocol version: 3.x (SSL 3.0 to TLS 1.3)
TLS_HANDSHAKE = 0x16
SNIFF_BYTES = 8  # fewer are buffered (bounded by the preface timeout) before judging
HTTP1_METHODS = (b"GET ", b"POST ", b"PUT ", b"HEAD ", b"DELETE ", b"OPTIONS ", b"PATCH ",
                 b"CONNECT ", b"TRACE ")
ADVICE = {
    "tls": "a TLS ClientHello: the picker serves plaintext h2c; point the gateway's cluster "
           "at it without TLS (no UpstreamTlsContext / transport_socket on Envoy's picker "
           "cluster, plaintext or h2c in the gateway's settings; docs/epp.md)",
    "http1": "an HTTP/1.x request: this is the gRPC ext_proc port (HTTP/2 cleartext); metrics "
             "and /health are on --metrics-port",
    "not_h2c": "bytes that are no HTTP/2 client preface: the port serves gRPC over plaintext "
               "HTTP/2 (h2c) only",
}
# why a connection was refused (the label of kvpool_epp_connections_refused_total): the cap
# (NOTE(connection-cap) in listener.py), a first byte string of ADVICE's, or no preface at all
# within the preface timeout (NOTE(preface-timeout) in listener.py)
PREFACE_REASONS = (*ADVICE, "preface_timeout")


def mismatch(first: bytes) -> bool:
    """Whether ``first`` (a connection's first bytes) can no longer become the HTTP/2 client
    preface, once SNIFF_BYTES have come (enough for ``sniff``) or the preface's length."""
    return len(first) >= SNIFF_BYTES and not PREFACE.startswith(first[:len(PREFACE)])


def sniff(first: bytes) -> str:
    """ADVICE's key for a connection whose first bytes ``first`` are not the preface."""
    if len(first) >= 3 and first[0] == TLS_HANDSHAKE and first[1] == 3:
        return "tls"
    if first.startswith(HTTP1_METHODS) or b" HTTP/1." in first.split(b"\r\n", 1)[0]:
        return "http1"
    return "not_h2c"
