"""What a replica's KV event stream may queue in the router (kvpool/router/kv_endpoints.py
NOTE(rcvhwm)): before, the SUB socket kept ZMQ's default 1000 messages in front of the reader,
and a replica publishing valid 13 MiB batches faster than they were applied grew the router by
gigabytes. Real ZMQ sockets on 127.0.0.1."""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path

import zmq
import zmq.asyncio

from kvpool.router.kv_endpoints import RECV_QUEUE
from kvpool.router.kv_feed import ReplicaFeed
from kvpool.router.replicas import Replica
from tests.router.flood_publisher import BATCHES
from tests.router.test_kv_feed import TOPIC, frames, info_of, pub_feed, stored  # noqa: F401

FLOOD = 20  # seconds the flooding replica may take to bind, be subscribed to and stall


async def _line(proc: asyncio.subprocess.Process) -> int:
    line = await asyncio.wait_for(proc.stdout.readline(), FLOOD)
    assert line, "the flooding replica exited"
    return int(line)


async def test_a_replica_flooding_batches_is_held_back_not_queued_in_the_router():
    ctx = zmq.asyncio.Context()
    feed = ReplicaFeed(Replica("http://127.0.0.1:1"), ctx)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "tests.router.flood_publisher", TOPIC.decode(),
        stdout=asyncio.subprocess.PIPE, cwd=Path(__file__).parents[2])
    try:
        port = await _line(proc)
        feed.connect({"enabled": True, "topic": TOPIC.decode(),
                      "endpoint": f"tcp://127.0.0.1:{port}"}, read=False)  # nobody reads
        sent = await _line(proc)
        # RECV_QUEUE in the router's queue, the rest in the kernel's socket buffers (a few MiB)
        assert RECV_QUEUE < sent < BATCHES
    finally:
        proc.kill()
        await proc.wait()
        feed.close()
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
