"""The model the client asked for, put back in the answers to a request ``--model-rewrites``
rewrote (docs/epp.md, "Model rewrite and traffic splitting").

NOTE(model-restore): a replica names the model it served (the rule's target) in its answers;
the client asked for another name and gets that one back, as the Inference Extension's picker
does. What is changed, and only where it equals the target::

    a JSON answer      its top-level ``model`` (chat and text completions, a Responses API
                       response, an Anthropic message)
    an SSE answer      in each event's data, the same member, or that of the event's
                       ``response`` object (the Responses API's response.created, ...) or
                       ``message`` object (Anthropic's message_start)

Members are read in order with the json module's own scanner, up to ``model``: the value of
``model`` is replaced in the bytes, the rest stays byte for byte. Nothing is buffered past what
one answer or one event needs: a JSON answer until its ``model`` member (or its end), an SSE
stream until each event's blank line (an event cut across chunks waits for its end, the events
before it go at once). Past ``limit`` bytes held the bytes go on unchanged (a JSON answer
whose ``model`` comes that late; an SSE event that long, or a stream with no blank line), so
nothing holds more. A data field of several ``data:`` lines, and bytes that are no JSON, are
left as they are. ``ModelRestore.feed`` is plain CPU work; the caller runs a large piece on
a worker thread (kvpool/epp/answers.py).
"""

from __future__ import annotations

import json
import re
from json import scanner

from kvpool.router.response_ids import events_end

__all__ = ["JSON", "SSE", "ModelRestore", "model_span"]

JSON, SSE = "json", "sse"  # the answer kinds restored (by content-type: answers.py)
_scan = scanner.make_scanner(json.JSONDecoder())  # (value, end) of the JSON value at an index
_WS = re.compile(r"[ \t\n\r]*")
_EVENT_END = re.compile(rb"(\r\n\r\n|\n\n)")  # the blank line that ends an SSE event
_DATA = re.compile(rb"^data: ?(.*?)\r?$", re.MULTILINE)
# an object member whose own ``model`` counts: the Responses API's events' ``response``,
# Anthropic's message_start's ``message`` (/v1/messages, docs/architecture.md "The Messages API")
NESTED = ("response", "message")


class _More(Exception):
    """The text ended (or broke) before the object did."""


def _skip(text: str, i: int) -> int:
    return _WS.match(text, i).end()  # type: ignore[union-attr]  # always matches


def _value(text: str, i: int) -> tuple[object, int]:
    try:
        return _scan(text, i)
    except (StopIteration, ValueError):  # cut short, or no JSON at i
        raise _More from None


def _at(text: str, i: int) -> str:
    """The character at ``i`` (_More past the end)."""
    if i >= len(text):
        raise _More
    return text[i]


def model_span(text: str, i: int = 0, nested: tuple[str, ...] = NESTED
               ) -> tuple[int, int, object] | None:
    """(start, end, value) of the ``model`` member of the JSON object at ``text[i:]``, or of
    a ``nested`` member's object; None when it has none (or ``text`` is no object); _More when
    ``text`` ends (or breaks) before that is known."""
    i = _skip(text, i)
    if _at(text, i) != "{":
        return None
    i = _skip(text, i + 1)
    while _at(text, i) != "}":
        key, i = _value(text, i)
        i = _skip(text, i)
        if not isinstance(key, str) or _at(text, i) != ":":
            return None
        i = _skip(text, i + 1)
        if key == "model":
            value, end = _value(text, i)
            return i, end, value
        if key in nested and (found := model_span(text, i, ())) is not None:
            return found
        i = _skip(text, _value(text, i)[1])
        if _at(text, i) == "}":
            return None
        if text[i] != ",":
            return None
        i = _skip(text, i + 1)
    return None


class ModelRestore:
    """One answer's restore (NOTE(model-restore)), fed its body chunk by chunk in order."""

    def __init__(self, asked: str, target: str, kind: str, limit: int) -> None:
        try:
            self.asked = json.dumps(asked, ensure_ascii=False).encode()
        except UnicodeEncodeError:  # a lone surrogate: only its escape is UTF-8 (and JSON)
            self.asked = json.dumps(asked).encode()
        self.target = target
        self.kind = kind
        self.limit = limit
        # the target as it must appear in bytes naming it, when JSON writes it only one way
        # (Go's encoding/json writes <, > and & as \u003c, \u003e, \u0026)
        plain = target.isascii() and target.isprintable() and not set(target) & set('"\\/<>&')
        self.needle = target.encode() if plain else None
        self.held = bytearray()  # bytes not yet given back (a JSON head, an SSE event's start)
        self.passing = False  # JSON: the model was replaced (or cannot be): the rest goes on
        self.tried = 0  # JSON: the bytes held at the last try (tries double, so O(n) in all)

    @property
    def holding(self) -> int:
        return len(self.held)

    def feed(self, chunk: bytes, end: bool) -> bytes:
        """The bytes to send on for ``chunk`` (``end``: the body's last)."""
        return self._sse(chunk, end) if self.kind == SSE else self._json(chunk, end)

    def flush(self, chunk: bytes) -> bytes:
        """What is held and ``chunk``, as they are (the picker stops: the rest goes on)."""
        out, self.held = bytes(self.held) + chunk, bytearray()
        return out

    def _json(self, chunk: bytes, end: bool) -> bytes:
        if self.passing:
            return chunk
        self.held += chunk
        size = len(self.held)
        if not end and size < 2 * self.tried:
            return b""
        self.tried = size
        try:
            out = self.restored(bytes(self.held))
        except _More:
            if not end and size < self.limit:
                return b""
            out = bytes(self.held)  # no JSON object, or its model comes too late: as it is
        self.passing = True
        self.held = bytearray()
        return out

    def _sse(self, chunk: bytes, end: bool) -> bytes:
        # what is held ends no event: only a blank line reaching into ``chunk`` can (each
        # byte searched once; searching all of a long event again per chunk was quadratic)
        searched = max(0, len(self.held) - 3)
        self.held += chunk
        cut = len(self.held) if end else events_end(self.held, searched)
        if not cut:
            if len(self.held) < self.limit:
                return b""
            cut = len(self.held)  # no event ends within the limit: on as it is
        events = bytes(self.held[:cut])
        del self.held[:cut]
        if self.needle is not None and self.needle not in events:
            return events  # no event here names the target (a Responses delta, ...)
        return b"".join(self._event(p) if i % 2 == 0 else p
                        for i, p in enumerate(_EVENT_END.split(events)))

    def _event(self, event: bytes) -> bytes:
        data = list(_DATA.finditer(event))
        if len(data) != 1:
            return event  # no data, or data over several lines: left as it is
        start, end = data[0].span(1)
        try:
            return event[:start] + self.restored(event[start:end]) + event[end:]
        except _More:  # an event whose data is not a whole JSON object
            return event

    def restored(self, raw: bytes) -> bytes:
        """``raw`` (a JSON text) with its model put back (NOTE(model-restore)); _More when it
        ends first."""
        text = raw.decode("utf-8", "surrogateescape")  # byte offsets are counted back below
        span = model_span(text)
        if span is None or span[2] != self.target:
            return raw
        start = len(text[:span[0]].encode("utf-8", "surrogateescape"))
        end = start + len(text[span[0]:span[1]].encode("utf-8", "surrogateescape"))
        return raw[:start] + self.asked + raw[end:]
