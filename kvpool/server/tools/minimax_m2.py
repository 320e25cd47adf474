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
``<parameter ``, and takes the type its tool's schema gives it (tools/typed.py). The content
is the text before ``<minimax:tool_call>``; an output with no complete call is plain content.
"""

from __future__ import annotations

import re

from kvpool.server.tools.calls import TOOL_NAME, ToolCall
from kvpool.server.tools.typed import TypedParser
from kvpool.server.tools.xml_calls import blocks, params

__all__ = ["MiniMaxM2Parser"]

OPEN = "<minimax:tool_call>"
CALL, PARAM = ("<invoke ", "</invoke>"), ("<parameter ", "</parameter>")
_NAMED = re.compile(r"""\s*name\s*=\s*(?:"([^"]*)"|'([^']*)'|([^>\s]+))\s*""")


def _name(header: str) -> str:
    """The quoted (either way) or bare name of an invoke's or a parameter's header; "" where
    the header is no ``name=...``."""
    m = _NAMED.fullmatch(header)
    return "" if m is None else (m.group(1) or m.group(2) or m.group(3) or "").strip()


class MiniMaxM2Parser(TypedParser):
    """``--tool-call-parser minimax_m2``."""

    name = "minimax_m2"
    markers = (OPEN,)
    closers = (CALL[1],)
    keeps_special_tokens = True  # MiniMax's <minimax:tool_call> is a special token

    def calls_from(self, text: str, pos: int, seen: int) -> tuple[tuple[ToolCall, ...], int]:
        """Each call from ``pos`` on stands alone: the next reading goes on past the last
        block closed (tools/xml_calls.py: linear time)."""
        calls = []
        for head, body, end in blocks(text, pos, CALL):
            pos = end
            name = _name(head)
            if TOOL_NAME.fullmatch(name):
                raw = {k: v for h, v in params(body, PARAM) if (k := _name(h))}
                calls.append(ToolCall(name, self.arguments(name, raw)))
        return tuple(calls), pos
