"""EventPublisher: KV events out of the process on ZMQ, never blocking who emits them.

    step thread (pool lock held)          publisher thread
    submit(event): queue.put_nowait  -->  get, then drain what else waits (one batch)
      queue full -> dropped += 1            batch -> msgpack -> XPUB [topic, seq, payload]
                                            keep (seq, payload) in a ring of buffer_steps
                                            between batches: a bounded slice of replays
                                              (ROUTER; replay.py NOTE(replay-budget))

The queue is bounded (``max_queue_size`` events) and ``submit`` never waits: a publisher that
falls behind loses events (``dropped``), never the step its time. ZMQ's PUB socket drops for a
subscriber past ``hwm`` queued messages; the sequence numbers let it see the gap and ask the
replay socket for what it missed (wire.py has the framing).

NOTE(lost-events): vLLM's publisher never loses an event it was given (its queue put waits), so
a subscriber written for it takes a stream without sequence gaps as complete. An event dropped
here would leave such a subscriber wrong for good (a dropped BlockRemoved: a block it believes
cached, requests sent where it is not). So a drop raises ``_lost`` and the next event queued
after it (or the publisher thread, when none comes) is an AllBlocksCleared: everything before
it is void, and what a subscriber rebuilds from the events after it is never more than is
cached. ``_lost`` is lowered before the marker is queued, so a drop that races it raises it
again (a spare marker costs hits, never a wrong route).

NOTE(start-marker): the first batch (seq 0) is one AllBlocksCleared: this publisher knows
nothing cached yet, so a subscriber that sees seq 0 again knows the replica restarted and drops
what it knew. Sent once at start it reached no one: it goes out within milliseconds of the bind
or connect, and a PUB sends only to peers whose subscription it has read (a SUB redials every
100 ms at best; llm-d's indexer, which binds, waits for the replica's PUB to dial it). So the
socket is an XPUB with XPUB_VERBOSE (every peer's subscription comes up, a repeated one too):
while nothing followed seq 0, a subscription that wants the topic gets seq 0 again, the same
bytes, sent before any later batch. A resend reaches every subscriber (seq 0 again before seq 1
costs one that has it nothing: it knows nothing from this publisher yet), and XPUB cannot tell
a new peer from one that sends its subscription again, so one peer repeating it made every
subscriber see "restarted" on every turn, hundreds of times a second. So seq 0 goes out again
at most once per MARKER_INTERVAL (100 ms, ZMQ's reconnect interval: a SUB that drops and
redials comes back no sooner), however many subscriptions came; one that came within it is
owed the next, sent when the interval is up, or at once when a real batch is about to go (seq
0 first, so it is never behind seq 1). Once a later batch went out, a subscriber that joins
sees a gap and replays from 0 (docs/kv_events.md, "What is published"). The subscriptions are
read every turn, whether or not they are wanted: XPUB keeps every one it passes up until read.

NOTE(subscriptions): a plain PUB kept any subscription a peer sent in libzmq's trie, a node
per byte: one 8 MiB subscription grew the engine by ~400 MiB, and more after the peer left
(vLLM's publisher is the same). Here a subscription message is at most the topic plus
SUBSCRIPTION_SLACK bytes (ZMQ_MAXMSGSIZE: a larger one disconnects its peer before it is
read), and the replay ROUTER takes frames of at most MAX_REQUEST bytes, so a peer cannot park
a large partial frame there either. Many distinct small subscriptions still cost the trie
their bytes (libzmq keeps them even in XPUB's manual mode), and libzmq's cleanup of them when
many peers leave stalled the live stream for 30-60 s (vLLM's too), so the endpoints belong on
a network tenants cannot reach (docs/kv_events.md).
XPUB also queues what it passes up (its pending list: no high-water mark covers it), and it
moves a peer's whole pipe there at a time: a peer resending one subscription as fast as it could
outran the thread that reads them and grew the process by ~100 MB, kept after it left. With
RCVHWM at SUBSCRIPTION_HWM (1 message per peer's pipe), XPUB takes at most one from each peer
each time libzmq processes commands, which it does inside the publisher thread's own socket
calls, so a peer adds about one message per call that thread makes, and it reads one per call;
the rest waits in the peer's own buffers (TCP pushes back). Two peers sending ~1 M/s left the
process flat (tests/events/test_subscription_flood.py). Only whether a peer subscribed matters
here, never how often.

The sockets belong to the publisher thread once it runs (bound here first, so a port in use
fails ``kvpool serve`` at start with the endpoint named).

NOTE(pub-connect): the PUB socket binds or connects by vLLM 0.33's rule (its ZmqEventPublisher):
an endpoint with a wildcard host (``*`` or ``::`` in it) or an ``ipc://`` one is bound, any
other is connected to.
llm-d's precise prefix-cache setup names the indexer's own address (``tcp://epp-svc:5557``,
where the indexer binds a SUB) and every replica's PUB connects out to it. kvpool adds one case:
port 0 is always bound (a free port; nothing listens on port 0). Connecting is lazy in ZMQ, so
start never waits for the indexer; events sent before it is up are lost to it (PUB drops).
The replay socket is always bound, as in vLLM (docs/kv_events.md, "Bind or connect").
"""

