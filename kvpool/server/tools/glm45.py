"""GLM-4.5 / 4.6 / 4.7's format (``--tool-call-parser glm45``, or ``glm47``)::

    Let me check.<tool_call>get_weather
    <arg_key>city</arg_key>
    <arg_value>Paris</arg_value>
    <arg_key>days</arg_key>
    <arg_value>3</arg_value>
    </tool_call>

The function's name runs from the tag to the first ``<arg_key>`` (or the closing tag: a call
may take no arguments); each key is followed by its value. A call counts once its
``</tool_call>`` is written. Values take the types their tool's schema gives them
(tools/typed.py). The content is the text before the first call; an output with no complete
call is plain content.
"""

from __future__ import annotations

import re
from kvpool.server.tools.calls import Extracted, ToolCall
from kvpool.server.tools.typed import TypedParser

__all__ = ["Glm45Parser"]

OPEN, CLOSE, KEY = "<tool_call>", "</tool_call>", "<arg_key>"
_ARG = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.S)
_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")  # tools/request.py's rule for tool names


class Glm45Parser(TypedParser):
    """``--tool-call-parser glm45``."""

    name = "glm45"
    markers = (OPEN,)
    keeps_special_tokens = True  # GLM's <tool_call> tags are special tokens

    def extract(self, text: str) -> Extracted:
        start = text.find(OPEN)
        if start < 0:
            return Extracted.plain(text)
        calls = []
        pos = start
        while (close := text.find(CLOSE, pos)) >= 0:
            body = text[pos + len(OPEN):close]
            name = body.split(KEY, 1)[0].strip()
            if _NAME.fullmatch(name):
                raw = {k.strip(): v for k, v in _ARG.findall(body)}
                calls.append(ToolCall(name, self.arguments(name, raw)))
            pos = text.find(OPEN, close + len(CLOSE))
            if pos < 0:
                break
        if not calls:
            return Extracted.plain(text)
        return Extracted(text[:start] or None, tuple(calls))
