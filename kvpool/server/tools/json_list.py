"""Formats whose calls are one JSON array of ``{"name", "arguments"}`` objects after a marker::

    granite         <|tool_call|>[{"name": "f", "arguments": {...}}, ...]     (Granite 3.0)
                    <tool_call>[{"name": "f", "arguments": {...}}]            (Granite 3.1)
    jamba           <tool_calls>[{"name": "f", "arguments": {...}}]</tool_calls>
    hunyuan_a13b    the same as jamba
    phi4_mini_json  functools[{"name": "f", "arguments": {...}}]

(``parameters`` is read as ``arguments``, as everywhere: tools/calls.py.) The content is the
text before the marker. The calls are the array's objects in order up to the first that is
no call; an array that is not one is plain content. A stream reads each call as its object
closes: only braces count as brackets (``brackets``), so the depth comes back to 0 at the end
of every element, not only at the array's (tools/tool_text.py); a reading goes on past the
last element it read (NOTE(resume) in tools/stream.py).
"""

from __future__ import annotations

from kvpool.server.tools.calls import ToolCall, ToolParser, call_from_json
from kvpool.server.tools.scan import balanced_end, json_object

__all__ = ["GraniteParser", "JambaParser", "JsonListParser", "Phi4MiniJsonParser"]

_BLANKS = " \t\r\n"


class JsonListParser(ToolParser):
    """A format of one JSON array of calls after one of ``markers``."""

    brackets = "{}"  # each element closes at depth 0 (the module's docstring)
    keeps_special_tokens = True  # the markers are special tokens of these tokenizers

    def calls_from(self, text: str, pos: int, seen: int) -> tuple[tuple[ToolCall, ...], int]:
        """From a marker at ``pos`` (the first reading) or past the last element read, the
        calls whose objects have closed; where the next reading goes on, -1 once the array
        ends or holds something that is no call."""
        start = self._into_array(text, pos)
        if start is None:
            return (), pos  # the marker, and the array not begun: read again from it
        pos = start
        calls: list[ToolCall] = []
        while pos >= 0:
            at = _skip(text, pos, _BLANKS + ",")
            if at == len(text):
                break  # the next element has not begun
            if text[at] != "{":
                return tuple(calls), -1  # the array's end, or no object
            end = balanced_end(text, at)
            if end is None:
                break  # still open
            call = call_from_json(json_object(text[at:end]))
            if call is None:
                return tuple(calls), -1
            calls.append(call)
            pos = end
        return tuple(calls), pos

    def _into_array(self, text: str, pos: int) -> int | None:
        """Past the ``[`` that opens the array when a marker stands at ``pos`` (-1: no array
        follows it; None: nothing follows it yet); ``pos`` itself inside the array."""
        marker = next((m for m in self.markers if text.startswith(m, pos)), None)
        if marker is None:
            return pos
        at = _skip(text, pos + len(marker), _BLANKS)
        if at == len(text):
            return None
        return at + 1 if text[at] == "[" else -1


def _skip(text: str, pos: int, chars: str) -> int:
    while pos < len(text) and text[pos] in chars:
        pos += 1
    return pos


class GraniteParser(JsonListParser):
    """``--tool-call-parser granite`` (IBM Granite 3.0 and 3.1)."""

    name = "granite"
    markers = ("<|tool_call|>", "<tool_call>")


class JambaParser(JsonListParser):
    """``--tool-call-parser jamba`` (AI21 Jamba; ``hunyuan_a13b`` writes the same)."""

    name = "jamba"
    markers = ("<tool_calls>",)


class Phi4MiniJsonParser(JsonListParser):
    """``--tool-call-parser phi4_mini_json`` (Phi-4-mini)."""

    name = "phi4_mini_json"
    markers = ("functools",)
