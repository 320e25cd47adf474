"""What a replica's KV event stream may queue in the router (kvpool/router/kv_endpoints.py
NOTE(rcvhwm)): before, the SUB socket kept ZMQ's default 1000 messages in front of the reader,
and a replica publishing valid 13 MiB batches faster than they were applied grew the router by
gigabytes. Real ZMQ sockets on 127.0.0.1."""

from __future__ import annotations

import asyncio
import logging

import zmq
import zmq.asyncio

from kvpool.router.kv_endpoints import RECV_QUEUE
from kvpool.router.kv_feed import ReplicaFeed
from kvpool.router.replicas import Replica
from tests.router.test_kv_feed import TOPIC, frames, info_of, pub_feed, stored  # noqa: F401

BATCHES = 300  # of BATCH_BYTES each: what a flooding replica offers (75 MiB)
BATCH_BYTES = 256 << 10
STALLED = 0.3  # seconds a send may wait before the router counts as taking no more


async def _sent(pub: zmq.Socket, msg: list[bytes]) -> bool:
    """``msg`` sent within STALLED seconds (False: the subscriber took no more)."""
    end = asyncio.get_running_loop().time() + STALLED
    while True:
        try:
            pub.send_multipart(msg, zmq.NOBLOCK)
            return True
        except zmq.Again:
            if asyncio.get_running_loop().time() > end:
                return False
            await asyncio.sleep(0.01)


async def test_a_replica_flooding_batches_is_held_back_not_queued_in_the_router():
    ctx, pub_ctx = zmq.asyncio.Context(), zmq.Context()
    pub = pub_ctx.socket(zmq.XPUB)  # NODROP: a send fails while the subscriber takes no more
    pub.setsockopt(zmq.XPUB_NODROP, 1)
    pub.setsockopt(zmq.SNDHWM, 1)
    feed = ReplicaFeed(Replica("http://127.0.0.1:1"), ctx)
    try:
        port = pub.bind_to_random_port("tcp://127.0.0.1")
        feed.connect({"enabled": True, "topic": TOPIC.decode(),
                      "endpoint": f"tcp://127.0.0.1:{port}"}, read=False)  # nobody reads
        assert pub.poll(10_000) and pub.recv() == b"\x01" + TOPIC  # subscribed
        msg, sent = [TOPIC, b"s" * 8, b"x" * BATCH_BYTES], 0
        while sent < BATCHES and await _sent(pub, msg):
            sent += 1
        # RECV_QUEUE in the router's queue, the rest in the kernel's socket buffers (a few MiB)
        assert RECV_QUEUE < sent < BATCHES
    finally:
        feed.close()
        pub.close(linger=0)
        pub_ctx.destroy(linger=0)
        ctx.destroy(linger=0)


async def test_a_gap_is_counted_and_said_once(pub_feed, caplog):
    pub, feed = pub_feed
    caplog.set_level(logging.WARNING, "kvpool.router")
    feed.connect(info_of(pub), read=False)
    await feed.on_message(frames(0, stored(b"a")))
    await feed.on_message(frames(5, stored(b"b")))  # 1..4 dropped in front of the reader
    await feed.on_message(frames(9, stored(b"c")))
    assert feed.counts["gaps"] == 2 and feed.counts["replays"] >= 2
    said = [m for m in caplog.messages if "were missed" in m]
    assert len(said) == 1 and "http://127.0.0.1:1" in said[0], caplog.messages
