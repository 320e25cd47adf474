"""ToolText: a streamed choice's text from its first call marker on, and when to read it.

The stream reads calls from this text with the parser's ``calls_from`` (tools/stream.py,
NOTE(resume)), so a stream costs its readings times what each looks at. Two things keep the
readings few and each piece cheap (NOTE(closers) in stream.py):

- a parser whose calls end with a tag names it (``closers``): the text may hold a new call
  only once a piece completes one;
- a parser of JSON or Python calls (hermes, llama3_json, mistral, pythonic) has none: a call
  may be complete only when a closing bracket brings the depth of its ``brackets`` back to
  0. Brackets in strings (its ``quotes``, backslash escapes) do not count; a quote outside
  every bracket is text, not a string.

The pieces are kept in a list and joined only when read: ``text += piece`` copied the whole
text at each piece.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ToolText"]


class ToolText:
    """Invariant: ``depth`` >= 0 is the bracket depth of the text fed; ``_quote`` is the
    quote of the string it ends in (None: in none)."""

    def __init__(self, parser: Any, start: str) -> None:
        self._closers = parser.closers
        self._width = max(map(len, self._closers), default=1) - 1  # a closer split in two
        self._opens, self._closes = set(parser.brackets[0::2]), set(parser.brackets[1::2])
        self._quotes = set(parser.quotes)
        self._special = self._opens | self._closes | self._quotes
        self._parts: list[str] = []
        self._window = ""  # the last _width characters fed
        self.depth = 0
        self._quote: str | None = None
        self._escaped = False
        self.add(start)

    def text(self) -> str:
        """Everything fed, joined (once per reading)."""
        if len(self._parts) > 1:
            self._parts = ["".join(self._parts)]
        return self._parts[0] if self._parts else ""

    def add(self, piece: str) -> bool:
        """Feed ``piece``; whether the text may now hold a call it did not hold before."""
        self._parts.append(piece)
        if self._closers:  # a closer that ends in this piece
            seen, before = self._window + piece, len(self._window)
            self._window = seen[-self._width:] if self._width else ""
            return any(seen.find(c, max(before - len(c) + 1, 0)) >= 0 for c in self._closers)
        return self._brackets(piece)

    def _brackets(self, piece: str) -> bool:
        """Track the depth over ``piece``; whether a closing bracket brought it back to 0."""
        if self._quote is None and self._special.isdisjoint(piece):
            return False
        closed = False
        for ch in piece:
            if self._quote is not None:
                if self._escaped:
                    self._escaped = False
                elif ch == "\\":
                    self._escaped = True
                elif ch == self._quote:
                    self._quote = None
            elif ch in self._opens:
                self.depth += 1
            elif ch in self._closes:
                self.depth = max(self.depth - 1, 0)
                closed = closed or self.depth == 0
            elif ch in self._quotes and self.depth:
                self._quote = ch
        return closed
