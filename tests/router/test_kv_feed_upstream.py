"""ReplicaFeed fed batches shaped exactly as vLLM 0.33 publishes them (every field it declares,
int and bytes block hashes, its replay layout), encoded here from plain values, and hostile
messages and replay answers: a test PUB and ROUTER on 127.0.0.1 (kvpool/router/kv_feed.py)."""

from __future__ import annotations

import asyncio
import time

import msgspec
import pytest
import zmq
import zmq.asyncio

from kvpool.router.kv_feed import ReplicaFeed
from kvpool.router.replicas import Replica
from tests.events.helpers import DEADLINE

TOPIC = b"kv@pod-a@m"
END = b"\xff" * 8
INT_HASHES = [(1 << 64) - 1, 1 << 63, 12345]  # VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=1 (default)
BYTE_HASHES = [bytes([i]) * 32 for i in (1, 2)]  # ... and =0


def stored(hashes, parent=None, medium="GPU", **newer):
    """A BlockStored as vLLM 0.33 writes it: required fields, then the newer optional ones."""
    ev = {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent,
          "token_ids": list(range(4 * len(hashes))), "block_size": 4, "lora_id": None,
          "medium": medium, "lora_name": None}
    return ev | newer


NEWER = {"extra_keys": [None, ["lora-a"], [["mm-1", 0], "salt"]], "group_idx": 0,
         "kv_cache_spec_kind": "full_attention", "kv_cache_spec_sliding_window": 128,
         "locality": "LOCAL", "ownership": "offload-tier", "session_id": "s-1",
         "lookahead_token_ids": [[1], [2], [3]]}
REMOVED = {"type": "BlockRemoved", "block_hashes": [12345], "medium": "GPU", "group_idx": 0,
           "locality": "LOCAL", "ownership": "offload-tier"}


def payload(*events) -> bytes:
    return msgspec.msgpack.encode([time.time(), list(events), 0])


def msg(seq: int, *events, topic: bytes = TOPIC) -> list[bytes]:
    return [topic, seq.to_bytes(8, "big"), payload(*events)]


def nested(depth: int) -> bytes:
    """A batch whose one BlockStored's extra_keys is ``depth`` lists deep (~``depth`` bytes:
    one msgpack byte a level), each list legal as vLLM's extra keys are any list."""
    mark = "NEST-HERE"
    raw = payload(stored([9], extra_keys=mark))
    return raw.replace(msgspec.msgpack.encode(mark), b"\x91" * depth + b"\xc0")


class Upstream:
    """A PUB and a ROUTER answering replays in vLLM 0.33's layout from ``sent``, or with
    ``answer(client, start)`` where a test wants a hostile one."""

    def __init__(self, ctx: zmq.asyncio.Context, answer=None) -> None:
        self.pub, self.router = ctx.socket(zmq.PUB), ctx.socket(zmq.ROUTER)
        self.sent: list[list[bytes]] = []
        self.answer = answer or self.vllm_answer
        ports = [s.bind_to_random_port("tcp://127.0.0.1") for s in (self.pub, self.router)]
        self.info = {"enabled": True, "topic": TOPIC.decode(),
                     "endpoint": f"tcp://127.0.0.1:{ports[0]}",
                     "replay_endpoint": f"tcp://127.0.0.1:{ports[1]}"}
        self.task = asyncio.create_task(self.serve())

    async def serve(self) -> None:
        while True:
            client, _, start = await self.router.recv_multipart()
            await self.answer(client, int.from_bytes(start, "big"))

    async def vllm_answer(self, client: bytes, start: int) -> None:
        for m in self.sent[start:]:
            await self.router.send_multipart([client, b"", *m])
        await self.router.send_multipart([client, b"", b"", END, b""])

    async def publish(self, *events) -> None:
        self.sent.append(msg(len(self.sent), *events))
        await self.pub.send_multipart(self.sent[-1])

    def close(self) -> None:
        self.task.cancel()
        self.pub.close(linger=0)
        self.router.close(linger=0)


@pytest.fixture
async def upstream():
    ctx = zmq.asyncio.Context()
    feed = ReplicaFeed(Replica("http://127.0.0.1:1"), ctx)
    made: list[Upstream] = []

    def make(answer=None) -> Upstream:
        made.append(Upstream(ctx, answer))
        return made[-1]
    yield feed, make
    feed.close()
    for u in made:
        u.close()
    ctx.destroy(linger=0)


async def until(pred, what, tick=None):
    end = time.monotonic() + DEADLINE
    while not pred():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        if tick is not None:
            await tick()
        await asyncio.sleep(0.02)


