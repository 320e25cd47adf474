"""A connection's calls that have not sent their first message yet, and the bound on how long
they may stay so (docs/epp.md, "Silent calls").

NOTE(first-message): Envoy sends a call's first ProcessingRequest (request_headers) in the same
write as the HEADERS that open it, so a call that has sent no message is one Envoy never makes.
Such calls cost a client one HEADERS frame each, and without a bound they were kept for ever:
1024 connections holding one each locked Envoy out of the picker (every connection slot held by
a connection with a call open, which make-room never touched, and at --max-open-streams the
connection asking lost every tie). A call whose first message has not come within the server's
``first_message_timeout`` seconds (--first-message-timeout) is ended DEADLINE_EXCEEDED (its
trailers; its late frames dropped), counted in kvpool_epp_calls_failed_total{code} and logged
as one WARNING every 10 s at most with the count, the rest said within 10 s or at the stop
(NOTE(said-counts) in kvpool/throttle.py). The count of such calls per connection also
lets the caps take them first (NOTE(make-room) and NOTE(stream-cap) in listener.py). One timer
per connection, armed once per period: calls are kept in the order they opened, which is
their deadlines' order, so each firing ends the expired ones at the front and is armed again
for the next deadline; a first message only drops its call's entry.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from kvpool.epp.calls import DEADLINE_EXCEEDED

if TYPE_CHECKING:
    from kvpool.epp.h2 import Connection

__all__ = ["FIRST_MESSAGE_DETAIL", "SilentCalls"]

FIRST_MESSAGE_DETAIL = "no message within --first-message-timeout"


class SilentCalls:
    """``conn``'s open calls that have sent no message yet, each ended past ``timeout``
    seconds (NOTE(first-message))."""

    def __init__(self, conn: Connection, timeout: float) -> None:
        self.conn, self.timeout = conn, timeout
        self.deadlines: dict[int, float] = {}  # stream id -> loop time, in opening order
        self.timer: asyncio.TimerHandle | None = None

    def __len__(self) -> int:
        return len(self.deadlines)

    def opened(self, stream_id: int) -> None:
        """A call opened: silent until its first message (``done``)."""
        loop = asyncio.get_running_loop()
        self.deadlines[stream_id] = loop.time() + self.timeout
        if self.timer is None:
            self.timer = loop.call_later(self.timeout, self.expire)

    def done(self, stream_id: int) -> None:
        """The call sent its first message, or ended."""
        self.deadlines.pop(stream_id, None)

    def clear(self) -> None:
        """The connection is gone: no call left, no timer."""
        self.deadlines.clear()
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def expire(self) -> None:
        """End the calls past their deadline; armed again for the next one."""
        self.timer = None
        loop = asyncio.get_running_loop()
        now, ended = loop.time(), 0
        while self.deadlines:
            stream_id, deadline = next(iter(self.deadlines.items()))
            if deadline > now:
                self.timer = loop.call_later(deadline - now, self.expire)
                break
            del self.deadlines[stream_id]
            stream = self.conn.streams.get(stream_id)
            if stream is not None:
                stream.abort(DEADLINE_EXCEEDED, FIRST_MESSAGE_DETAIL)
                ended += 1
        if ended:
            self.conn.server.silenced(ended, self.conn)
