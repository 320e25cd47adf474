"""DeepSeek's formats: V3 and R1 (``--tool-call-parser deepseek_v3``) and V3.1 / V3.2's chat
format (``deepseek_v31``). The tags are special tokens of DeepSeek's tokenizers::

    deepseek_v3   <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather
                  ```json
                  {"city": "Paris"}
                  ```<｜tool▁call▁end｜><｜tool▁calls▁end｜>
    deepseek_v31  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city":
                  "Paris"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>

Calls follow one another inside the section. A call counts once its ``<｜tool▁call▁end｜>`` is
written and its arguments are one JSON object; the first that is not ends the reading
(tools/calls.py's ``tagged_reads``). The content is the text before the section; an output
with no call read is plain content.
"""

from __future__ import annotations

import re

from kvpool.server.tools.calls import TOOL_NAME, ToolCall, ToolParser, arguments_text, tagged_reads
from kvpool.server.tools.scan import json_object

__all__ = ["DeepSeekV3Parser", "DeepSeekV31Parser"]

TAGS = ("<｜tool▁calls▁begin｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>")
SEP = "<｜tool▁sep｜>"
_FENCED = re.compile(r"```(?:json)?\n(.*)\n```\s*", re.S)


class DeepSeekV3Parser(ToolParser):
    """``--tool-call-parser deepseek_v3``: ``TYPE<｜tool▁sep｜>NAME``, a newline, then the
    fenced JSON."""

    name = "deepseek_v3"
    markers = TAGS[:1]
    closers = TAGS[2:]
    keeps_special_tokens = True

    def calls_from(self, text: str, pos: int, seen: int) -> tuple[tuple[ToolCall, ...], int]:
        return tagged_reads(text, pos, TAGS[1:], self.call)

    def call(self, body: str) -> ToolCall | None:
        """One call from what lies between its tags, or None."""
        _, sep, rest = body.partition(SEP)  # the type before it: "function"
        name, _, args = rest.partition("\n")
        fenced = _FENCED.fullmatch(args) if sep else None
        return _call(name.strip(), fenced.group(1) if fenced else None)


class DeepSeekV31Parser(DeepSeekV3Parser):
    """``--tool-call-parser deepseek_v31``: ``NAME<｜tool▁sep｜>`` then the JSON."""

    name = "deepseek_v31"

    def call(self, body: str) -> ToolCall | None:
        name, sep, args = body.partition(SEP)
        return _call(name.strip(), args if sep else None)


def _call(name: str, args: str | None) -> ToolCall | None:
    """A call where ``name`` is a tool's name and ``args`` holds exactly one JSON object."""
    obj = json_object(args) if args is not None and TOOL_NAME.fullmatch(name) else None
    return None if obj is None else ToolCall(name, arguments_text(obj))
