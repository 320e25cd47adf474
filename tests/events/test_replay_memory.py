"""What a replay client that never reads may cost the publisher (kvpool/events/replay.py
NOTE(zero-copy) and NOTE(replay-budget)): the batches queued for it are the ring's own bytes,
not copies (what the caps on open and waiting replays do: test_replay_fairness.py). Real ZMQ
sockets on 127.0.0.1."""

from __future__ import annotations

import time

import zmq

from kvpool.events.replay import REPLAY_HWM
from tests.events.helpers import DEADLINE, close_all, publish_each, publisher, stored

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

