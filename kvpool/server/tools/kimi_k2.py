"""Kimi K2's format (``--tool-call-parser kimi_k2``); the tags are special tokens of its
tokenizer::

    Let me check.<|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0
    <|tool_call_argument_begin|>{"city": "Paris"}<|tool_call_end|><|tool_calls_section_end|>

The header before ``<|tool_call_argument_begin|>`` is Kimi's own call id
(``functions.NAME:INDEX``): the response keeps it as the call's id, since Kimi's template
writes the id back into the next prompt, and the name is what lies between ``functions.``
and ``:INDEX``. A call counts once its ``<|tool_call_end|>`` is written and its arguments
are one JSON object; the first that is not ends the reading (tools/calls.py's
``tagged_reads``). The content is the text before the section; an output with no call read
is plain content.
"""

from __future__ import annotations

import re

from kvpool.server.tools.calls import TOOL_NAME, ToolCall, ToolParser, arguments_text, tagged_reads
from kvpool.server.tools.scan import json_object

__all__ = ["KimiK2Parser"]

TAGS = ("<|tool_calls_section_begin|>", "<|tool_call_begin|>", "<|tool_call_end|>")
ARGS = "<|tool_call_argument_begin|>"
_ID = re.compile(r"(?:functions\.)?(" + TOOL_NAME.pattern + r"):\d+")  # calls.py's name rule


class KimiK2Parser(ToolParser):
    """``--tool-call-parser kimi_k2``."""

    name = "kimi_k2"
    markers = TAGS[:1]
    closers = TAGS[2:]
    keeps_special_tokens = True

    def calls_from(self, text: str, pos: int, seen: int) -> tuple[tuple[ToolCall, ...], int]:
        return tagged_reads(text, pos, TAGS[1:], _call)


def _call(body: str) -> ToolCall | None:
    """``ID<|tool_call_argument_begin|>{...}`` -> a call with Kimi's id, or None."""
    header, sep, args = body.partition(ARGS)
    found = _ID.fullmatch(header.strip())
    obj = json_object(args) if sep and found is not None else None
    return None if obj is None else ToolCall(found.group(1), arguments_text(obj), header.strip())
