"""Room in a connection's flow-control window for calls other than those holding it
(docs/epp.md, "Bytes held: flow control does the bounding").

NOTE(window-room): one Envoy worker carries every client's ext_proc call on one connection, and
a call's bytes count against that connection's window until the call ends (NOTE(buffer-cap) in
h2.py). Seventeen clients that each sent most of a 4 MiB body and then stopped filled the
default 64 MiB window: Envoy could send no other call's first message, and every other request
through that Envoy was answered 503 after --first-message-timeout while the stalled uploads
were kept. So once a DATA frame leaves the peer less than ``reserve`` (one default window,
64 KiB) of the connection's window, what ended calls let go is given back at once and then the
oldest call holding bytes ends RESOURCE_EXHAUSTED ("connection window full"), then the next,
until that much is free again. Its bytes go back to the window (one WINDOW_UPDATE), so the
next frame of any other call fits, and each frame that fills the window again ends the next
oldest holder. A call not yet answered goes before one that has been (a call in its answer
phase holds one message at most and is serving its client), then the oldest (the lowest stream
id): a stalled upload is old by the time others need the room, Envoy's other calls are
milliseconds old, and a client holding many small bodies loses its own first rather than the
newcomer with a larger body (the largest would have been it). Only a full window costs a call:
below it nothing changes, so size --max-connection-bytes for the bodies in flight per Envoy
worker as before. ``reserve`` is less than one window past one largest call: at the least
--max-connection-bytes it is 0, so one call may fill the window alone and nothing is ended. The
window stays the bound on what a connection holds (the alternative, giving the window back as
each frame comes and bounding only the process's sum, would let one connection take the whole
budget). A peer that ignores the windows with frames under ``reserve`` now has its oldest calls
ended as it goes rather than its connection cut (GOAWAY comes only past the window itself).
The calls ended are counted (``ended``, kvpool_epp_calls_crowded_out_total) and logged as one
WARNING per interval at most with the count since the last; what ended after a WARNING is said
an interval later or at the server's stop (NOTE(said-counts) in kvpool/throttle.py), so the
counts said add up to ``ended``. Before, a burst of 27 ended calls was logged as "ended 1
call(s)".
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from kvpool.epp.calls import DEFAULT_WINDOW, RESOURCE_EXHAUSTED

if TYPE_CHECKING:
    from kvpool.epp.h2 import Connection
    from kvpool.throttle import Throttle

__all__ = ["WINDOW_FULL", "WindowRoom"]

log = logging.getLogger("kvpool.epp")

WINDOW_FULL = "connection window full"  # the ended call's grpc-message
WARNING = ("kvpool epp: ended %(n)d call(s) since the last report, the oldest holding bytes when "
           "their connection's window was full (--max-connection-bytes %(window)d; "
           "RESOURCE_EXHAUSTED): a client holds unfinished bodies, or raise the flag for the "
           "bodies in flight")


class WindowRoom:
    """Keeps ``reserve`` bytes of each connection's window free (NOTE(window-room)); counts
    and logs (``warnings``, the server's throttle) the calls it ends, process-wide."""

    def __init__(self, window: int, stream_window: int, warnings: Throttle) -> None:
        self.window = window  # each connection's (--max-connection-bytes)
        self.reserve = min(DEFAULT_WINDOW, window - stream_window)
        self.ended = 0  # calls ended for room (monotonic)
        self.said = warnings.tally("window", log, WARNING)  # NOTE(window-room)

    def left(self, conn: Connection) -> int:
        """What ``conn``'s peer may still send on the connection, as this side counts it."""
        return self.window - conn.buffered - conn.owed

    def full(self, conn: Connection) -> str:
        """For the log of a call ended silent on ``conn`` (NOTE(first-message) in silence.py):
        what its connection's window left, when that may have kept its first message out."""
        left = self.left(conn)
        return "" if left >= DEFAULT_WINDOW else (
            f", or other calls' unfinished bodies filled its connection's window ({left} bytes "
            f"left of --max-connection-bytes {self.window})")

    def keep(self, conn: Connection) -> None:
        """After a DATA frame on ``conn``: below ``reserve`` left, give back what is owed, then
        end the oldest holders (unanswered first) until ``reserve`` is free."""
        if self.left(conn) >= self.reserve:
            return
        conn.give_back(0, now=True)
        ended = 0  # one sort, not a scan per call ended: 1024 calls of 1 byte each cost 1024
        for oldest in sorted((s for s in conn.streams.values() if s.held),
                             key=lambda s: (s.started, s.id)):
            if self.window - conn.buffered >= self.reserve:  # what they let go is owed till below
                break
            oldest.abort(RESOURCE_EXHAUSTED, WINDOW_FULL)
            ended += 1
        conn.give_back(0, now=True)
        if ended:
            self.ended += ended
            self.said.add(ended, window=self.window)
