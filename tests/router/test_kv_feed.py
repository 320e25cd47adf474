"""ReplicaFeed against a real EventPublisher on 127.0.0.1: replay after a gap, restarts,
hostile messages, a reconnect that learns what it missed."""

from __future__ import annotations

import asyncio
import time

import pytest
import zmq
import zmq.asyncio

from kvpool.events.wire import (AllBlocksCleared, BlockRemoved, BlockStored, KVEventBatch,
                                encode_seq, new_encoder)
from kvpool.router.kv_feed import ReplicaFeed, reachable
from kvpool.router.replicas import Replica
from tests.events.helpers import DEADLINE, publisher

TOPIC = b"kv"


def stored(*hs, medium="GPU"):
    return BlockStored(list(hs), None, [], 4, None, medium, None)


def frames(seq, *events, topic=TOPIC):
    return [topic, encode_seq(seq), new_encoder().encode(KVEventBatch(time.time(),
                                                                      list(events), 0))]


def info_of(pub):
    return {"enabled": True, "endpoint": pub.endpoint, "replay_endpoint": pub.replay_endpoint,
            "topic": TOPIC.decode()}


async def until(pred, what):
    end = time.monotonic() + DEADLINE
    while not pred():
        assert time.monotonic() < end, f"timed out waiting for {what}"
        await asyncio.sleep(0.01)


async def one_batch(pub, *events):
    """Publish ``events`` as one batch of their own (the start's batch went out first)."""
    await until(lambda: pub.next_seq >= 1, "the first batch")
    n = pub.next_seq
    for e in events:
        pub.submit(e)
    await until(lambda: pub.next_seq > n, f"batch {n}")


@pytest.fixture
async def pub_feed():
    pub = publisher(buffer_steps=64)
    ctx = zmq.asyncio.Context()
    feed = ReplicaFeed(Replica("http://127.0.0.1:1"), ctx)
    yield pub, feed
    feed.close()
    ctx.destroy(linger=0)
    pub.close()


def test_a_wildcard_endpoint_means_the_replicas_host():
    assert reachable("tcp://0.0.0.0:5557", "http://10.1.2.3:8000") == "tcp://10.1.2.3:5557"
    assert reachable("tcp://*:5557", "http://h:8000") == "tcp://h:5557"
    assert reachable("tcp://127.0.0.1:9", "http://h:8000") == "tcp://127.0.0.1:9"


async def test_a_gap_is_filled_from_the_replay_socket(pub_feed):
    pub, feed = pub_feed
    for h in (b"a", b"b", b"c"):
        await one_batch(pub, stored(h))
    feed.connect(info_of(pub), read=False)
    await feed.on_message(frames(0, AllBlocksCleared()))
    await feed.on_message(frames(3, stored(b"c")))  # 1 and 2 never arrived here
    assert all(h in feed.index for h in (b"a", b"b", b"c"))
    assert feed.counts["gaps"] == 1 and feed.counts["lost"] == 0 and feed.expected == 4


async def test_a_gap_the_ring_no_longer_holds_clears_the_index():
    pub = publisher(buffer_steps=1)
    ctx = zmq.asyncio.Context()
    feed = ReplicaFeed(Replica("http://127.0.0.1:1"), ctx)
    try:
        for i in range(3):
            await one_batch(pub, stored(bytes([i])))
        feed.connect(info_of(pub), read=False)
        await feed.on_message(frames(0, stored(b"stale")))
        await feed.on_message(frames(3, stored(b"\x02")))  # 1 and 2 left the ring
        assert feed.counts["lost"] == 1 and b"stale" not in feed.index
        assert b"\x02" in feed.index and feed.expected == 4
    finally:
        feed.close()
        ctx.destroy(linger=0)
        pub.close()


async def test_hostile_messages_are_counted_and_the_feed_goes_on(pub_feed):
    pub, feed = pub_feed
    feed.connect(info_of(pub), read=False)
    await feed.on_message(frames(0, stored(b"x")))
    await feed.on_message(frames(1, stored(b"evil"), topic=b"kv-other"))  # prefix-matching topic
    assert b"evil" not in feed.index and feed.counts["wrong_topic"] == 1
    await feed.on_message([TOPIC, b"\x00"])  # wrong frame count
    await feed.on_message([TOPIC, encode_seq(1), b"\xc1garbage"])  # not msgpack
    await feed.on_message([TOPIC, encode_seq(2), b"\x93\x01\x02\x03"])  # wrong shape
    assert feed.counts["malformed"] == 3 and b"x" not in feed.index  # forgotten, not trusted
    await feed.on_message(frames(3, stored(b"y")))
    assert b"y" in feed.index and feed.expected == 4


