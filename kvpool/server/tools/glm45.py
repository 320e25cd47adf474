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

from kvpool.server.tools.calls import TOOL_NAME, ToolCall
from kvpool.server.tools.typed import TypedParser

__all__ = ["Glm45Parser"]

OPEN, CLOSE = "<tool_call>", "</tool_call>"
KEY, VALUE = ("<arg_key>", "</arg_key>"), ("<arg_value>", "</arg_value>")


def glm_args(body: str) -> dict[str, str]:
    """A call body's ``<arg_key>K</arg_key>`` + blanks + ``<arg_value>V</arg_value>`` pairs,
    in order; a key with no value after it is skipped, an unclosed key or value ends the
    reading. Every search starts past the last one: linear time (tools/xml_calls.py says
    why)."""
    out: dict[str, str] = {}
    pos = body.find(KEY[0])
    while pos >= 0:
        key_end = body.find(KEY[1], pos)
        if key_end < 0:
            break
        at = key_end + len(KEY[1])
        at += len(body[at:at + 64]) - len(body[at:at + 64].lstrip())
        value_end = body.find(VALUE[1], at) if body.startswith(VALUE[0], at) else at
        if value_end < 0:
            break
        if value_end > at:
            out[body[pos + len(KEY[0]):key_end].strip()] = body[at + len(VALUE[0]):value_end]
        pos = body.find(KEY[0], value_end)
    return out


class Glm45Parser(TypedParser):
    """``--tool-call-parser glm45``."""

    name = "glm45"
    markers = (OPEN,)
    closers = (CLOSE,)
    keeps_special_tokens = True  # GLM's <tool_call> tags are special tokens

    def calls_from(self, text: str, pos: int, seen: int) -> tuple[tuple[ToolCall, ...], int]:
        """Each call from ``pos`` on stands alone: the next reading goes on past the last
        call closed."""
        calls = []
        at = text.find(OPEN, pos)
        while at >= 0 and (close := text.find(CLOSE, at)) >= 0:
            body = text[at + len(OPEN):close]
            name = body.split(KEY[0], 1)[0].strip()
            if TOOL_NAME.fullmatch(name):
                calls.append(ToolCall(name, self.arguments(name, glm_args(body))))
            pos = close + len(CLOSE)
            at = text.find(OPEN, pos)
        return tuple(calls), pos
