"""Seq 0 (AllBlocksCleared) reaches a subscriber that was there before the publisher started
(kvpool/events/publisher.py NOTE(start-marker)): one that stays connected across a restart
(bind mode) and an indexer whose bound SUB the replica's PUB dials (connect mode). Sent once
at start it went out before any subscription was read, and reached no one. Real ZMQ sockets."""

from __future__ import annotations

import time

import pytest
import zmq

from kvpool.events.wire import AllBlocksCleared
from tests.events.helpers import DEADLINE, plain, publisher


@pytest.fixture
def ctx():
    c = zmq.Context()
    yield c
    c.term()


def _sub(ctx: zmq.Context) -> zmq.Socket:
    s = ctx.socket(zmq.SUB)
    s.setsockopt(zmq.SUBSCRIBE, b"kv")
    s.setsockopt(zmq.LINGER, 0)
    return s


def _next(sub: zmq.Socket) -> tuple[int, list]:
    """The next message's (seq, events), polled (bounded): nothing else touches the publisher,
    so what comes is what it sent by itself."""
    if not sub.poll(int(DEADLINE * 1000)):
        raise AssertionError(f"nothing in {DEADLINE} s: the start marker never came")
    topic, seq, payload = sub.recv_multipart()
    assert topic == b"kv"
    return int.from_bytes(seq, "big"), plain(payload)[1]


def _after_start(sub: zmq.Socket) -> int:
    """The first seq past 0 (seq 0 may come again: NOTE(start-marker))."""
    seq = 0
    while seq == 0:
        seq = _next(sub)[0]
    return seq


def _one_event(pub) -> None:
    """One more batch (seq 1 or later), published (bounded wait)."""
    want, end = pub.next_seq + 1, time.monotonic() + DEADLINE
    pub.submit(AllBlocksCleared())
    while pub.next_seq < want:
        assert time.monotonic() < end, "the publisher thread never sent"
        time.sleep(0.001)


def test_a_subscriber_that_stays_across_a_restart_gets_each_start_marker(ctx, tmp_path):
    endpoint = f"ipc://{tmp_path}/kv"  # ipc binds (NOTE(pub-connect)); the same path again
    sub = _sub(ctx)
    try:
        sub.connect(endpoint)  # before the replica is up: ZMQ redials it
        for start in range(2):
            pub = publisher(endpoint=endpoint, replay_endpoint=None)
            try:
                assert _next(sub) == (0, [{"type": "AllBlocksCleared"}]), f"start {start}"
                _one_event(pub)
                assert _after_start(sub) == 1  # the stream goes on from the marker
            finally:
                pub.close()
    finally:
        sub.close(linger=0)


def test_an_indexer_that_binds_gets_the_start_marker_of_each_replica_start(ctx):
    sub = _sub(ctx)
    try:
        endpoint = f"tcp://127.0.0.1:{sub.bind_to_random_port('tcp://127.0.0.1')}"
        for start in range(2):  # llm-d's precise setup: no replay socket, the PUB dials
            pub = publisher(endpoint=endpoint, replay_endpoint=None)
            try:
                assert pub.mode == "connect"
                assert _next(sub) == (0, [{"type": "AllBlocksCleared"}]), f"start {start}"
            finally:
                pub.close()
    finally:
        sub.close(linger=0)


def test_a_subscriber_that_joins_after_real_batches_gets_no_start_marker(ctx):
    """Once a batch followed seq 0, a new subscriber sees a gap (and replays from 0)."""
    pub = publisher(replay_endpoint=None)
    first, late = _sub(ctx), _sub(ctx)
    try:
        first.connect(pub.endpoint)
        assert _next(first) == (0, [{"type": "AllBlocksCleared"}])
        _one_event(pub)
        late.connect(pub.endpoint)
        end = time.monotonic() + DEADLINE
        while not late.poll(50):  # slow joiner: publish until its subscription is read
            assert time.monotonic() < end, "the late subscriber got nothing"
            _one_event(pub)
        assert int.from_bytes(late.recv_multipart()[1], "big") >= 2
    finally:
        first.close(linger=0)
        late.close(linger=0)
        pub.close()
