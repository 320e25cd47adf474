"""A replica restarted on the same event ports whose new publisher got past the router's
position before the router heard from it (kvpool/router/kv_feed.py NOTE(restart)): the replica's
info names a new publisher ``instance``, and the feed follows it from scratch instead of laying
the new stream over the dead process's blocks. Real ZMQ and HTTP on 127.0.0.1."""

from __future__ import annotations

import aiohttp
import zmq.asyncio
from aiohttp import web

from kvpool.events.wire import AllBlocksCleared
from kvpool.router.kv_feed import KV_EVENTS_PATH, ReplicaFeed
from kvpool.router.replicas import Replica
from tests.events.helpers import publisher
from tests.router.test_kv_feed import frames, info_of, one_batch, stored, until

NEW = 12  # batches the new publisher sends before the router hears from it


def info(pub) -> dict:
    return {**info_of(pub), "instance": pub.instance, "block_size": 4,
            "hash": {"model_id": "m", "algo": "sha256"}}


async def _info_server(current: dict) -> tuple[web.AppRunner, str]:
    async def describe(request: web.Request) -> web.Response:
        return web.json_response(current)

    app = web.Application()
    app.router.add_get(KV_EVENTS_PATH, describe)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


async def test_a_new_publisher_on_the_same_ports_is_followed_from_scratch():
    old = publisher(buffer_steps=64)
    current = info(old)
    runner, url = await _info_server(current)
    ctx = zmq.asyncio.Context()
    feed = ReplicaFeed(Replica(url), ctx)
    new = None
    try:
        await one_batch(old, stored(b"old"))
        feed.connect(dict(current), read=False)
        await feed.on_message(frames(0, AllBlocksCleared()))
        await feed.on_message(frames(2, stored(b"x")))  # a gap: "old" (seq 1) replayed
        assert b"old" in feed.index and feed.expected == 3
        old.close()
        new = publisher(buffer_steps=64, endpoint=current["endpoint"],
                        replay_endpoint=current["replay_endpoint"])
        for i in range(NEW):
            await one_batch(new, stored(b"new%d" % i))
        # what the SUB delivers next is past expected: a gap, filled from the new ring
        await feed.on_message(frames(NEW + 1, stored(b"late")))
        assert b"new%d" % (NEW - 1) in feed.index
        current.update(info(new))  # the replica's info now names its new publisher
        async with aiohttp.ClientSession() as session:
            await feed.refresh(session)
        await until(lambda: b"new0" in feed.index and b"old" not in feed.index,
                    "the new stream alone")
        assert feed.info["instance"] == new.instance
    finally:
        feed.close()
        ctx.destroy(linger=0)
        old.close()
        if new is not None:
            new.close()
        await runner.cleanup()
