"""A peer that repeats its subscription (kvpool/events/publisher.py NOTE(start-marker),
NOTE(subscriptions)): before any real batch it made every subscriber get seq 0, "the replica
restarted", on every publisher turn; and its copies queued in the XPUB faster than the
publisher thread read them, growing the process by tens of MB, kept after it left. Real ZMQ
sockets on 127.0.0.1; the flooding peers are child processes, as a remote peer would be."""

from __future__ import annotations

import subprocess
import sys
import time

import zmq

from kvpool.events.publisher import MARKER_INTERVAL
from tests.events.helpers import DEADLINE, Sub, plain, publisher, wait_subscribed

SPAN = 0.3  # seconds the peer repeats its subscription (every 5 ms) before any real batch
FLOODERS = 2  # peer processes, each sending FLOOD subscriptions as fast as it can
FLOOD = 300_000  # one unbounded XPUB grew ~10-100 MB taking 2 x this
BOUND_MB = 4  # what the flood may add to resident memory (~0.2 MB here; unbounded: 9-21)
ATTACK = """
import sys, zmq
ctx = zmq.Context(); s = ctx.socket(zmq.XSUB); s.setsockopt(zmq.SNDHWM, 0)
s.connect(sys.argv[1])
for _ in range(int(sys.argv[2])):
    s.send(b"\\x01kv")
s.close(linger=-1); ctx.term()  # -1: what it queued is sent before it exits
"""


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def _seq(msg: list[bytes]) -> int:
    return int.from_bytes(msg[1], "big")


def test_a_repeated_subscription_resends_seq_0_at_most_once_per_interval():
    pub = publisher(replay_endpoint=None)
    sub = Sub(pub)
    ctx = zmq.Context()
    peer = ctx.socket(zmq.XSUB)
    try:
        first = sub.recv()
        assert first is not None and _seq(first) == 0 and plain(first[2])[1] == [
            {"type": "AllBlocksCleared"}]
        peer.connect(pub.endpoint)
        zeros, start = 0, time.monotonic()
        while time.monotonic() - start < SPAN:  # faster than turns go, slower than it reads
            peer.send(b"\x01kv", zmq.NOBLOCK)
            while (msg := sub.recv(0.005)) is not None:
                zeros += _seq(msg) == 0
        peer.close(linger=0)  # gone: what it still queued is dropped with its connection
        while (msg := sub.recv(2 * MARKER_INTERVAL)) is not None:  # what was owed, then quiet
            zeros += _seq(msg) == 0
        elapsed = time.monotonic() - start
        assert pub.next_seq == 1  # no real batch: seq 0 stayed the one to resend
        assert 1 <= zeros <= 2 + elapsed / MARKER_INTERVAL, (zeros, elapsed)
    finally:
        peer.close(linger=0)
        ctx.term()
        sub.close()
        pub.close()


def test_a_subscriber_that_joins_just_after_a_resend_still_gets_seq_0():
    pub = publisher(replay_endpoint=None)
    early, late = Sub(pub), Sub(pub)  # the second within MARKER_INTERVAL of the first's
    try:
        for sub in (early, late):
            msg = sub.recv()
            assert msg is not None and _seq(msg) == 0
    finally:
        early.close()
        late.close()
        pub.close()


def test_a_subscription_flood_leaves_the_publisher_bounded():
    pub = publisher(replay_endpoint=None)
    sub = Sub(pub)
    peers: list[subprocess.Popen] = []
    try:
        wait_subscribed(pub, sub)
        before = peak = _rss_mb()
        peers = [subprocess.Popen([sys.executable, "-c", ATTACK, pub.endpoint, str(FLOOD)])
                 for _ in range(FLOODERS)]
        end = time.monotonic() + 6 * DEADLINE
        while any(p.poll() is None for p in peers):  # busy, as a step thread keeps it
            assert time.monotonic() < end, "the flooding peers never finished"
            peak = max(peak, _rss_mb())
            sum(range(2000))
        assert all(p.returncode == 0 for p in peers)
        wait_subscribed(pub, sub)  # the publisher still delivers, and read what was left
        grew = max(peak, _rss_mb()) - before
        assert grew < BOUND_MB, f"the publisher's process grew {grew:.0f} MB"
    finally:
        for p in peers:
            if p.poll() is None:
                p.kill()
            p.wait()
        sub.close()
        pub.close()