from __future__ import annotations

import logging
import queue
import secrets
import threading
import time
from collections import deque

import zmq

from kvpool.errors import ConfigError
from kvpool.events.config import KVEventsConfig
from kvpool.events.replay import REPLAY_HWM, REPLAY_SNDBUF, ReplayServer
from kvpool.events.wire import AllBlocksCleared, KVEventBatch, encode_seq, new_encoder

__all__ = ["EventPublisher", "binds"]

log = logging.getLogger("kvpool.events")
MAX_BATCH = 4096  # events per batch at most (a prefill that evicts thousands spans a few)
_WAIT = 0.02  # seconds the publisher thread waits for an event before polling the replay socket
SUBSCRIPTION_SLACK = 1024  # bytes a subscription message may carry beyond the topic
MAX_REQUEST = 1024  # bytes of one replay-request frame at most (a request is ["", 8 bytes])
SUBS_PER_TURN = 1024  # subscriptions read per publisher turn at most (NOTE(start-marker))
SUBSCRIPTION_HWM = 1  # messages queued per peer's pipe to the XPUB (NOTE(subscriptions))
MARKER_INTERVAL = 0.1  # seconds between two sends of seq 0 at least (NOTE(start-marker))


def binds(endpoint: str) -> bool:
    """Whether the PUB socket binds ``endpoint`` (else it connects: NOTE(pub-connect))."""
    return ("*" in endpoint or "::" in endpoint or endpoint.startswith("ipc://")
            or endpoint.rpartition(":")[2] == "0")


def _connect(sock: zmq.Socket, endpoint: str) -> str:
    try:
        sock.connect(endpoint)
    except zmq.ZMQError as exc:
        sock.close(linger=0)
        raise ConfigError(f"--kv-events-config: cannot connect endpoint {endpoint!r} ({exc}); "
                          "use tcp://HOST:PORT (a wildcard host such as tcp://*:5557 binds)"
                          ) from exc
    return endpoint


def _pub_socket(ctx: zmq.Context, config: KVEventsConfig) -> tuple[zmq.Socket, str, str]:
    """The PUB socket bound or connected (NOTE(pub-connect)), its mode and endpoint;
    subscriptions bounded (NOTE(subscriptions))."""
    sock = ctx.socket(zmq.XPUB)
    sock.setsockopt(zmq.XPUB_VERBOSE, 1)  # NOTE(start-marker): every subscription comes up
    sock.setsockopt(zmq.SNDHWM, config.hwm)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.MAXMSGSIZE, len(config.topic.encode()) + SUBSCRIPTION_SLACK)
    sock.setsockopt(zmq.RCVHWM, SUBSCRIPTION_HWM)  # before bind/connect: their pipes take it
    if binds(config.endpoint):
        return sock, "bind", _bind(sock, config.endpoint, "endpoint")
    return sock, "connect", _connect(sock, config.endpoint)


def _bind(sock: zmq.Socket, endpoint: str, what: str) -> str:
    try:
        sock.bind(endpoint)
    except zmq.ZMQError as exc:
        sock.close(linger=0)
        raise ConfigError(f"--kv-events-config: cannot bind {what} {endpoint!r} ({exc}); pick "
                          "a free port, or port 0 for any") from exc
    return sock.getsockopt_string(zmq.LAST_ENDPOINT)


