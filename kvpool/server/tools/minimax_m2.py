"""MiniMax-M2's format (``--tool-call-parser minimax_m2``)::

    Let me check.<minimax:tool_call>
    <invoke name="get_weather">
    <parameter name="city">Paris</parameter>
    <parameter name="days">3</parameter>
    </invoke>
    <invoke name="get_time">
    </invoke>
    </minimax:tool_call>

Each ``<invoke>`` is one call, counted once its ``</invoke>`` is written. A name may be in
double quotes, single quotes or none. A value is the text between its tags as written (it
sits inline, so its blanks are data); it ends at ``</parameter>`` or at the next
``<parameter``, and takes the type its tool's schema gives it (tools/typed.py). The content
is the text before ``<minimax:tool_call>``; an output with no complete call is plain content.
"""

from __future__ import annotations

import re

from kvpool.server.tools.calls import Extracted, ToolCall
from kvpool.server.tools.typed import TypedParser

__all__ = ["MiniMaxM2Parser"]

OPEN = "<minimax:tool_call>"
_NAMED = r"""name\s*=\s*(?:"([^"]*)"|'([^']*)'|([^>\s]+))\s*>"""
_INVOKE = re.compile(r"<invoke\s+" + _NAMED + r"(.*?)</invoke>", re.S)
_PARAM = re.compile(r"<parameter\s+" + _NAMED + r"(.*?)(?:</parameter>|(?=<parameter\s)|\Z)",
                    re.S)
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")  # tools/request.py's rule for tool names


def _name(m: re.Match) -> str:
    """The quoted (either way) or bare name of an ``_INVOKE`` or ``_PARAM`` match."""
    return (m.group(1) or m.group(2) or m.group(3) or "").strip()


class MiniMaxM2Parser(TypedParser):
    """``--tool-call-parser minimax_m2``."""

    name = "minimax_m2"
    markers = (OPEN,)
    keeps_special_tokens = True  # MiniMax's <minimax:tool_call> is a special token

    def extract(self, text: str) -> Extracted:
        start = text.find(OPEN)
        if start < 0:
            return Extracted.plain(text)
        calls = []
        for m in _INVOKE.finditer(text, start):
            name = _name(m)
            if _NAME.fullmatch(name):
                raw = {k: p.group(4) for p in _PARAM.finditer(m.group(4)) if (k := _name(p))}
                calls.append(ToolCall(name, self.arguments(name, raw)))
        if not calls:
            return Extracted.plain(text)
        return Extracted(text[:start] or None, tuple(calls))
