"""A flood of replay requests from clients that never read (kvpool/events/replay.py
NOTE(replay-budget)): live batches still go out, a well-behaved replayer still gets its whole
replay, and what waits for the flooders stays bounded. Real ZMQ sockets on 127.0.0.1."""

from __future__ import annotations

import time

import zmq

from kvpool.events.wire import AllBlocksCleared, BlockStored
from tests.events.helpers import DEADLINE, Sub, close_all, plain, publisher, wait_subscribed

RING = 2000  # batches kept, and published before the flood
FLOODERS, REQUESTS = 40, 50  # DEALERs x replay(0) requests each, none of them ever read
LIVE_BOUND = 5.0  # seconds the live batch may take during the flood (liveness, not speed)
MARK = b"\x07" * 32


def _fill(pub, n: int) -> None:
    """``n`` batches of one event each (the publisher takes what waits as one batch)."""
    end = time.monotonic() + DEADLINE
    for _ in range(n):
        want = pub.next_seq + 1
        pub.submit(AllBlocksCleared())
        while pub.next_seq < want:
            assert time.monotonic() < end, f"only {pub.next_seq} batches published"
            time.sleep(0.0005)


def _flood(ctx: zmq.Context, endpoint: str) -> list[zmq.Socket]:
    socks = []
    for _ in range(FLOODERS):
        s = ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.RCVHWM, 1)
        s.setsockopt(zmq.RCVBUF, 4096)  # little in the kernel either: what is sent stays here
        s.setsockopt(zmq.LINGER, 0)
        s.connect(endpoint)
        for _ in range(REQUESTS):
            s.send_multipart([b"", (0).to_bytes(8, "big")])
        socks.append(s)
    return socks


def test_a_replay_flood_neither_delays_live_batches_nor_spoils_a_replay():
    pub = publisher(buffer_steps=RING + 100)
    sub = Sub(pub)
    ctx = zmq.Context()
    flooders: list[zmq.Socket] = []
    try:
        wait_subscribed(pub, sub)
        _fill(pub, RING)
        while sub.recv(0.3) is not None:
            pass  # the fill's batches: only the live one is waited for below
        flooders = _flood(ctx, pub.replay_endpoint)
        time.sleep(0.5)  # the requests are in the replay socket's queue before the live batch
        pub.submit(BlockStored([MARK], None, [], 4, None, "GPU", None))
        sub.until(lambda ev: any(e["type"] == "BlockStored" for e in ev), timeout=LIVE_BOUND)
        out = sub.replay([b"", (0).to_bytes(8, "big")], timeout=6 * DEADLINE)
        seqs = [int.from_bytes(m[2], "big") for m in out[:-1]]
        assert seqs == list(range(len(seqs))) and len(seqs) > RING  # all of it, in order
        assert any(e["type"] == "BlockStored" for m in out[:-1] for e in plain(m[3])[1])
        assert out[-1] == [b"", b"", (-1).to_bytes(8, "big", signed=True), b""]
        ignored = {f[0]: f[4] for f in pub.families()}[
            "kvpool_kv_events_replay_requests_ignored_total"]
        assert dict(ignored)[("busy",)] > 0  # a non-reader's repeats replace each other
        # two replays per flooder at most however often it asked (its open one, one waiting:
        # NOTE(pending)): what it is sent, read now, is at most twice the ring and end marker
        assert 0 < _drain(flooders[0]) <= 2 * (pub.config.buffer_steps + 1)
    finally:
        close_all(flooders, ctx, sub, pub)


def _drain(sock: zmq.Socket) -> int:
    n = 0
    while sock.poll(500):
        sock.recv_multipart()
        n += 1
    return n
