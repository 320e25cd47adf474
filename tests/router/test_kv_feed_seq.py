"""ReplicaFeed's sequence rule as properties (kv_feed.py NOTE(restart)): a publisher's stream
with drops never looks like a restart, and a new publisher's stream is applied whatever came
before it (a dead process's batches, wild sequence numbers), never skipped as duplicates."""

from __future__ import annotations

import pytest
import zmq
import zmq.asyncio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvpool.events.wire import END_SEQ, AllBlocksCleared, decode_seq, encode_seq
from kvpool.router.kv_feed import ReplicaFeed
from kvpool.router.replicas import Replica
from tests.events.helpers import DEADLINE, publisher
from tests.router.test_kv_feed import TOPIC, frames, info_of, one_batch, stored

N = 12  # batches the publisher holds: seq 0 (AllBlocksCleared) and 1..11 (stored b"s<seq>")
SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])


def ring_of(pub) -> list[list[bytes]]:
    """The publisher's batches exactly as it sent them, asked for on its replay socket."""
    ctx = zmq.Context()
    dealer = ctx.socket(zmq.DEALER)
    try:
        dealer.connect(pub.replay_endpoint)
        dealer.send_multipart((b"", encode_seq(0)))
        out = []
        while dealer.poll(int(DEADLINE * 1000)):
            _, topic, seq, payload = dealer.recv_multipart()
            if seq == END_SEQ:
                return out
            out.append([topic, seq, payload])
        raise AssertionError("no end of the replay")
    finally:
        ctx.destroy(linger=0)


@pytest.fixture
async def ring():
    pub = publisher(buffer_steps=64)
    try:
        for i in range(1, N):
            await one_batch(pub, stored(b"s%d" % i))
        got = ring_of(pub)
        assert [decode_seq(f[1]) for f in got] == list(range(N))
        yield pub, got
    finally:
        pub.close()


@SETTINGS
@given(arrived=st.lists(st.booleans(), min_size=N, max_size=N))
async def test_a_stream_with_drops_is_gaps_and_duplicates_never_a_restart(ring, arrived):
    pub, sent = ring
    arrived[-1] = True  # the last batch reaches us (else nothing says what we missed)
    ctx = zmq.asyncio.Context()
    feed = ReplicaFeed(Replica("http://127.0.0.1:1"), ctx)
    try:
        feed.connect(info_of(pub), read=False)
        for msg, came in zip(sent, arrived, strict=True):
            if came:
                await feed.on_message(list(msg))
        assert feed.counts["restarts"] == 0 and feed.counts["lost"] == 0
        assert feed.expected == N and all(b"s%d" % i in feed.index for i in range(1, N))
        gap = next((i for i, came in enumerate(arrived) if came and not all(arrived[:i])), N)
        assert feed.counts["duplicates"] == sum(arrived[gap + 1:])  # what the replay gave
    finally:
        feed.close()
        ctx.destroy(linger=0)


@pytest.fixture
def raw_pub():
    """A bare PUB socket: the feed connects to it; messages are handed to on_message."""
    ctx = zmq.Context()
    sock = ctx.socket(zmq.PUB)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    yield {"enabled": True, "endpoint": f"tcp://127.0.0.1:{port}", "topic": TOPIC.decode()}
    ctx.destroy(linger=0)


SEQS = st.integers(min_value=0, max_value=(1 << 63) - 1)


@SETTINGS
@given(before=st.lists(st.one_of(SEQS, st.integers(0, 40)), max_size=8),
       first=st.integers(0, 30), more=st.integers(0, 8))
async def test_a_new_publishers_stream_is_applied_whatever_came_before(raw_pub, before, first,
                                                                        more):
    ctx = zmq.asyncio.Context()
    feed = ReplicaFeed(Replica("http://127.0.0.1:1"), ctx)
    try:
        feed.connect(raw_pub, read=False)  # no replay socket: start from what comes
        for seq in before:  # a dead process's batches, wild ones among them
            await feed.on_message(frames(seq, stored(b"dead")))
        for seq in range(first, first + more + 1):  # the new one; what was before `first` missed
            await feed.on_message(frames(seq, AllBlocksCleared() if seq == 0 else
                                         stored(b"new%d" % seq)))
        assert feed.counts["duplicates"] == 0 and feed.expected == first + more + 1
        assert all(b"new%d" % s in feed.index for s in range(max(first, 1), first + more + 1))
    finally:
        feed.close()
        ctx.destroy(linger=0)
