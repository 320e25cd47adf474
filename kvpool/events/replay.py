"""ReplayServer: the publisher thread's ROUTER replay socket, served in small slices.

A request ``["", seq]`` starts a replay for its client: every batch kept in the ring with
``seq_i >= seq`` at the time of the request, in order, then the end marker (wire.py). What
bounds a replay's cost (NOTE(replay-budget)):

- per publisher iteration at most ``REQUESTS_PER_TURN`` requests are read and at most
  ``SEND_BUDGET`` replayed batches are sent, round robin over the open replays (``SLICE`` each
  per turn), so live batches go out between slices however many replays wait;
- a client asks again before its replay ended: the request waits behind it, one per client
  (NOTE(pending)), and a later one takes its place (the one replaced is counted ignored), so a
  flood of requests costs two replays per client, not one per request;
- the socket's SNDHWM is ``REPLAY_HWM`` messages per client with ROUTER_MANDATORY and its
  SO_SNDBUF ``REPLAY_SNDBUF`` (NOTE(replay-sndbuf)): a client that does not read is held there
  (its replay waits, retried with backoff), never buffered beyond; one that read nothing for
  ``STALL`` seconds, or left, has its replay cut (counted, no end marker, so it cannot take a
  partial replay for a whole one), as does one the ring moved past (the batches it still needs
  are gone);
- at most ``MAX_OPEN`` replays are open at once; a request past that waits for a place, in
  arrival order, at most ``MAX_WAITING`` clients (NOTE(fair-turns)); one past that is ignored
  (counted, reason "full"), and its client's wait runs out as for a replica that does not
  answer.

NOTE(pending): vLLM's replay socket answers every request in turn, so a consumer may ask
for a second gap while its first replay runs and wait for its end marker. Dropped (as it was
here: "busy"), that wait ran out. A start seq of fewer than 8 bytes is read as vLLM reads it
(``int.from_bytes``, big-endian), and was ignored as malformed. The waiting request is served
after the replay before it ends or is cut because the ring moved past it (it was dropped with
a cut one, unanswered and uncounted), behind the clients already waiting for a place
(NOTE(fair-turns)). A client that left loses it (no one to answer: reason "gone"), and so does
one cut for stalling (reason "stalled").

NOTE(fair-turns): vLLM answers every request in turn, with no cap on open replays; here
MAX_OPEN bounds what waits for non-readers. The waiting request of a client cut for stalling
used to start at once in the place the cut freed: 64 clients that never read and asked again
every 8 s held every place for good, and a client asking every 4 s got none of 12 replays in
48 s (a request past the cap was ignored). Now a request past the cap waits in arrival order
across clients and a freed place goes to the first in line; a finished replay's next request
goes to the back of that line; a client cut for stalling loses its waiting request, and its
requests are ignored for ``STALL`` seconds more (reason "stalled"), so its place goes to
whoever waits or asks meanwhile (tests/events/test_replay_fairness.py). A client is its ZMQ
identity: one that reconnects is a new client, bounded by the same caps all the same.

NOTE(replay-sndbuf): a sender sees a client stop reading only when the client's queue is full,
so what a non-reader can absorb is what it takes from the others' share of SEND_BUDGET before it
is skipped. Without a fixed SO_SNDBUF the kernel's autotuned send buffer (up to tcp_wmem's
4 MB per connection) held ~43,000 small batches beyond REPLAY_HWM: 40 clients that never read
looked like readers for their whole replays and a reading client's replay of 2,000 batches took
4-10 s instead of 0.3 s (tests/events/test_replay_flood.py). Fixed at ``REPLAY_SNDBUF`` (set
before bind: the kernel doubles it), a non-reader is full after a few hundred batches. The cost:
a reader gets ~8 KB per round trip (8 MB/s at 1 ms, ample within a cluster; slower across a WAN).

NOTE(zero-copy): a replayed batch is sent as the ring's own bytes, not a copy (the socket's
``copy_threshold`` is 0), so what waits in a non-reader's queue costs the publisher a frame
header per batch, not the batch: with copies, 4 clients that never read held 256 MB of
250 KB batches (tests/events/test_replay_memory.py).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass

import zmq

from kvpool.events.wire import END_SEQ, encode_seq
from kvpool.throttle import Throttle

__all__ = ["MAX_OPEN", "MAX_WAITING", "REPLAY_HWM", "REPLAY_SNDBUF", "STALL", "ReplayServer"]

log = logging.getLogger("kvpool.events")
REPLAY_HWM = 256  # messages queued per replay client at most (the socket's SNDHWM)
REPLAY_SNDBUF = 4096  # bytes: the socket's SO_SNDBUF per client, NOTE(replay-sndbuf)
REQUESTS_PER_TURN = 256  # replay requests read per publisher iteration at most
SEND_BUDGET = 256  # replayed batches sent per publisher iteration at most, all clients
MAX_OPEN = 64  # replays open at once, all clients (a router or picker per client)
MAX_WAITING = 64  # clients waiting for a place at most (NOTE(fair-turns))
SLICE = 32  # batches one client gets per turn of the round robin
STALL = 10.0  # seconds a client may read nothing before its replay is cut
MIN_BACKOFF, MAX_BACKOFF = 0.001, 0.05  # seconds between tries to a client whose queue is full


@dataclass(slots=True)
class _Replay:
    cursor: int  # next sequence number to send
    stop: int  # the publisher's next_seq when asked: the replay ends before it
    progress_at: float  # monotonic time of the last message the client took
    retry_at: float = 0.0  # monotonic time before which its full queue is not tried again
    backoff: float = 0.0
    lost: str = ""  # cut so, its client's next request goes too: "gone" (left) or "stalled"


class ReplayServer:
    """Replay requests in, replays out, a bounded amount per ``serve`` call."""

    def __init__(self, sock: zmq.Socket, ring: deque[tuple[int, bytes]], topic: bytes, *,
                 max_open: int = MAX_OPEN, max_waiting: int = MAX_WAITING,
                 stall: float = STALL) -> None:
        self.sock = sock  # the publisher's ROUTER, used by the publisher thread only
        self.ring = ring  # the publisher's, read here between its appends (same thread)
        self.topic = topic
        self.max_open, self.max_waiting, self.stall = max_open, max_waiting, stall
        sock.copy_threshold = 0  # NOTE(zero-copy): every frame sent is referenced, not copied
        self.bad_requests = 0  # malformed requests ignored
        self.ignored = 0  # waiting requests another from their client replaced (NOTE(pending))
        self.orphaned = 0  # waiting requests whose client left (NOTE(pending))
        self.stalled = 0  # requests of a client cut for stalling, dropped (NOTE(fair-turns))
        self.refused = 0  # requests ignored while max_waiting clients waited for a place
        self.cut = 0  # replays stopped before their end marker
        self._open: dict[bytes, _Replay] = {}  # insertion order is the round robin's
        self._pending: dict[bytes, tuple[int, int]] = {}  # NOTE(pending): (seq, next_seq)
        self._line: dict[bytes, tuple[int, int]] = {}  # waiting for a place, arrival order
        self._cooling: dict[bytes, float] = {}  # cut for stalling: ignored until (monotonic)
        self._log = Throttle(60.0)  # each kind of WARNING once a minute at most

    @property
    def waiting(self) -> int:
        """Clients waiting for a place (NOTE(fair-turns))."""
        return len(self._line)

    def serve(self, next_seq: int) -> float:
        """Read requests, send slices; the seconds the publisher may wait for events before
        calling again (0 when work waits now)."""
        more = self._read(next_seq)
        now = time.monotonic()
        sent = self._send_round(now)
        if more or sent:
            return 0.0
        return min((r.retry_at for r in self._open.values()), default=now + 1.0) - now

    def _read(self, next_seq: int) -> bool:
        """At most REQUESTS_PER_TURN requests; True when more may wait."""
        now = time.monotonic()
        for _ in range(REQUESTS_PER_TURN):
            try:
                frames = self.sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return False
            if len(frames) != 3 or frames[1] != b"" or not 1 <= len(frames[2]) <= 8:
                self._malformed(len(frames))
            else:
                self._request(frames[0], (int.from_bytes(frames[2], "big"), next_seq), now)
        return True

    def _request(self, client: bytes, ask: tuple[int, int], now: float) -> None:
        """Start, queue or ignore ``client``'s request ``(seq, next_seq)`` (NOTE(pending),
        NOTE(fair-turns))."""
        if self._cooling.get(client, 0.0) > now:
            self.stalled += 1
        elif client in self._open:
            self.ignored += client in self._pending
            self._pending[client] = ask
        elif client in self._line:
            self.ignored += 1
            self._line[client] = ask  # a later request keeps its place in line
        elif len(self._open) < self.max_open:
            self._start(client, *ask)
        elif len(self._line) < self.max_waiting:
            self._line[client] = ask
        else:
            self._full()

    def _start(self, client: bytes, seq: int, stop: int) -> None:
        """Open ``client``'s replay from ``seq`` (or the oldest batch kept) up to ``stop``."""
        oldest = self.ring[0][0] if self.ring else stop
        self._open[client] = _Replay(max(seq, oldest), stop, time.monotonic())

    def _send_round(self, now: float) -> int:
        """Slices round robin until SEND_BUDGET is spent or nobody can take more."""
        budget, sent_total = SEND_BUDGET, 0
        while budget > 0:
            ready = [c for c, r in self._open.items() if r.retry_at <= now]
            if not ready:
                break
            for client in ready:
                replay = self._open.pop(client)
                sent, keep = self._slice(client, replay, min(SLICE, budget), now)
                if keep:
                    self._open[client] = replay  # back of the queue
                else:
                    self._closed(client, replay.lost, now)
                sent_total += sent
                budget -= max(sent, 1)
                if budget <= 0:
                    break
        return sent_total

    def _closed(self, client: bytes, lost: str, now: float) -> None:
        """A replay ended or was cut: its client's waiting request goes to the back of the
        line, or is dropped (``lost``); free places go to the first in line (NOTE(fair-turns))."""
        waiting = self._pending.pop(client, None)
        if lost == "stalled":
            self._cooling = {c: t for c, t in self._cooling.items() if t > now}
            self._cooling[client] = now + self.stall
            self.stalled += waiting is not None
        elif lost == "gone":
            self.orphaned += waiting is not None
        elif waiting is not None:
            self._line[client] = waiting
        while self._line and len(self._open) < self.max_open:
            first = next(iter(self._line))
            self._start(first, *self._line.pop(first))

    def _slice(self, client: bytes, replay: _Replay, limit: int, now: float) -> tuple[int, bool]:
        """Send up to ``limit`` batches (or the end marker); (sent, replay still open)."""
        oldest = self.ring[0][0] if self.ring else replay.stop
        if replay.cursor < oldest:
            return 0, self._cut("the ring moved past its replay")
        sent = 0
        try:
            while sent < limit:
                if replay.cursor >= replay.stop:
                    self.sock.send_multipart((client, b"", b"", END_SEQ, b""), zmq.NOBLOCK)
                    return sent + 1, False
                seq, payload = self.ring[replay.cursor - oldest]
                self.sock.send_multipart((client, b"", self.topic, encode_seq(seq), payload),
                                         zmq.NOBLOCK, copy=False)  # NOTE(zero-copy)
                replay.cursor += 1
                sent += 1
        except zmq.Again:  # its queue is at REPLAY_HWM: try again later, or cut it
            if sent == 0 and now - replay.progress_at > self.stall:
                replay.lost = "stalled"  # NOTE(fair-turns)
                return 0, self._cut(f"a client read nothing for {self.stall:g} s")
            replay.backoff = MIN_BACKOFF if sent else min(2 * replay.backoff or MIN_BACKOFF,
                                                          MAX_BACKOFF)
            replay.retry_at = now + replay.backoff
        except zmq.ZMQError:  # EHOSTUNREACH (ROUTER_MANDATORY): the client left
            replay.lost = "gone"
            return sent, self._cut("a client disconnected")
        if sent:
            replay.progress_at = now
        return sent, True

    def _warn(self, kind: str, msg: str, *args: object) -> None:
        """A WARNING of this kind at most once a minute: a flood must not flood the log."""
        if self._log.due(kind):
            log.warning(msg, *args)

    def _malformed(self, frames: int) -> None:
        """Count a malformed request (logged at most once a minute)."""
        self.bad_requests += 1
        self._warn("malformed", "kv events: ignored a malformed replay request (%d frames; %d "
                   "so far); send [b'', 8-byte big-endian seq] from a DEALER", frames,
                   self.bad_requests)

    def _full(self) -> None:
        """Count a request refused with every place taken and the line full (logged at most
        once a minute)."""
        self.refused += 1
        self._warn("full", "kv events: ignored a replay request: %d replays are open and %d "
                   "clients wait already (%d refused so far); clients that connect to the "
                   "replay socket and never read hold their places until cut", self.max_open,
                   self.max_waiting, self.refused)

    def _cut(self, why: str) -> bool:
        """Count a cut replay (logged at most once a minute)."""
        self.cut += 1
        self._warn("cut", "kv events: a replay was cut short (%s; %d cut so far): a client "
                   "must keep reading its replay up to the end marker", why, self.cut)
        return False
