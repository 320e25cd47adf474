"""Hermes / Qwen format: each call a JSON object inside ``<tool_call>`` tags, anywhere after
some text::

    Let me check.<tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>
    <tool_call>
    {"name": "get_time", "arguments": {}}
    </tool_call>

The content is the text before the first tag. A block whose JSON is not a call is skipped
(each block stands alone, so a streamed prefix never reads a call the whole output lacks); a
last block left open still counts once its JSON is complete. No call read: plain content.

Other families write the same between their own tags: ``longcat``
(``<longcat_tool_call>``) and ``internlm`` (``<|action_start|><|plugin|>`` to
``<|action_end|>``, the key ``parameters``); ``granite4`` and ``ernie45`` use hermes' tags.
"""

from __future__ import annotations

from kvpool.server.tools.calls import ToolCall, ToolParser, call_from_json
from kvpool.server.tools.scan import json_values

__all__ = ["HermesParser", "InternLMParser", "LongcatParser"]


class HermesParser(ToolParser):
    """``--tool-call-parser hermes``."""

    name = "hermes"
    tags = ("<tool_call>", "</tool_call>")  # a call's opening and closing tags
    markers = tags[:1]
    at_start = False  # a call may follow any text
    # Qwen's and Hermes' tokenizers may make the tags special tokens: they must reach the text
    keeps_special_tokens = True
    # vLLM's hermes parser sends content beside its calls, null when none (tools/stream.py)
    null_content = True

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        cls.markers = cls.tags[:1]  # a call opens with its opening tag, whatever the family's

    def calls_from(self, text: str, pos: int, seen: int) -> tuple[tuple[ToolCall, ...], int]:
        """Each block from ``pos`` on stands alone: the next reading goes on past the last
        block closed, or past a last open block's JSON once it is a call."""
        calls: list[ToolCall] = []
        opening, closing = self.tags
        at = text.find(opening, pos)
        while at >= 0:
            body = at + len(opening)
            close = text.find(closing, body)
            values, end = json_values(text[body:close if close >= 0 else len(text)])
            call = call_from_json(values[0]) if values else None
            if call is not None:
                calls.append(call)
            if close < 0:
                return tuple(calls), pos if call is None else body + end
            pos = close + len(closing)
            at = text.find(opening, pos)
        return tuple(calls), pos


class LongcatParser(HermesParser):
    """``--tool-call-parser longcat`` (Meituan LongCat)."""

    name = "longcat"
    tags = ("<longcat_tool_call>", "</longcat_tool_call>")


class InternLMParser(HermesParser):
    """``--tool-call-parser internlm`` (InternLM2 / 2.5). Its template ends the block with
    ``<|action_end|>``; a block that a stop token cut before it reads as hermes' last open
    block does."""

    name = "internlm"
    tags = ("<|action_start|><|plugin|>", "<|action_end|>")
    null_content = False  # vLLM's internlm parser writes no content beside its calls
