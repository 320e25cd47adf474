"""Where a replica's KV event sockets are, as the router may dial them (kv_feed.py).

NOTE(own-host): the router dials what a replica's ``GET /v1/kvpool/kv_events`` names, so a
compromised or misconfigured replica could point its SUB and DEALER at any host the router
reaches (an internal service the router's network admits and the clients' does not). By
default only endpoints on the replica's own host are followed: the host of its URL as the
router was given it (compared as written: no DNS lookup, which the replica could steer too), a
wildcard bind host (``*``, ``0.0.0.0``, ``::``) meaning that host. Any other host (another
name or address of the same machine included) is refused, said once with the fix, and the
replica is placed as one whose events are unusable (kv_feed.py ``unusable``: by lookups);
``kvpool router --kv-events-any-host`` follows such endpoints (docs/kv_events.md).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

__all__ = ["foreign_endpoint", "reachable"]

_WILDCARDS = ("*", "0.0.0.0", "[::]", "::")
_STREAMS = ("endpoint", "replay_endpoint")  # the endpoints the router dials


def _host(endpoint: str) -> str:
    return endpoint.removeprefix("tcp://").rpartition(":")[0]


def reachable(endpoint: str, replica_url: str) -> str:
    """``tcp://*:5557`` as seen from here: the wildcard host becomes the replica's host."""
    host, port = _host(endpoint), endpoint.rpartition(":")[2]
    if host in _WILDCARDS:
        host = urlsplit(replica_url).hostname or "127.0.0.1"
    return f"tcp://{host}:{port}"


def foreign_endpoint(info: dict[str, Any], replica_url: str) -> str | None:
    """NOTE(own-host): the first endpoint of ``info`` that is not on the replica's own host
    (``"replay_endpoint tcp://10.0.0.9:6379"``), None when every one is."""
    own = (urlsplit(replica_url).hostname or "").lower()
    for key in _STREAMS:
        endpoint = info.get(key)
        if not endpoint:
            continue
        host = _host(str(endpoint)) if str(endpoint).startswith("tcp://") else str(endpoint)
        if host not in _WILDCARDS and host.removeprefix("[").removesuffix("]").lower() != own:
            return f"{key} {endpoint}"
    return None
