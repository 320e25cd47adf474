"""``tool_choice`` required / named: the grammar forced the output's shape, so it is read
as it streams, each argument piece going out as soon as it is generated::

    named      the output is the arguments object itself:
               {"city":"Paris"}                    -> one call of the named function
    required   an array of calls (one item when parallel_tool_calls is false):
               [{"name":"a","parameters":{...}},{"name":"b","parameters":{...}}]

The arguments are the generated text as it is (compact JSON: the grammar allows no
whitespace), so the streamed pieces and the non-streamed body carry the same string.

NOTE(cut-required): a required output cut short (``max_tokens``, a stop string) is not a
whole array: as vLLM reads it, the non-streamed body has no call and no text (chat:
no ``tool_calls`` key, ``content`` "" (NOTE(forced-content)), finish ``length``; Responses: no
output item), and a stream sends the
calls whose name was read, as far as they went, else nothing. The body kept those calls,
and a cut before any name gave the JSON text as the message's content.

NOTE(forced-content): the non-streamed chat message of a required or named choice has
``content: ""``, never null, whether calls were read or the output was cut: vLLM 0.33 sets a
forced choice's missing content to the empty string when it assembles the message. A stream
sends no content delta for it (the role delta's ``""`` only), as vLLM's does.
"""

from __future__ import annotations

import json
import re
from typing import Any

from kvpool.server.tools.calls import Extracted, ToolCall, arguments_delta

__all__ = ["CallArrayStream", "NamedStream"]

# one call's head, up to where its parameters value begins (tolerant of whitespace)
_HEAD = re.compile(r'[\s\[,]*\{\s*"name"\s*:\s*("(?:[^"\\]|\\.)*")\s*,\s*"parameters"\s*:\s*')


class NamedStream:
    """The named function's call: every piece of the output is a piece of its arguments."""

    def __init__(self, name: str) -> None:
        self.call = ToolCall(name, "")
        self.called = False

    def feed(self, piece: str) -> list[dict[str, Any]]:
        if not piece:
            return []
        out = [] if self.called else [self.call.opening_delta(0)]
        self.called = True
        return out + [arguments_delta(0, piece)]

    def finish(self) -> list[dict[str, Any]]:
        return []

    @staticmethod
    def extract(name: str, text: str) -> Extracted:
        return Extracted(None, (ToolCall(name, text),))


class CallArrayStream:
    """The calls of a grammar-forced array, read character by character as they arrive."""

    def __init__(self) -> None:
        self.text = ""
        self.pos = 0  # characters read
        self.names: list[str] = []
        self.args: list[list[str]] = []
        self.in_args = False  # inside a parameters value
        self.depth = 0
        self.quoted = False
        self.escaped = False
        self.ids: list[str] = []

    @property
    def called(self) -> bool:
        return bool(self.names)

    def feed(self, piece: str) -> list[dict[str, Any]]:
        self.text += piece
        out: list[dict[str, Any]] = []
        while self.pos < len(self.text):
            before = self.pos
            out += self._value() if self.in_args else self._head()
            if self.pos == before:
                break  # the rest is not complete yet
        return out

    def finish(self) -> list[dict[str, Any]]:
        """Nothing more: an array cut short is never content (NOTE(cut-required))."""
        return []

    def _head(self) -> list[dict[str, Any]]:
        m = _HEAD.match(self.text, self.pos)
        if m is None:
            return []
        self.pos, self.in_args = m.end(), True
        self.names.append(json.loads(m.group(1)))
        self.args.append([])
        call = ToolCall(self.names[-1], "")
        self.ids.append(call.id)
        return [call.opening_delta(len(self.names) - 1)]

    def _value(self) -> list[dict[str, Any]]:
        start, end = self.pos, self._value_end()
        piece = self.text[start:end]
        k = len(self.names) - 1
        if piece:
            self.args[k].append(piece)
        return [arguments_delta(k, piece)] if piece else []

    def _value_end(self) -> int:
        """Consume the parameters value up to its end (or the text's); leave args at the end."""
        for i in range(self.pos, len(self.text)):
            ch = self.text[i]
            if self.escaped:
                self.escaped = False
            elif self.quoted:
                self.escaped = ch == "\\"
                self.quoted = ch != '"'
            elif ch == '"':
                self.quoted = True
            elif ch in "{[":
                self.depth += 1
            elif ch in "}]" and self.depth > 0:
                self.depth -= 1
            elif ch in "}," and self.depth == 0:
                self.in_args, self.pos = False, i + 1
                return i
        self.pos = len(self.text)
        return self.pos

    def calls(self) -> tuple[ToolCall, ...]:
        return tuple(ToolCall(n, "".join(a), i)
                     for n, a, i in zip(self.names, self.args, self.ids))

    @classmethod
    def extract(cls, text: str) -> Extracted:
        """The calls of a whole array; none, and no content, for one cut short
        (NOTE(cut-required))."""
        try:
            json.loads(text)
        except ValueError:
            return Extracted(None)
        scanner = cls()
        scanner.feed(text)
        calls = scanner.calls()
        return Extracted(None, calls) if calls else Extracted.plain(text)
