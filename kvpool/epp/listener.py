"""The picker's listening socket: its connections (kvpool.epp.h2), the limits they share, a cap
on how many are open at once and a stop that cannot wait on a peer for ever (docs/epp.md).

Limits, each a constructor parameter (``kvpool epp`` flags in cli.py)::

    max_message            the largest gRPC message (its 5-byte length read, never its body,
                           past it: RESOURCE_EXHAUSTED)
    max_connection_bytes   DATA bytes one connection's open calls may hold: its flow-control
                           window (NOTE(buffer-cap) in h2.py; its oldest holders end when it is
                           nearly full, NOTE(window-room) in room.py); each stream's window is
                           one largest message, so this is at least that
    max_connections        open connections; past it a new one gets SETTINGS and GOAWAY
                           ENHANCE_YOUR_CALM and is closed unread (NOTE(connection-cap))
    max_held_bytes         DATA bytes all connections' calls may hold together; past it the
                           connection holding the most is cut (NOTE(held-budget)); at least
                           max_connection_bytes, so no connection alone passes it
    max_open_streams       calls open on all connections together; past it a new stream is
                           refused with RST_STREAM REFUSED_STREAM (NOTE(stream-cap)); so is
                           a connection's stream past its own STREAMS, and any new stream
                           on a connection going away (counted by cause in
                           ``streams_refused``)
    preface_timeout        seconds for a new connection's client preface (NOTE(preface-timeout))
    first_message_timeout  seconds a call may wait for its first message (NOTE(first-message)
                           in silence.py)
    idle_timeout           seconds a connection may stay without a call open before it is
                           closed gracefully (0: never; NOTE(idle-timeout) in h2.py)
    close_timeout          seconds a closing connection may take to flush (NOTE(close-timeout))

NOTE(connection-cap): every open connection costs a descriptor and up to its buffer cap, so
their number is bounded too; the refusals are counted (``refused``) and logged as one WARNING
per WARN_INTERVAL at most, with the count since the last one, since a client can retry at will;
what came after a WARNING is said an interval later or at the stop, as for each WARNING here
(NOTE(said-counts) in kvpool/throttle.py). Before refusing, a connection without a call makes
room (NOTE(make-room)).

NOTE(held-budget): the windows bound each connection, not their sum (max_connections x
max_connection_bytes: 64 GiB with the defaults), so the server also counts what all calls hold
(``buffered``, the connections' own counts summed as they change) against ``max_held_bytes``.
A DATA frame that would take the sum past it first cuts the connection holding the most (the
frame's sender counted with the frame): GOAWAY ENHANCE_YOUR_CALM, its calls dropped and its
bytes let go, as when a connection passes its own window; the frame is then taken, unless its
sender was the one cut. The largest holder, not the sender, because the sender may be a client
keeping to its windows with one small body while another holds most of the budget: cutting the
sender would let a hoarder, itself within its windows, refuse everyone else, and cutting the
largest frees the most bytes for the fewest calls lost. Flow control cannot do this instead: a
connection's window, once granted, cannot be taken back, so windows summing to the budget
would be 1 MiB each for 1024 connections (less than one 4 MiB body), or the first connections
would keep it all. The cuts are counted
(``cut``) and logged as one WARNING per WARN_INTERVAL at most with the count since the last.

NOTE(answer-budget): the bytes of an answer a call holds back (kvpool/epp/answers.py: a model
restore's cut SSE event or JSON head, a Responses id's first bytes) count in ``buffered`` too
(``kept``), or open calls x --max-body-bytes would bound them (32 GiB at the defaults). Answers
together take at most half the budget, so request bytes always keep the other half before
answers could make a DATA frame cut a connection; a call that would pass either gives up its
answer (its held bytes go on unchanged) instead of cutting anyone.

NOTE(stream-cap): each connection may open STREAMS calls (kvpool.epp.h2; its
SETTINGS_MAX_CONCURRENT_STREAMS), and max_connections connections may be open, so without a
cap of its own the process would keep 1024 x 1024 calls' state (a task, a message queue, the
service's per-call state: about 5.1 KB an idle call, measured with tracemalloc over 1023 calls
of the real service on one connection; ~5.3 GB) for clients that send nothing more than one
HEADERS frame each. ``max_open_streams`` bounds their sum: DEFAULT_MAX_OPEN_STREAMS (8192, about
42 MB of such state) is eight connections full at their own cap. Envoy opens one ext_proc call
per request in flight and the picker ends each at its decision (milliseconds), so one Envoy's
thousands of requests in flight fit with room. At the cap, as at the held-bytes budget, the
connection with the most calls open (the one asking counted with its new call, and winning
ties) goes first, after any connection whose calls have all stayed silent (below): another
connection is cut (GOAWAY ENHANCE_YOUR_CALM, its calls dropped,
counted in ``cut``) and the new call is opened; when the one asking holds the most, its new
call is answered RST_STREAM REFUSED_STREAM (RFC 9113 8.7: not processed, safe to retry) and
the connection and its other calls go on. First come, first served would have let eight
connections of 1024 idle calls each refuse every call of Envoy's. Refusals are counted
(``streams_refused``) and logged as one WARNING per WARN_INTERVAL at most, with the count since
the last one. Calls that never sent a message (NOTE(first-message) in silence.py) go before
that rule: at the cap, another connection whose calls have all stayed silent (the most such
calls first) is cut, whatever its count, and the new call is taken. With ties going to the
asker alone, 32 connections holding one silent call each at --max-open-streams 32 refused
every call of Envoy's (one call against one), and eight silent calls each at the default cap
refused Envoy whenever it had eight open; a connection whose calls are all silent loses no
work when cut, and Envoy's first message comes with its HEADERS.

NOTE(make-room): at the cap, before a new connection is refused, the open connection that has
had no call open the longest (the one that never sent a preface included), or whose calls have
all stayed silent (none sent a message: NOTE(first-message) in silence.py), retires as an idle
one does (NOTE(idle-timeout) in h2.py: GOAWAY NO_ERROR, then the bounded close) and stops
counting against the cap; the longest since a call of it ended (or it began) goes first. So
connections that hold slots without calls, or with calls that never speak, cannot keep Envoy
out even within --idle-timeout and --first-message-timeout (one silent call per connection on
all 1024 did); a connection with a call that sent a message is never touched. At most
max_connections connections retire at once (each within close_timeout), so descriptors stay
bounded at twice the cap.

NOTE(preface-timeout): a connection whose client preface has not come within
``preface_timeout`` seconds is closed: silent connections would otherwise hold a descriptor
each for ever (20k of them left none for Envoy's own connections).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Callable

from kvpool.epp.calls import (DEFAULT_WINDOW, ENHANCE_YOUR_CALM, ENVELOPE, MAX_WINDOW, OK,
                              STATUS_NAMES, Handler)
from kvpool.epp.h2 import STREAMS, Connection
from kvpool.epp.preface import ADVICE, PREFACE_REASONS
from kvpool.epp.room import WindowRoom
from kvpool.throttle import Throttle

__all__ = ["CLOSE_TIMEOUT", "DEFAULT_CONNECTION_BYTES", "DEFAULT_HELD_BYTES",
           "DEFAULT_MAX_CONNECTIONS", "DEFAULT_MAX_OPEN_STREAMS", "FIRST_MESSAGE_TIMEOUT",
           "IDLE_TIMEOUT", "PREFACE_TIMEOUT", "REFUSALS", "Server"]

log = logging.getLogger("kvpool.epp")

PREFACE_TIMEOUT = 10.0  # NOTE(preface-timeout)
FIRST_MESSAGE_TIMEOUT = 10.0  # NOTE(first-message) in silence.py; docs/epp.md says why 10 s
IDLE_TIMEOUT = 60.0  # NOTE(idle-timeout) in h2.py; docs/epp.md says why 60 s
CLOSE_TIMEOUT = 2.0  # NOTE(close-timeout)
DEFAULT_MAX_CONNECTIONS = 1024  # NOTE(connection-cap): Envoy needs a few per worker
DEFAULT_CONNECTION_BYTES = 64 << 20  # NOTE(buffer-cap)
DEFAULT_HELD_BYTES = 1 << 30  # NOTE(held-budget): 16 connections' full default windows
DEFAULT_MAX_OPEN_STREAMS = 8192  # NOTE(stream-cap): eight connections at their own cap
# why a new stream was refused (the label of kvpool_epp_streams_refused_total): the process's
# open call cap (NOTE(stream-cap)), its connection's own SETTINGS_MAX_CONCURRENT_STREAMS, or
# its connection going away (a GOAWAY received, or sent: a stop, NOTE(idle-timeout) in h2.py)
REFUSALS = ("max_open_streams", "max_concurrent_streams", "going_away")
WARN_INTERVAL = 10.0  # seconds between two WARNINGs of one kind (cap reached, budget passed)
# the WARNINGs (NOTE(said-counts) in kvpool/throttle.py): %(n)d, the count since the last one
REFUSED = ("kvpool epp: connection cap reached: %(open)d open (--max-connections %(cap)d); closed "
           "%(n)d new connection(s) since the last report")
STREAMS_REFUSED = ("kvpool epp: open stream cap reached: %(calls)d calls open on %(conns)d "
                   "connection(s) (--max-open-streams %(cap)d); refused %(n)d new stream(s) "
                   "since the last report")
NO_H2C = "kvpool epp: closed %(n)d connection(s) since the last report that sent %(what)s"
SILENCED = ("kvpool epp: ended %(n)d call(s) since the last report that sent no message within "
            "--first-message-timeout %(timeout)gs (DEADLINE_EXCEEDED); Envoy sends its first at "
            "once, so a client is holding calls open%(full)s")
CUT = ("kvpool epp: closed %(n)d connection(s) since the last report, the latest for %(why)s (it "
       "held %(bytes)d bytes and %(calls)d calls); %(held)d bytes held of the process-wide "
       "budget --max-held-bytes %(budget)d, %(open)d calls open of --max-open-streams %(cap)d, "
       "on %(conns)d connection(s)")


class Server:
    """Listens on ``host:port``; each connection's streams run ``handler``."""

    def __init__(self, handler: Handler, max_message: int, *,
                 max_connection_bytes: int = DEFAULT_CONNECTION_BYTES,
                 max_connections: int = DEFAULT_MAX_CONNECTIONS,
                 max_held_bytes: int = DEFAULT_HELD_BYTES,
                 max_open_streams: int = DEFAULT_MAX_OPEN_STREAMS,
                 preface_timeout: float = PREFACE_TIMEOUT, close_timeout: float = CLOSE_TIMEOUT,
                 idle_timeout: float = IDLE_TIMEOUT,
                 first_message_timeout: float = FIRST_MESSAGE_TIMEOUT,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stream_window = self.check(max_message, max_connection_bytes, max_connections,
                                        max_held_bytes, max_open_streams, idle_timeout,
                                        first_message_timeout)
        self.handler, self.max_message = handler, max_message
        self.max_connection_bytes, self.max_connections = max_connection_bytes, max_connections
        self.max_held_bytes, self.max_open_streams = max_held_bytes, max_open_streams
        self.open_streams = 0  # calls open on all connections (NOTE(stream-cap))
        # new streams refused, by REFUSALS' cause (monotonic)
        self.streams_refused: Counter[str] = Counter(dict.fromkeys(REFUSALS, 0))
        # calls ended with each gRPC status but OK (monotonic; kvpool_epp_calls_failed_total)
        self.failed: Counter[int] = Counter(dict.fromkeys(STATUS_NAMES, 0))
        self.buffered = 0  # DATA bytes all open calls hold, answer bytes too (NOTE(held-budget))
        self.kept = 0  # of those, answer bytes the calls hold back (NOTE(answer-budget))
        self.cut = 0  # connections cut (monotonic)
        self.preface_timeout, self.close_timeout = preface_timeout, close_timeout
        self.idle_timeout, self.first_message_timeout = idle_timeout, first_message_timeout
        self.idle_closed = 0  # connections closed for want of a call (monotonic)
        self.connections: set[Connection] = set()
        self.retiring: set[Connection] = set()  # closing for want of a call (NOTE(make-room))
        self.refused = 0  # connections closed at once over the cap (monotonic)
        # connections closed for want of the HTTP/2 preface, by preface.py's reason (monotonic)
        self.not_h2c: Counter[str] = Counter(dict.fromkeys(PREFACE_REASONS, 0))
        self.warnings = warnings = Throttle(WARN_INTERVAL, clock)  # NOTE(said-counts) in it
        self.said_refused = warnings.tally("", log, REFUSED)
        self.said_cut = warnings.tally("budget", log, CUT)
        self.said_streams = warnings.tally("streams", log, STREAMS_REFUSED)
        self.said_silent = warnings.tally("silent", log, SILENCED)
        self.said_h2c = {r: warnings.tally("preface " + r, log, NO_H2C) for r in PREFACE_REASONS}
        self.room = WindowRoom(max_connection_bytes, self.stream_window, self.warnings)
        self.clock = clock  # the connections' reset budgets' (NOTE(rapid-reset) in h2.py)
        self.server: asyncio.AbstractServer | None = None

    @staticmethod
    def check(max_message: int, max_connection_bytes: int, max_connections: int,
              max_held_bytes: int, max_open_streams: int, idle_timeout: float,
              first_message_timeout: float) -> int:
        """ValueError naming the first of these limits that cannot work; else a stream's
        window."""
        # one largest message, never below HTTP/2's default (a peer may send that much before
        # it reads our SETTINGS)
        stream_window = max(max_message + ENVELOPE, DEFAULT_WINDOW)
        if not stream_window <= max_connection_bytes <= MAX_WINDOW:
            raise ValueError(f"max_connection_bytes={max_connection_bytes}: use at least "
                             f"{stream_window} (a largest message of {max_message} "
                             f"bytes and its envelope) and at most {MAX_WINDOW}")
        if max_connections < 1 or max_open_streams < 1:
            raise ValueError(f"max_connections={max_connections!r}, max_open_streams="
                             f"{max_open_streams!r}: use positive counts")
        if max_held_bytes < max_connection_bytes:
            raise ValueError(f"max_held_bytes={max_held_bytes}: use at least "
                             f"max_connection_bytes ({max_connection_bytes})")
        if not 0 <= idle_timeout < float("inf"):
            raise ValueError(f"idle_timeout={idle_timeout!r}: use a finite number of seconds "
                             "at least 0 (0: never)")
        if not 0 < first_message_timeout < float("inf"):
            raise ValueError(f"first_message_timeout={first_message_timeout!r}: use a finite "
                             "number of seconds above 0")
        return stream_window

    async def start(self, host: str, port: int) -> int:
        """The bound port."""
        self.server = await asyncio.get_running_loop().create_server(
            lambda: Connection(self.handler, self), host, port)
        return self.server.sockets[0].getsockname()[1]

    def admit(self, conn: Connection) -> bool:
        """Count ``conn`` in, or refuse it (False) at the cap (NOTE(connection-cap)); at the
        cap the connection longest without a call makes room first (NOTE(make-room))."""
        if len(self.connections) - len(self.retiring) >= self.max_connections:
            self.make_room()
        if len(self.connections) - len(self.retiring) < self.max_connections:
            self.connections.add(conn)
            return True
        self.refused += 1
        self.said_refused.add(open=len(self.connections), cap=self.max_connections)
        return False

    def release(self, conn: Connection) -> None:
        self.connections.discard(conn)
        self.retiring.discard(conn)

    def make_room(self) -> None:
        """NOTE(make-room): the open connection without a call, or with silent calls only, the
        longest (none going away or closing) retires and leaves the count, while fewer than
        max_connections retire."""
        if len(self.retiring) >= self.max_connections:
            return
        idle = [c for c in self.connections if len(c.silent) == len(c.streams) and not (
            c.going_away or c.transport is None or c.transport.is_closing())]
        if idle:
            oldest = min(idle, key=lambda c: c.idle_since)
            self.retire(oldest)

    def retire(self, conn: Connection) -> None:
        """Close ``conn`` gracefully for want of a call (no call open for ``idle_timeout``
        seconds, or the longest without one, or with silent calls only, at the cap): GOAWAY
        NO_ERROR, closed after ``close_timeout``; counted, and no longer counted against the cap
        (NOTE(idle-timeout) in h2.py, NOTE(make-room))."""
        conn.go_away(self.close_timeout)
        self.retiring.add(conn)
        self.idle_closed += 1
        log.debug("kvpool epp: closing a connection without a call, or with silent calls only "
                  "(--idle-timeout %gs, or the connection cap reached)", self.idle_timeout)

    def open_stream(self, conn: Connection) -> bool:
        """Count a new call of ``conn`` in, or refuse it (False, counted by cause): ``conn``
        is going away or at its own STREAMS; at the process's cap cut another connection
        first (``cut_for``), or refuse the call when none is (NOTE(stream-cap))."""
        if conn.going_away or len(conn.streams) >= STREAMS:
            self.streams_refused["going_away" if conn.going_away
                                 else "max_concurrent_streams"] += 1
            return False
        if self.open_streams >= self.max_open_streams:
            self.cut_for(conn)
        if self.open_streams < self.max_open_streams:
            self.open_streams += 1
            return True
        self.streams_refused["max_open_streams"] += 1
        self.said_streams.add(calls=self.open_streams, conns=len(self.connections),
                              cap=self.max_open_streams)
        return False

    def cut_for(self, conn: Connection) -> None:
        """At the open call cap, a new call of ``conn``'s: cut the other connection with the
        most calls, all silent, or else the one with the most calls when that is not ``conn``
        (NOTE(stream-cap))."""
        silent = [c for c in self.connections
                  if c is not conn and c.streams and len(c.silent) == len(c.streams)]
        if silent:
            return self.cut_largest(max(silent, key=lambda c: len(c.streams)),
                                    "holding only silent calls at --max-open-streams")
        most = max(self.connections, key=lambda c: (len(c.streams) + 1, 1) if c is conn
                   else (len(c.streams), 0))
        if most is not conn:
            self.cut_largest(most, "holding the most calls at --max-open-streams")

    def refuse_preface(self, reason: str) -> None:
        """A connection closed for want of the HTTP/2 preface (preface.py's ``reason``):
        counted, and one WARNING per reason per WARN_INTERVAL at most, with the count and
        the fix (NOTE(plaintext-h2c) in preface.py)."""
        self.not_h2c[reason] += 1
        self.said_h2c[reason].add(what=ADVICE.get(
            reason, f"no HTTP/2 preface within {self.preface_timeout:g}s"))

    def silenced(self, n: int, conn: Connection) -> None:
        """``n`` calls of ``conn`` were ended for want of a first message: one WARNING per
        WARN_INTERVAL at most, with the count and, when ``conn``'s window was full, that too
        (NOTE(first-message) in silence.py)."""
        self.said_silent.add(n, timeout=self.first_message_timeout, full=self.room.full(conn))

    def ended(self, status: int) -> None:
        """A call's trailers say ``status``: counted unless OK (NOTE(scrape-time) in
        metrics.py)."""
        if status != OK:
            self.failed[status] += 1

    def close_streams(self, n: int) -> None:
        """``n`` calls ended (NOTE(stream-cap))."""
        self.open_streams -= n

    def hold(self, conn: Connection, n: int) -> bool:
        """Count ``n`` more bytes held by ``conn``'s calls, cutting the largest holder first
        while the sum would pass the budget; False when ``conn`` was cut (NOTE(held-budget))."""
        while self.buffered + n > self.max_held_bytes:
            largest = max(self.connections,
                          key=lambda c: (c.buffered + n, 1) if c is conn else (c.buffered, 0))
            self.cut_largest(largest, "holding the most bytes at the budget")
            if largest is conn:
                return False
        self.buffered += n
        return True

    def let_go(self, n: int) -> None:
        """``n`` bytes a connection's calls held are let go (NOTE(held-budget))."""
        self.buffered -= n

    def keep(self, n: int) -> bool:
        """Count ``n`` more answer bytes a call holds back; False, nothing counted, past half
        the budget for answers or past the budget (NOTE(answer-budget))."""
        if self.kept + n > self.max_held_bytes // 2 or self.buffered + n > self.max_held_bytes:
            return False
        self.kept += n
        self.buffered += n
        return True

    def unkeep(self, n: int) -> None:
        """``n`` answer bytes counted by ``keep`` are let go."""
        self.kept -= n
        self.buffered -= n

    def cut_largest(self, conn: Connection, why: str) -> None:
        """End ``conn`` with GOAWAY ENHANCE_YOUR_CALM: the largest holder at the held-bytes
        budget or the open-call cap, or a peer resetting calls too fast (``why``, for the log):
        counted, logged (throttled)."""
        self.cut += 1
        self.said_cut.add(why=why, bytes=conn.buffered, calls=len(conn.streams),
                          held=self.buffered, budget=self.max_held_bytes, open=self.open_streams,
                          cap=self.max_open_streams, conns=len(self.connections))
        conn.fail(ENHANCE_YOUR_CALM)

    async def stop(self, grace: float) -> None:
        """No new connection or stream; streams in flight get ``grace`` seconds to finish,
        then every connection closes within ``close_timeout`` (NOTE(close-timeout))."""
        if self.server is None:
            return
        self.server.close()
        for conn in list(self.connections):
            conn.go_away()
        await self.settle(grace, lambda: any(c.streams for c in self.connections))
        for conn in list(self.connections):
            conn.close()
        # each close aborts itself at its timeout; the margin is for the loop to run that
        await self.settle(self.close_timeout + 1, lambda: bool(self.connections))
        await self.server.wait_closed()
        self.server = None
        self.warnings.flush()  # each WARNING's count since its last (NOTE(said-counts))

    @staticmethod
    async def settle(limit: float, busy: Callable[[], bool]) -> None:
        """Wait while ``busy()``, at most ``limit`` seconds."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limit
        while busy() and loop.time() < deadline:
            await asyncio.sleep(0.05)
