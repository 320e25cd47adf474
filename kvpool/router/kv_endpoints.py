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

NOTE(max-message): a real batch is one engine step's events (a prefill budget's blocks stored,
as many evicted: kilobytes; a reset that removes the blocks still in use: 34 bytes a block, so
16 MiB is ~490k blocks, past any real device pool and half the index's own bound). A bigger
frame is refused by ZMQ (ZMQ_MAXMSGSIZE) before it is read into memory or decoded on the event
loop. ZMQ then drops the connection and, for that error, never dials again: the SUB's monitor
reports the disconnect and the reader dials again itself (a DEALER is replaced after its replay
timed out). What was missed meanwhile is a gap, and a replay that holds the oversized batch gets
no answer in time, so the index is cleared.

NOTE(rcvhwm): a frame's bound is not the memory's: ZMQ queues received messages until the
reader takes them, by default up to 1000 per socket, and one replica publishing valid 13 MiB
batches faster than the router applies them (a few a second at that size) grew the router to
4.7 GiB in 10 s. Each socket queues at most RECV_QUEUE messages (ZMQ_RCVHWM), so one replica
holds at most RECV_QUEUE x MAX_MESSAGE (256 MiB) of the router's memory, and 16 real batches
(kilobytes, one engine step each) are well past what arrives while the reader waits for the
event loop. The SUB drops what comes past that: the next batch's seq shows the gap and the
feed replays it or clears the index (kv_feed.py). The replica's replay ROUTER waits for room
rather than drop (kvpool/events/publisher.py), so a replay through the DEALER loses nothing.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import zmq
import zmq.asyncio

__all__ = ["MAX_MESSAGE", "RECV_QUEUE", "dial", "foreign_endpoint", "reachable"]

MAX_MESSAGE = 16 << 20  # bytes per frame the SUB and DEALER accept (NOTE(max-message))
RECV_QUEUE = 16  # messages a SUB or DEALER queues before the reader takes them (NOTE(rcvhwm))

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


def dial(ctx: zmq.asyncio.Context, kind: int, endpoint: str, topic: bytes) -> zmq.asyncio.Socket:
    """A SUB (subscribed to ``topic``) or DEALER connected to ``endpoint`` (``reachable``'s),
    its frames and receive queue bounded (NOTE(max-message), NOTE(rcvhwm))."""
    sock = ctx.socket(kind)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE)
    sock.setsockopt(zmq.RCVHWM, RECV_QUEUE)  # before connect: a pipe takes the HWM it met
    if kind == zmq.SUB:
        sock.setsockopt(zmq.SUBSCRIBE, topic)
    sock.connect(endpoint)
    return sock