def _replay_socket(ctx: zmq.Context, endpoint: str) -> tuple[zmq.Socket, str]:
    """The replay ROUTER, bound, and its endpoint."""
    sock = ctx.socket(zmq.ROUTER)
    # a client that does not read is held at REPLAY_HWM (and a small kernel buffer), never
    # buffered beyond, and a send to one that left fails (replay.py NOTE(replay-budget))
    sock.setsockopt(zmq.SNDHWM, REPLAY_HWM)
    sock.setsockopt(zmq.SNDBUF, REPLAY_SNDBUF)  # NOTE(replay-sndbuf): pre-bind
    sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.MAXMSGSIZE, MAX_REQUEST)  # NOTE(subscriptions)
    return sock, _bind(sock, endpoint, "replay_endpoint")


class EventPublisher:
    """XPUB (NOTE(start-marker)) + optional ROUTER replay over a bounded queue, one thread."""

    def __init__(self, config: KVEventsConfig, data_parallel_rank: int = 0) -> None:
        self.config = config
        self.topic = config.topic.encode()
        self.rank = data_parallel_rank
        self._queue: queue.Queue = queue.Queue(maxsize=config.max_queue_size)
        self._ring: deque[tuple[int, bytes]] = deque(maxlen=config.buffer_steps)
        self.published = 0  # events sent (publisher thread)
        self.dropped = 0  # events refused by a full queue (emitting threads, pool lock held)
        self.loss_marks = 0  # AllBlocksCleared queued after drops (NOTE(lost-events))
        self._lost = False  # a drop happened that no AllBlocksCleared follows yet
        self.next_seq = 0
        self._marker: bytes | None = None  # seq 0's payload while nothing followed it
        self._marker_at = 0.0  # when seq 0 last went out (monotonic; NOTE(start-marker))
        self._marker_owed = False  # a subscription came that no send of seq 0 followed yet
        # this publisher's stream, told apart from a restarted one's (its seqs start over)
        self.instance = secrets.token_hex(8)
        self._ctx = zmq.Context()
        # mode "bind": subscribers connect to ``endpoint``; "connect": it is an indexer's
        # address that this PUB dials (NOTE(pub-connect))
        self._pub, self.mode, self.endpoint = _pub_socket(self._ctx, config)
        self._replay: zmq.Socket | None = None
        self._replayer: ReplayServer | None = None
        self.replay_endpoint: str | None = None
        if config.replay_endpoint:
            try:
                self._replay, self.replay_endpoint = _replay_socket(self._ctx,
                                                                    config.replay_endpoint)
            except ConfigError:
                self._pub.close(linger=0)
                raise
            self._replayer = ReplayServer(self._replay, self._ring, self.topic)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kvpool-kv-events", daemon=True)
        self._thread.start()

    def submit(self, event: object) -> None:
        """Queue one event for the next batch; a full queue drops it (counted, and followed
        by an AllBlocksCleared: NOTE(lost-events))."""
        if self._lost:
            self._mark_loss()
        try:
            self._queue.put_nowait(event)
        except queue.Full:
            self.drop()

    def drop(self) -> None:
        """One event lost (a full queue, or one that could not be built: recorder.py): counted,
        and an AllBlocksCleared follows (NOTE(lost-events))."""
        self.dropped += 1
        self._lost = True

    def _mark_loss(self) -> None:
        """Queue the AllBlocksCleared that voids what a drop left wrong (NOTE(lost-events))."""
        self._lost = False  # first: a drop from here on raises it again
        try:
            self._queue.put_nowait(AllBlocksCleared())
        except queue.Full:
            self._lost = True
        else:
            self.loss_marks += 1

    @property
    def bad_replays(self) -> int:
        """Malformed replay requests ignored."""
        return self._replayer.bad_requests if self._replayer is not None else 0

    def families(self) -> list[tuple[str, str, str, tuple[str, ...], list]]:
        """For KVPoolMetrics.add_source."""
        rp = self._replayer
        return [
            ("kvpool_kv_events_published_total", "counter",
             "KV cache events sent on the ZMQ PUB socket.", (), [((), float(self.published))]),
            ("kvpool_kv_events_dropped_total", "counter",
             "KV cache events dropped because the publisher's queue was full.", (),
             [((), float(self.dropped))]),
            ("kvpool_kv_events_replay_requests_ignored_total", "counter",
             "Replay requests ignored: malformed, waiting and replaced by the same "
             "client's next (busy), waiting when their client left (gone), of a client cut "
             "for stalling (stalled), or with the most replays open and clients waiting "
             "(full).",
             ("reason",),
             [(("malformed",), float(rp.bad_requests if rp else 0)),
              (("busy",), float(rp.ignored if rp else 0)),
              (("gone",), float(rp.orphaned if rp else 0)),
              (("stalled",), float(rp.stalled if rp else 0)),
              (("full",), float(rp.refused if rp else 0))]),
            ("kvpool_kv_events_replays_cut_total", "counter",
             "Replays stopped before their end marker: the client read nothing for a while, "
             "left, or the replay ring moved past it.", (), [((), float(rp.cut if rp else 0))]),
        ]

    def close(self, timeout: float = 2.0) -> None:
        """Publish what is queued (within ``timeout``), stop the thread, close the sockets."""
        self._stop.set()
        self._thread.join(timeout)
        if not self._thread.is_alive():
            self._pub.close(linger=0)
            if self._replay is not None:
                self._replay.close(linger=0)
            self._ctx.term()

    # ---------------------------------------------------------------- publisher thread
    def _run(self) -> None:
        encoder = new_encoder()
        self._send(encoder, [AllBlocksCleared()])  # seq 0, alone (NOTE(start-marker))
        subs_wait = False
        while True:
            wait = 0.0 if subs_wait else _WAIT
            if self._replayer is not None:
                wait = min(max(self._replayer.serve(self.next_seq), 0.0), wait)
            events = self._take_batch(wait)
            subs_wait = self._greet(bool(events))  # first: seq 0 goes before the batch
            if events:
                self._send(encoder, events)
            elif self._lost:  # nothing came after a drop: mark it now (NOTE(lost-events))
                self._mark_loss()
            elif self._stop.is_set():
                return

    def _take_batch(self, wait: float) -> list:
        try:
            events = [self._queue.get(timeout=wait) if wait > 0 else self._queue.get_nowait()]
        except queue.Empty:
            return []
        get = self._queue.get_nowait
        try:
            while len(events) < MAX_BATCH:
                events.append(get())
        except queue.Empty:
            pass
        return events

    def _send(self, encoder, events: list) -> None:
        seq = self.next_seq
        payload = encoder.encode(KVEventBatch(time.time(), events, self.rank))
        try:
            self._pub.send_multipart((self.topic, encode_seq(seq), payload), zmq.NOBLOCK)
        except zmq.Again:
            pass  # PUB does not block; kept for replay below either way
        self._ring.append((seq, payload))
        self._marker = payload if seq == 0 else None  # NOTE(start-marker)
        self._marker_at = time.monotonic()  # read only while _marker is seq 0's
        self.next_seq = seq + 1
        self.published += len(events)

    def _greet(self, batch_next: bool) -> bool:
        """Read the subscriptions the XPUB passed up; seq 0 again when one wants the topic and
        nothing followed seq 0 yet, at most once per MARKER_INTERVAL unless ``batch_next``
        (NOTE(start-marker)). True when more may wait."""
        wanted, more = False, True
        for _ in range(SUBS_PER_TURN):
            try:
                msg = self._pub.recv(zmq.NOBLOCK)
            except zmq.Again:
                more = False
                break
            # b"\x01" + prefix subscribes (b"\x00" unsubscribes); a prefix of the topic matches
            wanted = wanted or (msg[:1] == b"\x01" and self.topic.startswith(msg[1:]))
        self._marker_owed = self._marker is not None and (self._marker_owed or wanted)
        now = time.monotonic()
        if self._marker_owed and (batch_next or now - self._marker_at >= MARKER_INTERVAL):
            self._marker_owed, self._marker_at = False, now
            try:
                self._pub.send_multipart((self.topic, encode_seq(0), self._marker), zmq.NOBLOCK)
            except zmq.Again:
                pass  # as _send: XPUB drops for a peer past hwm, it never blocks
        return more