async def test_vllm_shaped_events_enter_the_index_none_dropped(upstream):
    feed, make = upstream
    up = make()
    await up.publish({"type": "AllBlocksCleared"})
    await up.publish(stored(INT_HASHES, **NEWER), stored(BYTE_HASHES, parent=b"\x00" * 32),
                     stored([7], medium="CPU"), stored([8], medium="STORAGE", locality="REMOTE"))
    feed.connect(up.info)  # its reader: replay from 0, then the live stream
    await until(lambda: feed.live, "the replay")
    await up.publish(REMOVED)
    # a live batch may go before the SUB's subscription arrived: the next one is a gap,
    # filled from the replay socket, so empty batches go out until the removal is applied
    await until(lambda: 12345 not in feed.index, "the removal", lambda: up.publish())
    assert all(h in feed.index for h in INT_HASHES[:2] + BYTE_HASHES)
    assert 7 not in feed.index and 8 not in feed.index  # only the device pool is scored
    assert feed.counts["malformed"] == 0 and feed.counts["lost"] == 0
    assert feed.counts["restarts"] == 0 and feed.counts["applied"] >= 3


async def test_hostile_live_messages_are_malformed_and_the_feed_goes_on(upstream):
    feed, make = upstream
    up = make()
    feed.connect(up.info, read=False)
    await feed.on_message(msg(0, stored(BYTE_HASHES)))
    bad = [msg(1, {"type": "BlockUpdated", "block_hashes": [9]}),  # a tag vLLM may add
           msg(2, {k: v for k, v in stored([9]).items() if k != "lora_name"}),  # field missing
           [TOPIC, b"\x00" * 7, payload()],  # a seq frame of 7 bytes
           [TOPIC, (1 << 63).to_bytes(8, "big"), payload()],  # a seq no publisher reaches
           [TOPIC, (3).to_bytes(8, "big"), msgspec.msgpack.encode({"ts": 1.0, "events": []})]]
    bad += [[TOPIC, (4).to_bytes(8, "big"), nested(5000)],  # past the decoder's recursion
            msg(5, stored([b"\x07" * 65]))]  # a "hash" no digest is: NOTE(hash-size)
    for m in bad:
        await feed.on_message(m)
        assert not any(h in feed.index for h in BYTE_HASHES)  # forgotten, never trusted
    assert feed.counts["malformed"] == len(bad) and feed.expected == 6
    await feed.on_message(msg(6, stored([5], extra_keys=[[[["deep"]]]])))  # nesting is legal
    assert 5 in feed.index and feed.expected == 7 and feed.counts["restarts"] == 0


async def _hostile_answer(router, client: bytes, start: int) -> None:
    """Frames the feed must not take, then one good batch and the end marker."""
    good = msg(2, stored([2]))
    for frames in ([b"other", *good[1:]],  # another topic
                   [TOPIC, b"\x02", good[2]],  # a short seq
                   [TOPIC, (start - 1).to_bytes(8, "big"), payload(stored([66]))]):  # < start
        await router.send_multipart([client, b"", *frames])
    await router.send_multipart([client, b"", *good])
    await router.send_multipart([client, b"", b"", END, b""])


async def test_replay_answers_it_cannot_use_are_skipped(upstream):
    feed, make = upstream
    up = make(lambda client, start: _hostile_answer(up.router, client, start))
    feed.connect(up.info, read=False)
    await feed.on_message(msg(0, stored([0])))
    await feed.on_message(msg(3, stored([3])))  # a gap: replay from 1
    assert feed.counts["replays"] == 1 and feed.counts["lost"] == 1  # 1 never came
    assert 2 in feed.index and 3 in feed.index and 66 not in feed.index
    assert 0 not in feed.index and feed.expected == 4 and feed.counts["malformed"] == 0


@pytest.mark.parametrize("answer", ["old-layout", "garbage", "silent"])
async def test_a_replay_answer_of_the_wrong_shape_clears_the_index(upstream, answer):
    feed, make = upstream

    async def reply(client: bytes, start: int) -> None:
        if answer == "old-layout":  # vLLM before 0.26: no topic frame, end [-1, b""]
            await up.router.send_multipart([client, b"", *msg(1, stored([1]))[1:]])
            await up.router.send_multipart([client, b"", END, b""])
        elif answer == "garbage":
            await up.router.send_multipart([client, b"", TOPIC, (1).to_bytes(8, "big"),
                                            b"\xc1junk"])
            await up.router.send_multipart([client, b"", b"", END, b""])
    up = make(reply)
    feed.connect(up.info, read=False)
    await feed.on_message(msg(0, stored([0])))
    await feed.on_message(msg(2, stored([2])))  # a gap: replay from 1
    assert 0 not in feed.index and 2 in feed.index and feed.expected == 3
    assert feed.counts["lost"] + feed.counts["malformed"] >= 1
