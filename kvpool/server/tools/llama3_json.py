"""Llama 3.1 / 3.2 JSON format: the whole output is one or more JSON calls, optionally after
``<|python_tag|>``, separated by ``;``::

    <|python_tag|>{"name": "get_weather", "parameters": {"city": "Paris"}}; {"name": ...}

(``parameters``, Llama's key, or ``arguments``.) An output that does not open with one of
those is plain content; calls are read one after another until a value is not a call.
"""

from __future__ import annotations

from kvpool.server.tools.calls import Extracted, ToolParser, call_from_json
from kvpool.server.tools.scan import json_values

__all__ = ["Llama3JsonParser"]

TAG = "<|python_tag|>"


class Llama3JsonParser(ToolParser):
    """``--tool-call-parser llama3_json``."""

    name = "llama3_json"
    markers = (TAG, "{")
    at_start = True  # calls only open the output
    keeps_special_tokens = False  # without <|python_tag|> a call still opens with "{"
    null_content = False  # vLLM's call deltas have no content key (tools/stream.py)

    def extract(self, text: str) -> Extracted:
        body = text.lstrip()
        if body.startswith(TAG):
            body = body[len(TAG):].lstrip()
        if not body.startswith("{"):
            return Extracted.plain(text)
        values, _ = json_values(body)
        calls = []
        for value in values:
            call = call_from_json(value)
            if call is None:
                break
            calls.append(call)
        return Extracted(None, tuple(calls)) if calls else Extracted.plain(text)
