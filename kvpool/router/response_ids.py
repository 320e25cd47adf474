"""Which response id a relayed Responses API answer carries (affinity.py learns it).

Only the start of an answer is read, never the whole of it::

    a JSON answer     its first SCAN_BYTES: the top-level ``id``, when the same object says
                      ``"object": "response"`` (kvpool serve writes both first)
    an SSE answer     its first MAX_EVENTS events, each event's data read up to SCAN_BYTES:
                      the first whose ``response`` member holds such an object (kvpool serve's
                      ``response.created`` is the first event)

NOTE(scan-bound): members are read in order with the json module's own decoder; a member that
is not wanted is decoded to be skipped and must end within the bytes read, the wanted object
is entered without decoding the rest of it. So a few kilobytes are decoded per answer however
long it is, and an answer whose id comes later than SCAN_BYTES (a huge ``instructions`` ahead
of it) is relayed unlearnt, never misread. Garbage (not UTF-8, not JSON, an id that is not a
string or is longer than MAX_ID_CHARS) teaches nothing.
"""

from __future__ import annotations

import json
import re

__all__ = ["MAX_EVENTS", "MAX_ID_CHARS", "SCAN_BYTES", "StreamIds", "events_end",
           "response_id_in", "usable_id"]

SCAN_BYTES = 64 * 1024  # of an answer (or of one event's data) read for its id
MAX_EVENTS = 8  # SSE events read for the id before the stream is no longer looked at
MAX_ID_CHARS = 256  # kvpool serve's ids are 37 characters ("resp_" + 32 hex digits)
_DECODER = json.JSONDecoder()
_WS = re.compile(r"[ \t\n\r]*")
_EVENT_END = b"\n\n"
_CRLF_END = b"\r\n\r\n"


def events_end(buf: bytes | bytearray, start: int = 0) -> int:
    """Where the last whole SSE event of ``buf`` ends (0: none yet): past its blank line, LF
    or CRLF, searched from ``start`` (upstream.py NOTE(event-boundary))."""
    lf, crlf = buf.rfind(_EVENT_END, start), buf.rfind(_CRLF_END, start)
    return max(lf + len(_EVENT_END) if lf >= 0 else 0,
               crlf + len(_CRLF_END) if crlf >= 0 else 0)


def usable_id(value: object) -> str | None:
    """``value`` when it can name a response here: a string of 1..MAX_ID_CHARS characters."""
    if isinstance(value, str) and 0 < len(value) <= MAX_ID_CHARS:
        return value
    return None


def _skip(text: str, pos: int) -> int:
    return _WS.match(text, pos).end()  # type: ignore[union-attr]  # always matches


def _response_at(text: str, pos: int, dive: str | None) -> str | None:
    """The id of the response object at ``text[pos]`` (or of its member ``dive``)."""
    pos = _skip(text, pos)
    if text[pos] != "{":
        return None
    found: dict[str, object] = {}
    pos = _skip(text, pos + 1)
    while text[pos] == '"':
        key, pos = json.decoder.scanstring(text, pos + 1)
        pos = _skip(text, pos)
        if text[pos] != ":":
            return None
        if key == dive:
            return _response_at(text, pos + 1, None)
        value, pos = _DECODER.raw_decode(text, _skip(text, pos + 1))
        if key in ("id", "object"):
            found[key] = value
            if len(found) == 2:
                return usable_id(found["id"]) if found["object"] == "response" else None
        pos = _skip(text, pos)
        if text[pos] != ",":
            return None
        pos = _skip(text, pos + 1)
    return None


def _scan(data: bytes, dive: str | None) -> str | None:
    text = data[:SCAN_BYTES].decode("utf-8", "replace")  # a cut character: one U+FFFD
    try:
        return _response_at(text, 0, dive)
    except (ValueError, IndexError, RecursionError):  # garbage, or the bytes read ran out
        return None


def response_id_in(body: bytes) -> str | None:
    """The response id of a JSON answer (module docstring), None when it shows none."""
    return _scan(body, None)


class StreamIds:
    """Reads an SSE answer's first events for its response id (``feed`` whole events)."""

    def __init__(self) -> None:
        self.events = 0  # events read so far
        self.found: str | None = None

    @property
    def done(self) -> bool:
        """Nothing more to read: the id was found or MAX_EVENTS went by without it."""
        return self.found is not None or self.events >= MAX_EVENTS

    def feed(self, events: bytes) -> str | None:
        """The id, the first time whole ``events`` (ending with a blank line) show it."""
        if self.done:
            return None
        # an event ends at a blank line, CRLF ones too (upstream.py NOTE(event-boundary))
        events = events.replace(b"\r\n", b"\n")
        for event in events.split(_EVENT_END, MAX_EVENTS):  # no more events than are read
            if not event.strip():
                continue
            self.events += 1
            self.found = _scan(_data_of(event), "response")
            if self.done:
                return self.found
        return None


def _data_of(event: bytes) -> bytes:
    """An event's data: its ``data:`` lines' values joined by newlines (the SSE rule), read
    up to SCAN_BYTES."""
    lines = []
    size = 0
    for line in event[:2 * SCAN_BYTES].splitlines():
        if line.startswith(b"data:"):
            value = line[6:] if line.startswith(b"data: ") else line[5:]
            lines.append(value)
            size += len(value) + 1
            if size > SCAN_BYTES:
                break
    return b"\n".join(lines)
