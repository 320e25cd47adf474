"""Replay places are taken in turn (kvpool/events/replay.py NOTE(fair-turns)): clients that
never read and keep asking cannot hold every place, requests past the cap wait in arrival
order, and past the line's cap they are ignored and counted. The numbers are scaled down
through ReplayServer's parameters; real ZMQ sockets on 127.0.0.1."""

from __future__ import annotations

import time
from collections import deque

import zmq

from kvpool.events.replay import REPLAY_HWM, REPLAY_SNDBUF, ReplayServer
from tests.events.helpers import DEADLINE, close_all

RING = REPLAY_HWM + 44  # batches kept: more than a client that stops reading is sent
BATCH = bytes(5000)  # a payload: the kernel's buffers hold only a few
STALL = 0.2  # seconds a client may read nothing (the product's is 10)
ASK = [b"", (0).to_bytes(8, "big")]
END = (-1).to_bytes(8, "big", signed=True)


def _server(ctx: zmq.Context, **caps) -> tuple[ReplayServer, str]:
    """A ReplayServer on a ROUTER set up as the publisher's (kvpool/events/publisher.py)."""
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.SNDHWM, REPLAY_HWM)
    sock.setsockopt(zmq.SNDBUF, REPLAY_SNDBUF)
    sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
    sock.setsockopt(zmq.LINGER, 0)
    sock.bind("tcp://127.0.0.1:0")
    ring = deque((seq, BATCH) for seq in range(RING))
    server = ReplayServer(sock, ring, b"kv", stall=STALL, **caps)
    return server, sock.getsockopt_string(zmq.LAST_ENDPOINT)


def _client(ctx: zmq.Context, endpoint: str, reads: bool) -> zmq.Socket:
    s = ctx.socket(zmq.DEALER)
    s.setsockopt(zmq.LINGER, 0)
    if not reads:  # little queued on its side: its replay waits at REPLAY_HWM, then stalls
        s.setsockopt(zmq.RCVHWM, 1)
        s.setsockopt(zmq.RCVBUF, 4096)
    s.connect(endpoint)
    return s


def _serve_until(server: ReplayServer, done, what: str) -> None:
    end = time.monotonic() + DEADLINE
    while not done():
        assert time.monotonic() < end, what
        server.serve(RING)
        time.sleep(0.001)


def _read(sock: zmq.Socket, into: list) -> bool:
    """What ``sock`` has now into ``into``; True once it holds an end marker."""
    while sock.poll(0):
        into.append(sock.recv_multipart())
    return any(m[2] == END for m in into)


def test_clients_that_never_read_and_keep_asking_cannot_hold_every_place():
    ctx = zmq.Context()
    server, endpoint = _server(ctx, max_open=2)
    silent = [_client(ctx, endpoint, reads=False) for _ in range(2)]
    reader = _client(ctx, endpoint, reads=True)
    try:
        for s in silent:
            s.send_multipart(ASK)
        _serve_until(server, lambda: all(s.poll(0) for s in silent), "the replays never ran")
        got: list[list[bytes]] = []
        asked, end = 0.0, time.monotonic() + DEADLINE
        while not _read(reader, got):
            now = time.monotonic()
            assert now < end, f"the reader got {len(got)} answers; cut {server.cut}, ignored " \
                f"full {server.refused}"  # before NOTE(fair-turns): the silent kept both places
            if now - asked > STALL / 4:  # the silent ask all the time, the reader until answered
                for s in silent:
                    s.send_multipart(ASK)
                if not got:
                    reader.send_multipart(ASK)
                asked = now
            server.serve(RING)
            time.sleep(0.001)
        seqs = [int.from_bytes(m[2], "big") for m in got[:got.index([b"", b"", END, b""])]]
        assert seqs == list(range(RING))  # the whole replay, in order
        assert server.cut >= 2 and server.stalled >= 2 and server.refused == 0
    finally:
        close_all([*silent, reader, server.sock], ctx)


def test_waiting_requests_are_served_in_arrival_order_and_the_line_is_bounded():
    ctx = zmq.Context()
    server, endpoint = _server(ctx, max_open=1, max_waiting=2)
    silent = _client(ctx, endpoint, reads=False)
    readers = [_client(ctx, endpoint, reads=True) for _ in range(3)]
    try:
        silent.send_multipart(ASK)
        _serve_until(server, lambda: silent.poll(0), "the first replay never ran")
        for n, r in enumerate(readers[:2], 1):  # one at a time: their order is known
            r.send_multipart(ASK)
            _serve_until(server, lambda n=n: server.waiting == n, "a request did not wait")
        readers[2].send_multipart(ASK)
        _serve_until(server, lambda: server.refused == 1, "the third was not refused")
        first, second, first_done = [], [], False
        end = time.monotonic() + DEADLINE
        while not _read(readers[1], second):
            assert time.monotonic() < end, f"answers: {len(first)}, {len(second)}"
            while second and not first_done:  # 1's end marker went out before 2's first batch
                assert readers[0].poll(int(DEADLINE * 1000)), "the second was served first"
                first_done = _read(readers[0], first)
            first_done = first_done or _read(readers[0], first)
            server.serve(RING)
            time.sleep(0.001)
        assert first[-1] == second[-1] == [b"", b"", END, b""]
        assert len(first) == len(second) == RING + 1  # each its whole replay, in turn
        assert not readers[2].poll(0) and server.cut == 1 and server.refused == 1
    finally:
        close_all([silent, *readers, server.sock], ctx)
