"""A flood of replay requests from clients that never read (kvpool/events/replay.py
NOTE(replay-budget)): live batches still go out, a well-behaved replayer still gets its whole
replay, and what waits for the flooders stays bounded. Real ZMQ sockets on 127.0.0.1."""

from __future__ import annotations

import time

import zmq

from kvpool.events.wire import AllBlocksCleared, BlockStored
from tests.events.helpers import (DEADLINE, Sub, close_all, plain, publish_each, publisher,
                                 wait_subscribed)

RING = 2000  # batches kept, and published before the flood
FLOODERS, REQUESTS = 40, 50  # DEALERs x replay(0) requests each, none of them ever read
LIVE_BOUND = 5.0  # seconds the live batch may take during the flood (liveness, not speed)
MARK = b"\x07" * 32
END = (-1).to_bytes(8, "big", signed=True)


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
        publish_each(pub, (AllBlocksCleared() for _ in range(RING)))
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
        assert out[-1] == [b"", b"", END, b""]
        fams = {f[0]: dict(f[4]) for f in pub.families()}
        assert fams["kvpool_kv_events_replay_requests_ignored_total"][("busy",)] > 0
        # NOTE(replay-sndbuf): the flooders are still held (none cut) and short of their first
        # replay's end: they did not take their shares of the budget while it ran. Their
        # kernel-queued batches outlive the publisher; what its queues held is gone.
        assert fams["kvpool_kv_events_replays_cut_total"][()] == 0
        pub.close()
        held = _drain(flooders[0])
        assert 0 < len(held) < RING and END not in [m[2] for m in held], len(held)
    finally:
        close_all(flooders, ctx, sub, pub)


def _drain(sock: zmq.Socket) -> list[list[bytes]]:
    out = []
    while sock.poll(500):
        out.append(sock.recv_multipart())
    return out
