"""Qwen3-Coder's XML format (``--tool-call-parser qwen3_coder``, or ``qwen3_xml``)::

    Let me check.
    <tool_call>
    <function=get_weather>
    <parameter=city>
    Paris
    </parameter>
    <parameter=days>
    3
    </parameter>
    </function>
    </tool_call>

A call counts once its ``</function>`` is written (so a streamed prefix never reads a call the
whole output lacks); ``<function=`` with no ``<tool_call>`` before it opens one too, as vLLM
reads it. A value is the text between its tags less one newline at each end (the template's
markup); it ends at ``</parameter>``, at the next ``<parameter=`` or at ``</function>``. Each
value takes the type its tool's schema gives it (tools/typed.py). The content is the text
before the first call; an output with no complete call is plain content.
"""

from __future__ import annotations

from kvpool.server.tools.calls import TOOL_NAME, ToolCall
from kvpool.server.tools.typed import TypedParser
from kvpool.server.tools.xml_calls import blocks, params

__all__ = ["Qwen3CoderParser", "SeedOssParser", "trim_newlines"]

OPEN, FUNCTION = "<tool_call>", "<function="
CALL, PARAM = (FUNCTION, "</function>"), ("<parameter=", "</parameter>")


def trim_newlines(value: str) -> str:
    """One leading and one trailing newline off (the markup around a value)."""
    value = value[1:] if value.startswith("\n") else value
    return value[:-1] if value.endswith("\n") else value


class Qwen3CoderParser(TypedParser):
    """``--tool-call-parser qwen3_coder``."""

    name = "qwen3_coder"
    markers = (OPEN, FUNCTION)
    closers = (CALL[1],)
    keeps_special_tokens = True  # <tool_call> may be a special token of Qwen's tokenizers

    def calls_from(self, text: str, pos: int, seen: int) -> tuple[tuple[ToolCall, ...], int]:
        """Each call from ``pos`` on stands alone: the next reading goes on past the last
        block closed (tools/xml_calls.py: linear time)."""
        calls = []
        for head, body, end in blocks(text, pos, CALL):
            pos = end
            name = head.strip()
            if TOOL_NAME.fullmatch(name):
                raw = {k: trim_newlines(v) for h, v in params(body, PARAM) if (k := h.strip())}
                calls.append(ToolCall(name, self.arguments(name, raw)))
        return tuple(calls), pos


class SeedOssParser(Qwen3CoderParser):
    """``--tool-call-parser seed_oss``: Seed-OSS writes Qwen3-Coder's calls inside
    ``<seed:tool_call>`` tags."""

    name = "seed_oss"
    markers = ("<seed:tool_call>", FUNCTION)