async def test_a_restarted_publisher_starts_the_index_over(pub_feed):
    pub, feed = pub_feed
    feed.connect(info_of(pub), read=False)
    await feed.on_message(frames(0, AllBlocksCleared(), stored(b"old")))
    await feed.on_message(frames(1, stored(b"old2")))
    await feed.on_message(frames(0, AllBlocksCleared(), stored(b"new")))  # seq 0 again
    assert feed.counts["restarts"] == 1 and feed.expected == 1
    assert b"new" in feed.index and b"old" not in feed.index and b"old2" not in feed.index
    await feed.on_message(frames(1, BlockRemoved([b"new"], "GPU"), stored(b"h", medium="CPU")))
    assert len(feed.index) == 0  # removed; host blocks are not scored


async def test_a_restart_whose_seq_0_we_missed_starts_over_from_the_replay(pub_feed):
    pub, feed = pub_feed  # the restarted replica's publisher: its ring holds 0, 1, 2
    for h in (b"new1", b"new2"):
        await one_batch(pub, stored(h))
    feed.connect(info_of(pub), read=False)
    for seq in range(6):  # what the dead process sent
        await feed.on_message(frames(seq, stored(b"old%d" % seq)))
    await feed.on_message(frames(2, stored(b"new2")))  # its seq 0 and 1 went out before we came
    assert feed.counts["restarts"] == 1 and feed.counts["duplicates"] == 0
    assert not any(b"old%d" % i in feed.index for i in range(6))
    assert b"new1" in feed.index and b"new2" in feed.index and feed.expected == 3
    await one_batch(pub, stored(b"new3"))
    await feed.on_message(frames(3, stored(b"new3")))
    assert b"new3" in feed.index and feed.expected == 4


async def test_one_wild_seq_does_not_make_the_batches_after_it_duplicates(pub_feed):
    pub, feed = pub_feed
    await one_batch(pub, stored(b"a"))
    feed.connect(info_of(pub), read=False)
    await feed.on_message(frames(0, AllBlocksCleared()))
    await feed.on_message(frames(1, stored(b"a")))
    await feed.on_message(frames(1 << 62, stored(b"wild")))  # a gap: nothing to replay
    await feed.on_message([TOPIC, b"\xff" * 8, frames(0, stored(b"neg"))[2]])  # seq -1
    assert feed.counts["gaps"] == 1 and feed.counts["malformed"] == 1
    await one_batch(pub, stored(b"b"))
    await feed.on_message(frames(2, stored(b"b")))  # the real stream goes on
    assert feed.counts["restarts"] == 1 and feed.counts["duplicates"] == 0
    assert b"a" in feed.index and b"b" in feed.index and b"wild" not in feed.index
    await one_batch(pub, AllBlocksCleared())
    await feed.on_message(frames(3, AllBlocksCleared()))
    assert len(feed.index) == 0 and feed.expected == 4


async def test_a_dropped_subscription_reconnects_and_learns_what_it_missed(pub_feed):
    pub, feed = pub_feed
    feed.connect(info_of(pub))  # the reader: replay from 0, then the live stream
    await until(lambda: feed.live, "caught up")
    pub.submit(stored(b"live"))
    await until(lambda: b"live" in feed.index, "a live event applied")
    feed.close()  # the connection drops; the replica goes on storing
    await one_batch(pub, stored(b"missed"))
    feed.connect(info_of(pub))
    await until(lambda: b"missed" in feed.index and b"live" in feed.index, "replayed")


