"""One choice's streamed text -> content deltas and tool-call deltas, read by an auto parser.

The stream holds back what may be a call and reads calls with the same ``extract`` the
non-streamed body uses, over the whole text so far, so the deltas join to the same calls::

    content mode   text before a marker goes out as content; a tail that could be the start
                   of a marker (``<tool_`` of ``<tool_call>``) waits for the next piece
    tool mode      from the marker on nothing is content; each piece that may close a value
                   re-reads the text: every new call goes out as two deltas, vLLM's order
                   ({index, id, type, function.name}, then {index, function.arguments})
    finish         calls not out yet go out; none read at all: the held text is content

A call delta carries ``"content": null`` beside ``tool_calls`` where vLLM 0.33's parser of
that name writes one (its hermes parser sets the content of every delta it makes; its
llama3_json and pythonic parsers do not): the parser's ``null_content``.

A parser with ``at_start`` (llama3_json, pythonic) reads calls only where the output opens
with a marker; an output that opens otherwise is content from its first visible character.

NOTE(closers): the text is read again only when a piece may have completed a call: it ends
one of the parser's ``closers`` (``</function>``, ``<|tool_call_end|>``), or, for the JSON and
Python formats, a closing bracket brings the depth back to 0 (tools/tool_text.py). Every
piece holding a closing bracket or ``>`` used to trigger a reading of the whole text: an
output repeating an unclosed ``<function=f>``, or one long argument full of ``}`` (a file a
coding agent writes), was read once per piece, at a cost quadratic in its length, on the
event loop.

NOTE(resume): a reading asks the parser only for the calls it has not given
(``ToolParser.calls_from``). A parser whose calls stand alone or follow one another (all but
mistral's list and pythonic's, read once they close) goes on from where its last reading ended;
before, each reading parsed every call from the first again, so an output of a thousand calls
(a small model looping) cost seconds. With ``parallel_tool_calls`` false nothing is read
once the first call is.
"""

from __future__ import annotations

from typing import Any

from kvpool.server.tools.calls import ToolCall, arguments_delta
from kvpool.server.tools.tool_text import ToolText

__all__ = ["ParserStream", "call_deltas", "partial_marker"]


def call_deltas(calls: tuple[ToolCall, ...], first: int) -> list[dict[str, Any]]:
    """The stream deltas of ``calls`` (their indexes from ``first``)."""
    out = []
    for k, call in enumerate(calls, first):
        out += [call.opening_delta(k), arguments_delta(k, call.arguments)]
    return out


def partial_marker(text: str, markers: tuple[str, ...]) -> int:
    """Length of the longest tail of ``text`` that opens some marker (a tail always starts
    with a marker's first character, so only those positions are tried)."""
    best = 0
    for m in markers:
        i = text.find(m[0], max(len(text) - len(m) + 1, 0))
        while i >= 0:
            if m.startswith(text[i:]):
                best = max(best, len(text) - i)
                break
            i = text.find(m[0], i + 1)
    return best


class ParserStream:
    """Content and tool-call deltas for one choice, read by ``parser`` as text arrives.

    ``text`` holds only what has not gone out as content, a possible marker's start; from the
    marker on, ``tail`` holds the text (calls are read from there; what comes before a marker
    never changes them)."""

    def __init__(self, parser: Any, limit: int | None = None) -> None:
        self.parser = parser
        self.limit = limit  # parallel_tool_calls false: the first call only
        self.text = ""
        self.tool_mode = False
        self.plain = False  # at_start parsers: the output opened with content
        self.calls: list[ToolCall] = []
        self.tail: ToolText | None = None  # the text from the marker on (tool mode)
        self.resume = 0  # where in it the next reading starts (NOTE(resume)); -1: none
        self.starts = frozenset(m[0] for m in parser.markers)  # what may open a marker

    @property
    def called(self) -> bool:
        return bool(self.calls)

    def feed(self, piece: str) -> list[dict[str, Any]]:
        if not piece:
            return []
        if self.tool_mode:
            return self._read_calls() if self.tail.add(piece) else []
        if self.plain or (not self.text and not self.parser.at_start
                           and self.starts.isdisjoint(piece)):
            return [{"content": piece}]  # nothing held, nothing that may open a marker
        self.text += piece
        if self.parser.at_start:
            return self._opening()
        return self._scan()

    def finish(self) -> list[dict[str, Any]]:
        if not self.tool_mode:
            return self._content(len(self.text))
        out = self._read_calls()
        if not self.calls:  # no call in it: what was held is content after all
            self.text = self.tail.text()
            out += self._content(len(self.text))
        return out

    def _to_tool_mode(self) -> list[dict[str, Any]]:
        """From the marker on (``text``), the tail holds the text; the calls read so far."""
        self.tool_mode = True
        self.tail, self.text = ToolText(self.parser, self.text), ""
        return self._read_calls()

    def _content(self, upto: int) -> list[dict[str, Any]]:
        piece, self.text = self.text[:upto], self.text[upto:]
        return [{"content": piece}] if piece else []

    def _opening(self) -> list[dict[str, Any]]:
        head = self.text.lstrip()
        if not head:
            return []
        if any(head.startswith(m) for m in self.parser.markers):
            return self._to_tool_mode()
        if any(m.startswith(head) for m in self.parser.markers):
            return []  # still may become a marker
        self.plain = True
        return self._content(len(self.text))

    def _scan(self) -> list[dict[str, Any]]:
        found = [i for m in self.parser.markers if (i := self.text.find(m)) >= 0]
        if not found:
            return self._content(len(self.text) - partial_marker(self.text,
                                                                  self.parser.markers))
        out = self._content(min(found))
        return out + self._to_tool_mode()

    def _read_calls(self) -> list[dict[str, Any]]:
        """The deltas of the calls read since the last reading (NOTE(resume))."""
        first = len(self.calls)
        room = None if self.limit is None else self.limit - first
        if room == 0 or self.resume < 0:
            return []
        new, self.resume = self.parser.calls_from(self.tail.text(), self.resume, first)
        new = new[:room]
        self.calls += new
        deltas = call_deltas(new, first)
        return [{"content": None, **d} for d in deltas] if self.parser.null_content else deltas
