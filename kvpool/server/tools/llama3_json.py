"""Llama 3.1 / 3.2 JSON format: the whole output is one or more JSON calls, optionally after
``<|python_tag|>``, separated by ``;``::

    <|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}; {"name": ...}

(``parameters``, Llama's key, or ``arguments``.) An output that does not open with one of
those is plain content; calls are read one after another until a value is not a call.
"""

from __future__ import annotations

from kvpool.server.tools.calls import Extracted, ToolCall, ToolParser, call_from_json
from kvpool.server.tools.scan import json_values

__all__ = ["Llama3JsonParser"]

TAG = "<|python_tag|>"


class Llama3JsonParser(ToolParser):
    """``--tool-call-parser llama3_json``."""

    name = "llama3_json"
    markers = (TAG, "{")
    at_start = True  # calls only open the output
    keeps_special_tokens = False  # without <|python_tag|> a call still opens with "{"
    null_content = False  # vLLM's call deltas have no content key (tools/stream.py)

    def extract(self, text: str) -> Extracted:
        body = _body(text)
        if not text.startswith("{", body):
            return Extracted.plain(text)
        calls = self.calls_from(text, 0, 0)[0]
        return Extracted(None, calls) if calls else Extracted.plain(text)

    def calls_from(self, text: str, pos: int, seen: int) -> tuple[tuple[ToolCall, ...], int]:
        """The calls one after another from ``pos`` on (0: the output's start), the next
        reading going on past the last value read; a value that is no call ends the reading."""
        start = _body(text) if pos == 0 else pos
        values, end = json_values(text[start:])
        calls = []
        for value in values:
            call = call_from_json(value)
            if call is None:
                return tuple(calls), -1
            calls.append(call)
        return tuple(calls), start + end if values else pos


def _body(text: str) -> int:
    """Where the calls begin: past leading blanks and an optional ``<|python_tag|>``."""
    at = len(text) - len(text.lstrip())
    if text.startswith(TAG, at):
        rest = text[at + len(TAG):]
        at += len(TAG) + len(rest) - len(rest.lstrip())
    return at
