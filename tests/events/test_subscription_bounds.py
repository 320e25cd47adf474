"""What a peer of the publisher's sockets may make it hold (kvpool/events/publisher.py
NOTE(subscriptions)): a subscription larger than the topic plus SUBSCRIPTION_SLACK disconnects
its peer unread, and a replay-request frame past MAX_REQUEST never reaches the replay server.
Real ZMQ sockets on 127.0.0.1."""

from __future__ import annotations

import contextlib
import socket
import struct

import zmq

from kvpool.events.publisher import MAX_REQUEST, SUBSCRIPTION_SLACK
from tests.events.helpers import DEADLINE, Sub, close_all, publisher, wait_subscribed

BIG = 8 << 20  # one subscription's bytes: an unbounded PUB grew ~400 MB holding it
BOUND_MB = 48  # what it may add to resident memory


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def _raw_sub(endpoint: str) -> socket.socket:
    """A SUB peer in raw ZMTP 3.0 (NULL security), so a test can send what a well-behaved
    libzmq SUB never would: a pyzmq SUB holding an 8 MiB subscription crashes on close."""
    host, port = endpoint.removeprefix("tcp://").rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=DEADLINE)
    s.sendall(b"\xff" + bytes(8) + b"\x7f\x03\x00" + b"NULL".ljust(20, b"\0") + bytes(32))
    got = b""
    while len(got) < 64:
        got += s.recv(64 - len(got))
    body = b"\x05READY\x0bSocket-Type" + struct.pack(">I", 3) + b"SUB"
    s.sendall(bytes([0x04, len(body)]) + body)
    return s


def _subscribe(s: socket.socket, prefix: bytes) -> None:
    """One subscription message (ZMTP 3.0: 0x01 + prefix) as one frame."""
    msg = b"\x01" + prefix
    head = b"\x00" + bytes([len(msg)]) if len(msg) < 256 else b"\x02" + struct.pack(">Q", len(msg))
    s.sendall(head + msg)


def test_a_subscription_past_the_cap_is_refused_unread():
    pub = publisher()
    sub = Sub(pub)
    big = _raw_sub(pub.endpoint)
    try:
        wait_subscribed(pub, sub)
        before = _rss_mb()
        assert BIG > len(pub.topic) + SUBSCRIPTION_SLACK
        with contextlib.suppress(OSError):  # refused at its header: the peer is dropped
            _subscribe(big, b"k" * BIG)
        for _ in range(3):  # publishing goes on: a PUB takes subscriptions in as it sends
            wait_subscribed(pub, sub)
        grew = _rss_mb() - before
        assert grew < BOUND_MB, f"the publisher's process grew {grew:.0f} MB"
    finally:
        big.close()
        sub.close()
        pub.close()


def test_a_replay_frame_past_the_cap_never_reaches_the_replay_server():
    pub = publisher()
    ctx = zmq.Context()
    bad = ctx.socket(zmq.DEALER)
    bad.connect(pub.replay_endpoint)
    sub = Sub(pub)
    try:
        wait_subscribed(pub, sub)
        bad.send_multipart([b"", b"\0" * (8 * MAX_REQUEST)])
        got = sub.replay([b"", (0).to_bytes(8, "big")])  # another client is answered
        assert got and got[-1][2] == (-1).to_bytes(8, "big", signed=True)
        assert pub.bad_replays == 0  # the oversized frame was refused unread
    finally:
        close_all([bad], ctx, sub, pub)
