"""Mistral format: ``[TOOL_CALLS]`` then the calls, after any text::

    Sure.[TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}, {...}]
    [TOOL_CALLS]get_weather{"city": "Paris"}[TOOL_CALLS]get_time{}     (newer tokenizers)
    [TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}

Mistral's chat templates accept only 9-character alphanumeric call ids, so the ids here have
that form. The content is the text before the marker; nothing readable after it: plain content.
"""

from __future__ import annotations

import secrets
import string

from kvpool.server.tools.calls import (TOOL_NAME, Extracted, ToolCall, ToolParser,
                                      arguments_text, call_from_json)
from kvpool.server.tools.scan import json_values

__all__ = ["MistralParser", "mistral_id"]

MARKER, ARGS = "[TOOL_CALLS]", "[ARGS]"
_ALPHABET = string.ascii_letters + string.digits


def mistral_id() -> str:
    return "".join(secrets.choice(_ALPHABET) for _ in range(9))


def _with_id(call: ToolCall | None) -> ToolCall | None:
    return None if call is None else ToolCall(call.name, call.arguments, mistral_id())


def _named(segment: str) -> ToolCall | None:
    """``name{args}`` or ``name[ARGS]{args}``: the name is what comes before the arguments
    (calls.py NOTE(tool-names): ``github/create_issue`` too), as vLLM's parser splits it."""
    ends = [i for i in (segment.find(ARGS), segment.find("{")) if i >= 0]
    name = segment[:min(ends)].strip() if ends else ""
    if not TOOL_NAME.fullmatch(name):
        return None
    rest = segment[min(ends):]
    rest = rest[len(ARGS):] if rest.startswith(ARGS) else rest
    values, _ = json_values(rest)
    if not values or not isinstance(values[0], dict):
        return None
    return ToolCall(name, arguments_text(values[0]), mistral_id())


class MistralParser(ToolParser):
    """``--tool-call-parser mistral``."""

    name = "mistral"
    markers = (MARKER,)
    at_start = False
    keeps_special_tokens = True  # [TOOL_CALLS] is a special token of Mistral's tokenizers
    null_content = False  # no content key beside the calls (tools/stream.py)

    def extract(self, text: str) -> Extracted:
        start = text.find(MARKER)
        if start < 0:
            return Extracted.plain(text)
        rest = text[start + len(MARKER):]
        if rest.lstrip().startswith("["):
            values, _ = json_values(rest)
            items = values[0] if values and isinstance(values[0], list) else []
            calls = []
            for item in items:
                call = _with_id(call_from_json(item))
                if call is None:
                    break
                calls.append(call)
        else:
            calls = []
            for segment in rest.split(MARKER):
                call = _named(segment)
                if call is None:
                    break
                calls.append(call)
        if not calls:
            return Extracted.plain(text)
        return Extracted(text[:start] or None, tuple(calls))
