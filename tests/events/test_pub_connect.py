"""The PUB socket binds or connects by vLLM's rule (publisher.py NOTE(pub-connect)): an indexer
that binds its own SUB (llm-d's precise prefix-cache setup) gets a replica's events when the
replica is pointed at the indexer's address; a wildcard host (or port 0) binds as before."""

from __future__ import annotations

import json
import time

import aiohttp
import pytest
import zmq

from kvpool.core.hashing import BlockHasher
from kvpool.events.publisher import binds
from kvpool.events.wire import AllBlocksCleared
from stress.http.servers import SpawnedServer
from tests.events.helpers import DEADLINE, Sub, plain, publisher
from tests.events.test_serve_events import ARGS


@pytest.fixture
def indexer():
    """A SUB bound on 127.0.0.1 (the indexer's side); yields (socket, its endpoint)."""
    ctx = zmq.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    port = sub.bind_to_random_port("tcp://127.0.0.1")
    yield sub, f"tcp://127.0.0.1:{port}"
    sub.close(linger=0)
    ctx.term()


def first_message(sub: zmq.Socket, nudge=None) -> list[bytes]:
    """The first message the SUB gets (bounded); ``nudge()`` between polls: a PUB that
    connects drops what it sends before the connection is up (ZMQ's slow joiner)."""
    end = time.monotonic() + DEADLINE
    while time.monotonic() < end:
        if sub.poll(50):
            return sub.recv_multipart()
        if nudge is not None:
            nudge()
    raise AssertionError(f"the indexer got nothing in {DEADLINE} s")


@pytest.mark.parametrize("endpoint, bound", [
    ("tcp://*:5557", True), ("tcp://[::]:5557", True), ("tcp://127.0.0.1:0", True),
    ("tcp://127.0.0.1:5557", False), ("tcp://epp-svc:5557", False),
    ("tcp://10.0.0.1:5557", False), ("ipc:///tmp/kv-events", True),
])
def test_bind_rule(endpoint, bound):
    assert binds(endpoint) is bound


def test_a_non_wildcard_endpoint_connects_to_the_indexer(indexer):
    sub, endpoint = indexer
    pub = publisher(endpoint=endpoint)  # before NOTE(pub-connect): "cannot bind" (in use)
    try:
        assert pub.mode == "connect" and pub.endpoint == endpoint
        msg = first_message(sub, lambda: pub.submit(AllBlocksCleared()))
    finally:
        pub.close()
    topic, seq, payload = msg
    assert topic == b"kv" and len(seq) == 8
    assert plain(payload)[1] == [{"type": "AllBlocksCleared"}]


def test_port_0_still_binds():
    pub = publisher()
    sub = Sub(pub)
    try:
        assert pub.mode == "bind" and not pub.endpoint.endswith(":0")
        msg = first_message(sub.sub, lambda: pub.submit(AllBlocksCleared()))
        assert plain(msg[2])[1] == [{"type": "AllBlocksCleared"}]
    finally:
        sub.close()
        pub.close()


async def prompts_until_stored(s, url, sub) -> tuple[list[list[int]], list[bytes]]:
    """New 3-block prompts until the indexer gets a BlockStored (bounded): until the indexer's
    SUB is touched its subscription has not reached the replica, which sends to no one then
    (ZMQ's slow joiner). (the prompts sent, the block hashes stored)."""
    sent: list[list[int]] = []
    end = time.monotonic() + DEADLINE
    while time.monotonic() < end:
        sent.append([len(sent) + 7 * i % 300 for i in range(50)])  # 3 full blocks
        async with s.post(url + "/v1/completions", json={
                "prompt": sent[-1], "max_tokens": 1, "temperature": 0}) as r:
            assert r.status == 200, await r.text()
        while sub.poll(200):
            events = plain(sub.recv_multipart()[2])[1]
            stored = [h for e in events if e["type"] == "BlockStored" for h in e["block_hashes"]]
            if stored:
                return sent, stored
    raise AssertionError(f"the indexer got no BlockStored in {DEADLINE} s")


async def test_a_replica_pointed_at_an_indexer_publishes_to_it(indexer):
    sub, endpoint = indexer
    cfg = json.dumps({"enable_kv_cache_events": True, "publisher": "zmq",
                      "endpoint": endpoint, "replay_endpoint": "tcp://127.0.0.1:0"})
    srv = SpawnedServer([*ARGS, "--kv-events-config", cfg], startup_timeout=120)
    url = srv.start()
    try:
        async with aiohttp.ClientSession() as s:
            async with s.get(url + "/v1/kvpool/kv_events") as r:
                info = await r.json()
            async with s.get(url + "/kv_event_sources") as r:  # vLLM's route
                source = (await r.json())["0"]
            sent, stored = await prompts_until_stored(s, url, sub)
    finally:
        srv.stop(timeout=20)
    assert info["endpoint"] is None and info["endpoint_mode"] == "connect"
    assert info["connects_to"] == endpoint and info["replay_endpoint"].startswith("tcp://")
    # vLLM's route names the address the PUB dials, as vLLM's publisher config does
    assert (source["endpoint"], source["replay_endpoint"]) == (endpoint, info["replay_endpoint"])
    h = info["hash"]
    hasher = BlockHasher(info["block_size"], h["model_id"], h["algo"])
    assert stored[:3] in [hasher.hash_blocks(ids) for ids in sent]
