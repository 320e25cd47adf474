"""Pythonic format (Llama 3.2 / 4, ToolACE): the output is a Python list of calls with
keyword arguments of literal values, optionally inside Llama 4's ``<|python_start|>`` tags::

    [get_weather(city='Paris', days=3), get_time(zone="UTC", dst=True)]

Values are read with ``ast.literal_eval`` (never evaluated as code); ``true`` / ``false`` /
``null`` are read as JSON spells them. Anything else, or a list not complete: plain content.
"""

from __future__ import annotations

import ast
from typing import Any

from kvpool.server.tools.calls import Extracted, ToolCall, ToolParser, arguments_text
from kvpool.server.tools.scan import balanced_end

__all__ = ["PythonicParser"]

START, END = "<|python_start|>", "<|python_end|>"
_JSON_NAMES = {"true": True, "false": False, "null": None}


def _value(node: ast.expr) -> Any:
    if isinstance(node, ast.Name) and node.id in _JSON_NAMES:
        return _JSON_NAMES[node.id]
    return ast.literal_eval(node)


def _call(node: ast.expr) -> ToolCall | None:
    if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Name) or node.args:
        return None
    if any(k.arg is None for k in node.keywords):  # **kwargs
        return None
    return ToolCall(node.func.id, arguments_text({k.arg: _value(k.value)
                                                  for k in node.keywords}))


class PythonicParser(ToolParser):
    """``--tool-call-parser pythonic``."""

    name = "pythonic"
    markers = ("[", START)
    at_start = True
    keeps_special_tokens = False
    null_content = False  # vLLM's call deltas have no content key (tools/stream.py)
    brackets, quotes = "()[]", "\"'"  # Python's calls, lists and strings

    def extract(self, text: str) -> Extracted:
        body = text.lstrip()
        body = body[len(START):].lstrip() if body.startswith(START) else body
        end = balanced_end(body, 0, quotes="'\"") if body.startswith("[") else None
        if end is None:
            return Extracted.plain(text)
        try:
            tree = ast.parse(body[:end], mode="eval").body
            calls = [_call(n) for n in tree.elts] if isinstance(tree, ast.List) else []
        except (SyntaxError, ValueError, TypeError, MemoryError, RecursionError):
            return Extracted.plain(text)
        if not calls or None in calls:
            return Extracted.plain(text)
        return Extracted(None, tuple(calls))
