"""What a replay client that never reads may cost the publisher (kvpool/events/replay.py
NOTE(zero-copy) and NOTE(replay-budget)): the batches queued for it are the ring's own bytes,
not copies, and only so many replays are open at once. Real ZMQ sockets on 127.0.0.1."""

from __future__ import annotations

import time

import zmq

from kvpool.events.replay import MAX_OPEN, REPLAY_HWM
from tests.events.helpers import (DEADLINE, Sub, close_all, publish_each, publisher, stored,
                                 wait_subscribed)

BATCHES = REPLAY_HWM + 44  # more than a non-reader's queue holds
TOKENS = 50_000  # ~250 KB a batch: every token id above 2**16 takes 5 bytes in msgpack
READERS = 4  # non-readers: copies would hold READERS * REPLAY_HWM * 250 KB ~ 256 MB
BOUND_MB = 64  # what the non-readers may add to the process's resident memory


def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


def _non_reader(ctx: zmq.Context, endpoint: str) -> zmq.Socket:
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.RCVHWM, 1)
    s.setsockopt(zmq.RCVBUF, 4096)  # little in the kernel either: what is sent stays queued
    s.setsockopt(zmq.LINGER, 0)
    s.connect(endpoint)
    s.send_multipart([b"", (0).to_bytes(8, "big")])
    return s


def _ignored(pub, reason: str) -> float:
    fams = {f[0]: f[4] for f in pub.families()}
    return dict(fams["kvpool_kv_events_replay_requests_ignored_total"]).get((reason,), 0.0)


def test_replays_to_clients_that_never_read_hold_no_copies_of_the_ring():
    pub = publisher(buffer_steps=BATCHES + 10)
    ctx = zmq.Context()
    socks: list[zmq.Socket] = []
    try:
        publish_each(pub, stored(BATCHES, TOKENS))
        time.sleep(0.5)
        before = _rss_mb()
        socks = [_non_reader(ctx, pub.replay_endpoint) for _ in range(READERS)]
        time.sleep(3.0)  # every replay runs into its client's full queue and waits there
        grown = _rss_mb() - before
        assert grown < BOUND_MB, f"{READERS} non-readers cost {grown:.0f} MB"
        # and the replays were served: what each can read now is the start of the ring
        first = socks[0]
        assert first.poll(int(DEADLINE * 1000))
        assert int.from_bytes(first.recv_multipart()[2], "big") == 0
    finally:
        close_all(socks, ctx, pub)


def test_requests_past_the_open_replay_cap_are_ignored_and_counted():
    pub = publisher()
    sub = Sub(pub)
    ctx = zmq.Context()
    socks: list[zmq.Socket] = []
    try:
        wait_subscribed(pub, sub)
        publish_each(pub, stored(BATCHES, TOKENS))
        socks = [_non_reader(ctx, pub.replay_endpoint) for _ in range(MAX_OPEN + 5)]
        end = time.monotonic() + DEADLINE
        while _ignored(pub, "full") < 5:
            assert time.monotonic() < end, "requests past the cap were not refused"
            time.sleep(0.05)
        assert _ignored(pub, "full") == 5
        socks.pop(0).close(linger=0)  # one leaves: its replay is cut, its place is free
        end = time.monotonic() + 3 * DEADLINE
        while True:
            try:
                out = sub.replay([b"", (BATCHES - 3).to_bytes(8, "big")], timeout=2.0)
                break
            except AssertionError:  # refused while the cap was still full: ask again
                assert time.monotonic() < end, "no replay after a place became free"
        assert len(out) >= 4 and out[-1][2] == (-1).to_bytes(8, "big", signed=True)
    finally:
        close_all(socks, ctx, sub, pub)
