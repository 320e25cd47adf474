"""What the router's KV-event tests share: the ``kvpool serve`` flags that publish KV events on
free ports, waiting (bounded) for the router's event-fed index to catch up, and which
replicas' index holds a prompt."""

from __future__ import annotations

import asyncio
import json
import time

from kvpool.core.hashing import BlockHasher

EVENTS = ["--kv-events-config", json.dumps({
    "enable_kv_cache_events": True, "publisher": "zmq", "endpoint": "tcp://127.0.0.1:0",
    "replay_endpoint": "tcp://127.0.0.1:0"})]
DEADLINE = 30.0  # seconds for an event to reach the router on a shared 2-core box


async def until(pred, what):
    end = time.monotonic() + DEADLINE
    while not pred():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        await asyncio.sleep(0.02)


def holder(events, ids):
    """URLs whose index holds the prompt's leading full block."""
    keys = events.keys
    h = BlockHasher(keys.block_size, keys.info["hash"]["model_id"]).hash_blocks(ids)[0]
    return [url for url, f in events.feeds.items() if h in f.index]
