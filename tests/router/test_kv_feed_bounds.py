"""What one replica's KV events may cost the router (kvpool/router/kv_feed.py NOTE(slices)): a
large batch is applied in slices with the event loop free between them, and a replay that
sends more than the feed keeps is dropped, not held. Real ZMQ sockets on 127.0.0.1."""

from __future__ import annotations

import asyncio

import zmq
import zmq.asyncio

from kvpool.events.wire import END_SEQ, encode_seq
from kvpool.router.kv_feed import APPLY_SLICE, ReplicaFeed
from kvpool.router.replicas import Replica
from tests.router.test_kv_feed import TOPIC, frames, info_of, pub_feed, stored  # noqa: F401

BIG = 8 * APPLY_SLICE  # hashes in one batch
REPLAY_CAP = 1 << 20  # the hostile replay test's bound, bytes
HOSTILE_BATCHES = 8  # of ~256 KiB each: twice the bound


async def test_a_large_batch_leaves_the_loop_free_while_it_is_applied(pub_feed):
    pub, feed = pub_feed
    feed.connect(info_of(pub), read=False)
    hashes = [i.to_bytes(32, "big") for i in range(BIG)]
    seen: list[int] = []
    done = asyncio.Event()

    async def other_requests() -> None:  # what the loop runs meanwhile sees the index grow
        while not done.is_set():
            seen.append(len(feed.index))
            await asyncio.sleep(0)

    ticker = asyncio.create_task(other_requests())
    await asyncio.sleep(0)
    await feed.on_message(frames(0, stored(*hashes)))
    done.set()
    await ticker
    assert all(h in feed.index for h in (hashes[0], hashes[-1])) and len(feed.index) == BIG
    partial = [n for n in seen if 0 < n < BIG]
    assert len(partial) >= BIG // APPLY_SLICE - 2, seen[:20]


async def _hostile_replay(router: zmq.asyncio.Socket) -> None:
    """Answer one replay request with HOSTILE_BATCHES batches of ~256 KiB, then the end."""
    client, *_ = await router.recv_multipart()
    for i in range(HOSTILE_BATCHES):
        evil = [(i * 8192 + k).to_bytes(32, "big") for k in range(7700)]
        await router.send_multipart([client, b"", TOPIC, encode_seq(i),
                                     frames(i, stored(*evil))[2]])
    await router.send_multipart([client, b"", b"", END_SEQ, b""])


async def test_a_replay_past_the_bound_is_dropped_and_the_index_cleared():
    ctx = zmq.asyncio.Context()
    pub, router = ctx.socket(zmq.PUB), ctx.socket(zmq.ROUTER)
    feed = ReplicaFeed(Replica("http://127.0.0.1:1"), ctx, max_replay_bytes=REPLAY_CAP)
    try:
        info = {"enabled": True, "topic": TOPIC.decode(),
                "endpoint": f"tcp://127.0.0.1:{pub.bind_to_random_port('tcp://127.0.0.1')}",
                "replay_endpoint":
                    f"tcp://127.0.0.1:{router.bind_to_random_port('tcp://127.0.0.1')}"}
        feed.connect(info, read=False)
        server = asyncio.create_task(_hostile_replay(router))
        await feed.on_message(frames(3, stored(b"live")))  # a gap: replay from 0
        await asyncio.wait_for(server, 10)
        assert feed.counts["replays"] == 1 and feed.counts["lost"] == 1
        assert len(feed.index) == 1 and b"live" in feed.index  # nothing of the replay kept
        assert feed.expected == 4
    finally:
        feed.close()
        pub.close(linger=0)
        router.close(linger=0)
        ctx.destroy(linger=0)
