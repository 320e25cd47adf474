"""ReplicaFeed: one replica's KV event stream (kvpool.events.wire) kept in a BlockIndex.

Where from: ``GET /v1/kvpool/kv_events`` on the replica (``refresh``, every few seconds: a
replica that restarts on new ports is followed); a wildcard bind host (``*``, ``0.0.0.0``)
means the replica URL's host. A SUB socket takes the stream, a DEALER asks the replay socket.

What a message does (``seq`` is the publisher's, ``expected`` the next one wanted)::

    first message after connecting   replay from 0 first (learn what is cached already)
    seq == expected                  apply, expected + 1
    seq >  expected (a gap: ZMQ      replay from expected; if the oldest batch replayed is
      dropped for us, or we were       past it the replica's ring lost what we missed: clear
      disconnected)                    the index (a forgotten block costs a hit, a stale one
                                       would send requests to a replica that lost it)
    seq <  expected, the very batch  skipped: a duplicate (one SUB connection delivers in
      a replay gave us (same bytes)    order, so only a replay's batches come twice)
    any other seq <  expected        a new publisher (NOTE(restart)): clear, replay from 0 (seq 0
                                       is the start itself: apply it), counted as a restart
    seq <  0 (the high bit set)      malformed: no publisher gets there
    wrong topic (SUB filters by      skipped, counted
      prefix only)
    malformed frames or payload      counted, logged once, the index cleared (what the batch
      (a hash over MAX_HASH_BYTES,     changed is unknown), expected moves past it
      nesting past the decoder's)

NOTE(restart): a publisher's own stream only goes forward, so a seq below ``expected`` that is
not a batch the last replay gave us means what we know came from another publisher: the replica
restarted on the same ports and its seq 0 (AllBlocksCleared) went out before our SUB reconnected,
or one wild seq (2**62, a bit flip) took ``expected`` far ahead (a jump is a gap like any other).
Skipping such batches as duplicates kept a dead process's blocks for ever; no reorder allowance
is needed because nothing reorders a SUB stream. A new publisher that got past ``expected``
before our SUB reconnected looks like a gap instead, and a replay from ``expected`` would lay
its batches over the dead process's blocks; the replica's info names its publisher
(``instance``, new at every start), and ``refresh`` follows a new one from scratch.

NOTE(max-message), NOTE(rcvhwm): what one frame and the queue in front of the reader may
hold is bounded where the sockets are made (kv_endpoints.py ``dial``); a frame ZMQ refused or
dropped is a gap like any other (below: replayed, or the index cleared), counted as ``gaps``,
said once.

NOTE(slices): a batch is applied in slices of APPLY_SLICE hashes with the event loop let go
between them: one 15 MiB batch (450k hashes) took 110-120 ms to apply (plus ~47 ms to decode)
on this 2-core box, all of it a stall for every request the router was placing. A replay keeps
at most ``max_replay_bytes`` of payloads; one that sends more is lost (the index cleared), so
a replica answering a replay with batch after batch cannot fill the router's memory.

Only medium "GPU" (the replica's device pool, what lookups count) enters the index: "CPU"
blocks belong to swapped-out sequences, which no new request can hit.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from typing import Any

import aiohttp
import msgspec
import zmq
import zmq.asyncio

from kvpool.events.wire import (END_SEQ, MEDIUM_GPU, AllBlocksCleared, BlockStored,
                                KVEventBatch, decode_batch, decode_seq, encode_seq)
from kvpool.router.kv_endpoints import MAX_MESSAGE, RECV_QUEUE, dial, foreign_endpoint, reachable
from kvpool.router.kv_index import DEFAULT_MAX_BLOCKS, BlockIndex
from kvpool.router.kv_prompt import info_problem
from kvpool.router.replicas import Replica, read_json

__all__ = ["FEED_COUNTS", "KV_EVENTS_PATH", "MAX_MESSAGE", "ReplicaFeed"]

log = logging.getLogger("kvpool.router")
KV_EVENTS_PATH = "/v1/kvpool/kv_events"
KV_INFO_BYTES = 1 << 20  # of the kv_events info read (replicas.py NOTE(small-answers))
REPLAY_TIMEOUT = 2.0  # seconds a replay may take before the index is cleared instead
MAX_REPLAY_BYTES = 256 << 20  # payload bytes one replay may hold (NOTE(slices))
APPLY_SLICE = 8192  # hashes applied between yields to the event loop (NOTE(slices))
# what names one stream: when one changes, it is followed from scratch (NOTE(restart))
_STREAM_KEYS = ("endpoint", "replay_endpoint", "topic", "instance")
FEED_COUNTS = ("applied", "gaps", "replays", "lost", "restarts", "duplicates", "wrong_topic",
               "malformed", "reader_failed")


class ReplicaFeed:
    """The subscription to one replica and the index it feeds."""

    def __init__(self, replica: Replica, ctx: zmq.asyncio.Context,
                 max_blocks: int = DEFAULT_MAX_BLOCKS,
                 max_replay_bytes: int = MAX_REPLAY_BYTES, *, any_host: bool = False) -> None:
        """``any_host``: follow endpoints on other hosts than the replica's (NOTE(own-host))."""
        self.replica = replica
        self.any_host = any_host
        self.max_replay_bytes = max_replay_bytes
        self.ctx = ctx
        self.index = BlockIndex(max_blocks)
        self.info: dict[str, Any] = {"enabled": False}
        self.expected: int | None = None  # None: connected, not caught up yet
        self.counts: Counter[str] = Counter()  # applied, gaps, lost, restarts, malformed, ...
        self._topic = b""
        self._sub: zmq.asyncio.Socket | None = None
        self._dealer: zmq.asyncio.Socket | None = None
        self._monitor: zmq.asyncio.Socket | None = None  # the SUB's disconnects
        self._reader: asyncio.Task | None = None
        self._warned: set[str] = set()
        self._replayed: dict[int, int] = {}  # seq -> hash(payload) of the last replay's batches
        # where the replica's PUB connects out to, when it does (NOTE(pub-connect) in
        # kvpool/events/publisher.py): None when it binds, events are off or unknown yet
        self.external: str | None = None
        # why its KV events cannot be followed (an external indexer, a check of its info
        # failed), when so: then it is placed by lookups (kv_routing.py; docs/kv_events.md)
        self.unusable: str | None = None

    @property
    def live(self) -> bool:
        """Subscribed and caught up: its index may be scored."""
        return self._sub is not None and self.expected is not None

    # ---------------------------------------------------------------- where from
    async def refresh(self, session: aiohttp.ClientSession,
                      headers: dict[str, str] | None = None) -> None:
        """Ask the replica where its events are; (re)connect when that changed. ``headers``:
        the router's own Authorization for replicas started with --api-key."""
        try:
            async with session.get(self.replica.url + KV_EVENTS_PATH, headers=headers,
                                   timeout=aiohttp.ClientTimeout(total=2.0)) as resp:
                # a chat template may ride along: a larger bound (NOTE(small-answers))
                info = await read_json(resp, KV_INFO_BYTES) if resp.status == 200 else None
                status = resp.status
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError, ValueError):
            return  # down or busy: keep what we have, the next refresh asks again
        if status == 401:
            self._warn_once("auth", "replica %s wants an API key for its KV events (it runs "
                            "with --api-key): give the router the same key with "
                            "--replica-api-key or $KVPOOL_REPLICA_API_KEY; until then it "
                            "scores no prefix hits")
            return
        self._take(info if status == 200 else None, status == 200)

    def _take(self, info: Any, answered: bool) -> None:
        """Follow ``info`` when the router can; else say once why, and how it is placed.
        ``answered``: the route answered 200 (``info`` None then: not JSON, or too long)."""
        self.unusable = None
        if self._external(info):
            return
        problem = None
        if answered and (not isinstance(info, dict) or type(info.get("enabled")) is not bool):
            problem = "want a JSON object with \"enabled\": true or false"
        elif not isinstance(info, dict) or not info.get("enabled"):
            self._warn_once("off", "replica %s publishes no KV events: it scores no prefix "
                            "hits (start it with --kv-events-config '{\"enable_kv_cache_"
                            "events\": true, \"publisher\": \"zmq\", \"endpoint\": "
                            "\"tcp://*:5557\", \"replay_endpoint\": \"tcp://*:5558\"}')")
            return
        problem = problem or info_problem(info)
        if problem is not None:
            self._unusable("info", "publishes KV event info the router cannot use", problem)
            return
        if not self.any_host and (far := foreign_endpoint(info, self.replica.url)):
            self._unusable("foreign", "names a KV event endpoint off its own host",
                           f"{far}: not the host of its URL; if that host is trusted, start "
                           "the router with --kv-events-any-host")  # NOTE(own-host)
            return
        self._follow(info)

    def _unusable(self, key: str, what: str, why: str) -> None:
        """Not followed (``what``, ``why``): placed by lookups (kv_routing.py)."""
        self.close()
        self.info = {"enabled": False}
        self.unusable = why
        self._warn_once(key, "replica %s " + what + " (%s): the router cannot follow its "
                        "KV events, so requests it may take are placed by lookups", why)

    def _follow(self, info: dict[str, Any]) -> None:
        """Follow ``info``'s stream: (re)connect when it names another one."""
        if any(info.get(k) != self.info.get(k) for k in _STREAM_KEYS) or self._sub is None:
            try:
                self.connect(info)
            except zmq.ZMQError as exc:  # e.g. a host that does not resolve
                self._unusable("connect", "names a KV event endpoint ZMQ refuses", str(exc))
                return
        self.info = info

    def _external(self, info: Any) -> bool:
        """Whether the replica's PUB connects out to an indexer (publisher.py
        NOTE(pub-connect)): nothing to subscribe to, so it is not followed (``_unusable``)."""
        if not (isinstance(info, dict) and info.get("enabled")
                and info.get("endpoint_mode") == "connect"):
            self.external = None
            return False
        self.external = str(info.get("connects_to"))
        self._unusable("external", "publishes its KV events to an external indexer",
                       f"its PUB connects to {self.external}")
        return True

    def connect(self, info: dict[str, Any], *, read: bool = True) -> None:
        """Subscribe to ``info``'s endpoints from scratch (the index starts empty); ``read``
        False leaves the SUB socket to the caller, who hands messages to ``on_message``."""
        self.close()
        self.info = info
        self._topic = str(info.get("topic") or "").encode()
        self._sub = dial(self.ctx, zmq.SUB, reachable(info["endpoint"], self.replica.url),
                         self._topic)
        self._monitor = self._sub.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        if info.get("replay_endpoint"):
            self._dealer = self._dealer_for(info["replay_endpoint"])
        self.index.clear()
        self.expected = None
        if read:
            self._reader = asyncio.create_task(self._read(),
                                               name=f"kv-events {self.replica.url}")
            self._reader.add_done_callback(self._reader_ended)
        log.info("router: following KV events of %s at %s", self.replica.url, info["endpoint"])

    def _reader_ended(self, task: asyncio.Task) -> None:
        """NOTE(reader-ends): a reader that stops on an error nothing handled is said in the
        log and its feed closed, so the replica is placed by lookups until the next refresh
        follows its events from scratch; before, the feed stayed live with a frozen index."""
        if task.cancelled() or task is not self._reader or task.exception() is None:
            return
        self.counts["reader_failed"] += 1
        log.error("router: the KV event reader of %s stopped (%r): requests it may take are "
                  "placed by lookups until its events are followed again", self.replica.url,
                  task.exception())
        self._reader = None
        self.close()

    def close(self) -> None:
        if self._reader is not None:
            self._reader.cancel()
            self._reader = None
        for sock in (self._sub, self._dealer, self._monitor):
            if sock is not None:
                sock.close(linger=0)
        self._sub = self._dealer = self._monitor = None
        self.expected = None
        self._replayed = {}

    # ---------------------------------------------------------------- the stream
    async def _read(self) -> None:
        sub, monitor = self._sub, self._monitor
        assert sub is not None and monitor is not None
        await self._catch_up(0)
        poller = zmq.asyncio.Poller()
        poller.register(sub, zmq.POLLIN)
        poller.register(monitor, zmq.POLLIN)
        while True:
            ready = dict(await poller.poll())
            if monitor in ready:
                await monitor.recv_multipart()
                self._redial(sub)
            if sub in ready:
                await self.on_message(await sub.recv_multipart())

    def _redial(self, sub: zmq.asyncio.Socket) -> None:
        """The SUB lost its connection: dial again, since ZMQ does not after an oversized
        frame (NOTE(max-message)); what was missed meanwhile is a gap."""
        endpoint = reachable(self.info["endpoint"], self.replica.url)
        try:
            sub.disconnect(endpoint)
        except zmq.ZMQError:
            pass  # ZMQ let go of it already
        sub.connect(endpoint)

    async def on_message(self, frames: list[bytes]) -> None:
        if len(frames) != 3 or len(frames[1]) != 8:
            return self._malformed(f"{len(frames)} frames", None)
        if frames[0] != self._topic:
            self.counts["wrong_topic"] += 1
            return None
        seq = decode_seq(frames[1])
        if seq < 0:
            return self._malformed(f"seq {seq}", None)
        expected = self.expected if self.expected is not None else 0
        if seq < expected:
            if self._replayed.get(seq) == hash(frames[2]):
                self.counts["duplicates"] += 1
                return None
            await self._restart(seq)
        elif seq > expected:
            self._gap(expected, seq)
            await self._catch_up(expected)
        if self.expected is None or seq >= self.expected:
            await self._apply(seq, frames[2])
        return None

    def _gap(self, expected: int, seq: int) -> None:
        """Batches ``expected`` .. ``seq - 1`` missed (a reconnect, or dropped past the
        receive queue's bound: NOTE(rcvhwm)): counted, said once; a replay follows."""
        self.counts["gaps"] += 1
        self._warn_once("gap", "replica %s: KV event batches %d.. were missed (a reconnect, or "
                        "more than %d arrived faster than the router applies them): they are "
                        "replayed, else its index is cleared", expected, RECV_QUEUE)

    async def _restart(self, seq: int) -> None:
        """A new publisher sent ``seq`` (NOTE(restart)): start over from its seq 0."""
        self.counts["restarts"] += 1
        self.index.clear()
        self.expected = None
        self._replayed = {}
        if seq > 0 and self._dealer is not None:
            await self._catch_up(0)

    async def _apply(self, seq: int, payload: bytes) -> None:
        """Batch ``seq`` into the index in slices (NOTE(slices)); seq 0 kept as if replayed."""
        self.expected = seq + 1
        if seq == 0:  # its resends are duplicates (events/publisher.py NOTE(start-marker))
            self._replayed[0] = hash(payload)
        try:
            batch: KVEventBatch = decode_batch(payload)
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            return self._malformed(str(exc), seq)
        index, done = self.index, 0
        for ev in batch.events:
            kind = type(ev)
            if kind is AllBlocksCleared:
                index.clear()
                continue
            if ev.medium not in (MEDIUM_GPU, None):  # type: ignore[union-attr]
                continue
            put = index.stored if kind is BlockStored else index.removed  # BlockRemoved
            hashes = ev.block_hashes  # type: ignore[union-attr]
            for at in range(0, len(hashes), APPLY_SLICE):
                put(hashes[at:at + APPLY_SLICE])
                done += min(APPLY_SLICE, len(hashes) - at)
                if done >= APPLY_SLICE:
                    done = 0
                    await asyncio.sleep(0)  # NOTE(slices): requests get placed meanwhile
        self.counts["applied"] += 1
        return None

    def _malformed(self, why: str, seq: int | None) -> None:
        self.counts["malformed"] += 1
        self.index.clear()  # what it changed is unknown: forget rather than misroute
        self._warn_once("malformed", "replica %s sent a malformed KV event message (%s): "
                        "its index was cleared", why)

    async def _catch_up(self, start: int) -> None:
        """Replay from ``start``; on any shortfall the index is cleared (module docstring)."""
        self.counts["replays"] += 1
        got = await self._replay(start) if self._dealer is not None else None
        if not got or got[0][0] > start:
            self.counts["lost"] += 1
            self.index.clear()
        self._replayed = {}
        for seq, payload in got or ():
            self._replayed[seq] = hash(payload)
            await self._apply(seq, payload)
        if self.expected is None:
            self.expected = start

    async def _replay(self, start: int) -> list[tuple[int, bytes]] | None:
        """Batches ``>= start`` from the replay socket, or None when it does not answer."""
        assert self._dealer is not None
        out: list[tuple[int, bytes]] = []
        held = 0
        try:
            async with asyncio.timeout(REPLAY_TIMEOUT):
                await self._dealer.send_multipart((b"", encode_seq(start)))
                while True:
                    frames = await self._dealer.recv_multipart()
                    if len(frames) != 4 or frames[2] == END_SEQ:
                        return out
                    held += len(frames[3])
                    if held > self.max_replay_bytes:
                        return self._replay_too_large()
                    if frames[1] == self._topic and len(frames[2]) == 8:
                        seq = decode_seq(frames[2])
                        if seq >= start:
                            out.append((seq, frames[3]))
        except TimeoutError:
            self._warn_once("replay", "replica %s did not answer a KV event replay in time: "
                            "its index was cleared")
            self._reset_dealer()
            return None

    def _replay_too_large(self) -> None:
        """A replay past ``max_replay_bytes``: dropped, as if unanswered (NOTE(slices))."""
        self._warn_once("replay_size", "replica %s answered a KV event replay with more than "
                        "%d bytes of batches: its index was cleared", self.max_replay_bytes)
        self._reset_dealer()
        return None

    def _reset_dealer(self) -> None:
        """A fresh DEALER: a late answer to an abandoned replay must not look like a new one."""
        if self._dealer is not None and self.info.get("replay_endpoint"):
            self._dealer.close(linger=0)
            self._dealer = self._dealer_for(self.info["replay_endpoint"])

    def _dealer_for(self, endpoint: str) -> zmq.asyncio.Socket:
        return dial(self.ctx, zmq.DEALER, reachable(endpoint, self.replica.url), b"")

    def _warn_once(self, key: str, msg: str, *args: Any) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning(msg, self.replica.url, *args)
        self.counts["warnings"] += 1
