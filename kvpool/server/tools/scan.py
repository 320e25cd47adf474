"""Bracket matching over JSON or Python text, strings skipped: where a value that opens at
``start`` closes, or None while it is still open (a streamed output not complete yet)."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["balanced_end", "json_object", "json_values"]

_OPEN = {"{": "}", "[": "]", "(": ")"}
_CLOSE = frozenset("}])")


def balanced_end(text: str, start: int, quotes: str = '"') -> int | None:
    """The index just past the bracket that closes ``text[start]`` (one of ``{[(``)."""
    depth = 0
    quote = None
    escaped = False
    for i in range(start, len(text)):
        ch = text[i]
        if quote is not None:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = None
        elif ch in quotes:
            quote = ch
        elif ch in _OPEN:
            depth += 1
        elif ch in _CLOSE:
            depth -= 1
            if depth == 0:
                return i + 1
    return None


def json_values(text: str, separators: str = " \t\r\n;,") -> tuple[list[Any], int]:
    """The JSON values at the start of ``text``, one after another (``separators`` between
    them), and where the last complete one ends. Stops at the first that does not decode."""
    decoder = json.JSONDecoder()
    values: list[Any] = []
    pos = end = 0
    while True:
        while pos < len(text) and text[pos] in separators:
            pos += 1
        if pos >= len(text):
            return values, end
        try:
            value, pos = decoder.raw_decode(text, pos)
        except ValueError:
            return values, end
        values.append(value)
        end = pos


def json_object(text: str) -> dict[str, Any] | None:
    """``text`` as exactly one JSON object (blanks around it allowed), else None."""
    values, end = json_values(text, " \t\r\n")
    if len(values) != 1 or not isinstance(values[0], dict) or text[end:].strip():
        return None
    return values[0]