async def test_an_oversized_batch_is_refused_by_zmq_and_what_follows_is_a_gap(pub_feed):
    from kvpool.router.kv_feed import MAX_MESSAGE
    pub, feed = pub_feed
    feed.connect(info_of(pub))
    await until(lambda: feed.live, "caught up")
    huge = [i.to_bytes(32, "big") for i in range(MAX_MESSAGE // 32 + 1)]  # past the bound
    pub.submit(stored(*huge))
    await until(lambda: pub.next_seq >= 2, "the oversized batch sent")
    end, k = time.monotonic() + DEADLINE, 0
    while not any(b"after%d" % i in feed.index for i in range(k)):  # the stream goes on
        assert time.monotonic() < end, f"no batch after the oversized one: {feed.counts}"
        pub.submit(stored(b"after%d" % k))
        k += 1
        await asyncio.sleep(0.05)
    assert huge[0] not in feed.index and huge[-1] not in feed.index
    assert feed.counts["gaps"] >= 1


def test_the_index_is_bounded_and_expected_blocks_expire():
    from kvpool.router.kv_index import BlockIndex
    idx = BlockIndex(max_blocks=3)
    idx.stored([b"a", b"b", b"c", b"d"])  # the least recently stored goes first
    assert b"a" not in idx and len(idx) == 3 and idx.forgotten == 1
    assert idx.hits([b"b", b"c", b"x", b"d"]) == 2
    idx.expect([b"x", b"y"], until=10.0)  # routed there, not stored yet
    assert idx.hits([b"b", b"c", b"x", b"y", b"d"], now=5.0) == 5
    assert idx.hits([b"b", b"c", b"x", b"y", b"d"], now=11.0) == 2  # expired
    idx.removed([b"x"])  # an event says it is gone: no longer expected either
    assert idx.hits([b"b", b"c", b"x"], now=5.0) == 2


async def test_the_feeds_follow_replicas_added_and_removed_at_runtime():
    import aiohttp

    from kvpool.router.kv_routing import EventRouting
    from kvpool.router.replicas import ReplicaSet
    rs = ReplicaSet(["http://127.0.0.1:1"])
    routing = EventRouting(rs)
    try:
        rs.add("http://127.0.0.1:2")
        rs.remove("http://127.0.0.1:1")
        async with aiohttp.ClientSession() as s:
            await routing.refresh(s)  # nothing listens there: the feeds exist, not live
        assert list(routing.feeds) == ["http://127.0.0.1:2"]
        assert not routing.feeds["http://127.0.0.1:2"].live
    finally:
        await routing.close()


async def test_a_reader_that_stops_on_an_error_closes_its_feed(pub_feed, caplog):
    """NOTE(reader-ends): an error nothing in the reader handles ends it; the feed is closed
    and said in the log, so the replica is placed by lookups, where it used to stay live with
    its index frozen; following its events again reconnects from scratch."""
    pub, feed = pub_feed
    await one_batch(pub, stored(b"a"))
    feed.connect(info_of(pub))
    await until(lambda: feed.live and b"a" in feed.index, "the replay")
    broken = feed.index.stored

    def fails(hashes):
        raise RuntimeError("an error nothing handles")
    feed.index.stored = fails
    await one_batch(pub, stored(b"b"))
    await until(lambda: not feed.live, "the feed to close")
    assert feed.counts["reader_failed"] == 1
    assert any("KV event reader" in r.message and "lookups" in r.message for r in caplog.records)
    feed.connect(info_of(pub))
    feed.index.stored = broken
    await until(lambda: feed.live and b"b" in feed.index, "the reconnect")


async def test_a_resent_start_marker_is_a_duplicate_not_a_restart(pub_feed):
    """A publisher resends seq 0, the same bytes, to a subscriber that joins before any later
    batch (kvpool/events/publisher.py NOTE(start-marker)); without a replay in between, the
    feed counted each resend a restart (clearing the index, its expected blocks with it)."""
    pub, feed = pub_feed
    feed.connect(info_of(pub), read=False)
    start = frames(0, AllBlocksCleared())
    await feed.on_message(start)
    await feed.on_message(start)  # the resend
    assert feed.counts["restarts"] == 0 and feed.counts["duplicates"] == 1
    await feed.on_message(frames(1, stored(b"x")))
    assert b"x" in feed.index and feed.expected == 2
    await feed.on_message(frames(0, AllBlocksCleared()))  # a new publisher's seq 0: new bytes
    assert feed.counts["restarts"] == 1 and b"x" not in feed.index
