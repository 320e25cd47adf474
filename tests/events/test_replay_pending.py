"""A replay request that waits behind its client's running replay (kvpool/events/replay.py
NOTE(pending)) is served when that replay is cut, not only when it ends; only a client that
left loses it, counted. Real ZMQ sockets on 127.0.0.1."""

from __future__ import annotations

import time

import zmq

from kvpool.events.replay import REPLAY_HWM
from tests.events.helpers import DEADLINE, close_all, publish_each, publisher, stored

RING = REPLAY_HWM + 44  # batches kept: more than a client that stops reading is sent
TOKENS = 1000  # ~5 KB a batch (ids above 2**16): the kernel's buffers hold only a few
END = (-1).to_bytes(8, "big", signed=True)
PAST = (10**6).to_bytes(8, "big")  # a start past the end: the answer is the end marker alone


def _stalled_client(ctx: zmq.Context, pub) -> zmq.Socket:
    """A DEALER that asks for the whole ring, then (before reading any) asks again."""
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.RCVHWM, 1)
    s.setsockopt(zmq.RCVBUF, 4096)  # little in the kernel: the replay waits at REPLAY_HWM
    s.setsockopt(zmq.LINGER, 0)
    s.connect(pub.replay_endpoint)
    s.send_multipart([b"", (0).to_bytes(8, "big")])
    s.send_multipart([b"", PAST])  # waits behind the first replay
    return s


def _family(pub, name: str) -> dict:
    return dict({f[0]: f[4] for f in pub.families()}[name])


def test_a_request_waiting_behind_a_cut_replay_is_answered_next():
    pub = publisher(buffer_steps=RING)
    ctx = zmq.Context()
    socks: list[zmq.Socket] = []
    try:
        publish_each(pub, stored(RING, TOKENS))
        socks.append(client := _stalled_client(ctx, pub))
        assert client.poll(int(DEADLINE * 1000))  # the first replay runs (and then waits)
        # the ring moves past what the first replay still had to send
        publish_each(pub, stored(RING, TOKENS))
        seqs, end = [], time.monotonic() + DEADLINE
        while time.monotonic() < end and client.poll(int(1000 * (end - time.monotonic()))):
            msg = client.recv_multipart()
            if msg[2] == END:
                break
            seqs.append(int.from_bytes(msg[2], "big"))
        else:  # before NOTE(pending)'s fix: the cut replay took the waiting request with it
            raise AssertionError(f"no end marker after {len(seqs)} batches of the cut replay")
        assert msg == [b"", b"", END, b""]
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs))) and seqs[-1] < RING + 1
        assert _family(pub, "kvpool_kv_events_replays_cut_total")[()] == 1
        ignored = _family(pub, "kvpool_kv_events_replay_requests_ignored_total")
        assert ignored[("gone",)] == ignored[("stalled",)] == 0  # a ring cut keeps the next
    finally:
        close_all(socks, ctx, pub)


def test_a_waiting_request_whose_client_left_is_counted():
    pub = publisher(buffer_steps=RING)
    ctx = zmq.Context()
    try:
        publish_each(pub, stored(RING, TOKENS))
        client = _stalled_client(ctx, pub)
        assert client.poll(int(DEADLINE * 1000))  # both requests read: the replay runs
        client.close(linger=0)  # its replay is cut at the next send; nobody to answer next
        end = time.monotonic() + DEADLINE
        ignored = "kvpool_kv_events_replay_requests_ignored_total"
        while _family(pub, ignored).get(("gone",), 0) < 1:
            assert time.monotonic() < end, f"not counted: {_family(pub, ignored)}"
            time.sleep(0.01)
        assert _family(pub, "kvpool_kv_events_replays_cut_total")[()] == 1
    finally:
        close_all([], ctx, pub)
