"""The response id a Responses API creation's answer carries, read from its first bytes as
Envoy streams them to the picker (picker.py NOTE(learn-answer); the router's NOTE(learn) in
kvpool/router/upstream.py reads the same with kvpool/router/response_ids.py).

A JSON answer: its first SCAN_BYTES, held until they name the id (response_id_in). An SSE
answer: its whole events, up to the last blank line of what came, handed to StreamIds (its
first MAX_EVENTS events); a cut event is held up to 2 * SCAN_BYTES, then given up. So at most
a few tens of kilobytes of an answer are held, however long it is, and ``done`` says when no
more need be read.
"""

from __future__ import annotations

from kvpool.epp.restore import SSE
from kvpool.router.response_ids import SCAN_BYTES, StreamIds, events_end, response_id_in

__all__ = ["AnswerIds"]

_HELD = 2 * SCAN_BYTES  # an SSE event cut across chunks: held up to this, then given up


class AnswerIds:
    """The module docstring, for one answer of ``kind`` (restore.py's JSON or SSE)."""

    def __init__(self, kind: str) -> None:
        self.stream = StreamIds() if kind == SSE else None
        self.held = bytearray()
        self.done = False

    def feed(self, chunk: bytes, end: bool) -> str | None:
        """The id, the first time the bytes so far show it (None: not yet, or never)."""
        if self.done:
            return None
        if self.stream is None:
            self.held += chunk[:SCAN_BYTES - len(self.held)]
            found = response_id_in(bytes(self.held))
            self.done = found is not None or end or len(self.held) >= SCAN_BYTES
        else:
            self.held += chunk[:_HELD - len(self.held)]
            cut = events_end(self.held)
            found = self.stream.feed(bytes(self.held[:cut])) if cut else None
            del self.held[:cut]
            self.done = self.stream.done or end or len(self.held) >= _HELD
        if self.done:
            self.drop()
        return found

    def drop(self) -> None:
        """Read no more: what is held is let go (done, or the process's budget has no room:
        kvpool/epp/listener.py NOTE(answer-budget))."""
        self.done = True
        self.held = bytearray()
