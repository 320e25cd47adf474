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

NOTE(closers): a parser whose calls end with a tag (``</function>``, ``<|tool_call_end|>``)
names it in ``closers``, and the text is read again only when a piece completes one. Every
``>`` used to trigger a reading of the whole text so far: an output repeating an unclosed
``<function=f>`` was read once per piece, so a long one cost time quadratic in its length
on the event loop.
"""

from __future__ import annotations

from typing import Any

from kvpool.server.tools.calls import ToolCall, arguments_delta

__all__ = ["ParserStream", "call_deltas", "partial_marker"]

_CLOSERS = frozenset("}])>")


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

    ``text`` holds only what has not gone out as content: in content mode a possible marker's
    start, in tool mode everything from the marker on (calls are read from there; what comes
    before a marker never changes them)."""

    def __init__(self, parser: Any, limit: int | None = None) -> None:
        self.parser = parser
        self.limit = limit  # parallel_tool_calls false: the first call only
        self.text = ""
        self.tool_mode = False
        self.plain = False  # at_start parsers: the output opened with content
        self.calls: list[ToolCall] = []
        self.starts = frozenset(m[0] for m in parser.markers)  # what may open a marker

    @property
    def called(self) -> bool:
        return bool(self.calls)

    def feed(self, piece: str) -> list[dict[str, Any]]:
        if not piece:
            return []
        if self.plain or (not self.text and not self.parser.at_start
                           and self.starts.isdisjoint(piece)):
            return [{"content": piece}]  # nothing held, nothing that may open a marker
        self.text += piece
        if self.tool_mode:
            return self._read_calls() if self._may_close(len(piece)) else []
        if self.parser.at_start:
            return self._opening()
        return self._scan()

    def _may_close(self, added: int) -> bool:
        """Whether the last ``added`` characters may have completed a call: one of the
        parser's ``closers`` ends in them (NOTE(closers)), or, for a parser without any, they
        hold a closing bracket."""
        closers = self.parser.closers
        if not closers:
            return not _CLOSERS.isdisjoint(self.text[-added:])
        tail = self.text[-(added + max(map(len, closers)) - 1):]
        return any(c in tail for c in closers)

    def finish(self) -> list[dict[str, Any]]:
        if not self.tool_mode:
            return self._content(len(self.text))
        out = self._read_calls()
        if not self.calls:  # no call in it: what was held is content after all
            out += self._content(len(self.text))
        return out

    def _content(self, upto: int) -> list[dict[str, Any]]:
        piece, self.text = self.text[:upto], self.text[upto:]
        return [{"content": piece}] if piece else []

    def _opening(self) -> list[dict[str, Any]]:
        head = self.text.lstrip()
        if not head:
            return []
        if any(head.startswith(m) for m in self.parser.markers):
            self.tool_mode = True
            return self._read_calls()
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
        self.tool_mode = True
        return out + self._read_calls()

    def _read_calls(self) -> list[dict[str, Any]]:
        calls = self.parser.extract(self.text).calls[:self.limit]
        new = calls[len(self.calls):]
        first = len(self.calls)
        self.calls += new
        deltas = call_deltas(new, first)
        return [{"content": None, **d} for d in deltas] if self.parser.null_content else deltas
