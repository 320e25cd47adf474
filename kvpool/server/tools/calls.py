"""One tool call, as the response carries it (vLLM's and OpenAI's shape)::

    {"id": "chatcmpl-tool-<hex>", "type": "function",
     "function": {"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\"}"}}

``arguments`` is JSON *text* (OpenAI's rule): a client ``json.loads`` it.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from kvpool.server.tools.scan import json_values

__all__ = ["Extracted", "ToolCall", "arguments_delta", "arguments_text", "call_from_json",
           "new_call_id"]


def new_call_id() -> str:
    return "chatcmpl-tool-" + uuid.uuid4().hex


def arguments_text(value: Any) -> str:
    """A parsed arguments value as the JSON text a response carries."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One call: the function's name and its arguments as JSON text."""

    name: str
    arguments: str
    id: str = field(default_factory=new_call_id)

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "type": "function",
                "function": {"name": self.name, "arguments": self.arguments}}

    def opening_delta(self, index: int) -> dict[str, Any]:
        """A stream's first delta of a call: index, id, type and the name (vLLM's order)."""
        return {"tool_calls": [{"index": index, "id": self.id, "type": "function",
                                "function": {"name": self.name}}]}


def arguments_delta(index: int, piece: str) -> dict[str, Any]:
    """A later delta of call ``index``: a piece of its arguments text."""
    return {"tool_calls": [{"index": index, "function": {"arguments": piece}}]}


@dataclass(frozen=True, slots=True)
class Extracted:
    """What a parser read from a whole output: the content (None when empty) and the calls.
    No calls means the output is plain content."""

    content: str | None
    calls: tuple[ToolCall, ...] = ()

    @classmethod
    def plain(cls, text: str) -> "Extracted":
        return cls(text)


def call_from_json(obj: Any) -> ToolCall | None:
    """``{"name": ..., "arguments" | "parameters": {...}}`` (the arguments an object or its
    JSON text; left out: none) -> a call; anything else -> None."""
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str) or not obj["name"]:
        return None
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):  # some models write the arguments as JSON text
        decoded, _ = json_values(args)
        args = decoded[0] if len(decoded) == 1 else None
    return ToolCall(obj["name"], arguments_text(args)) if isinstance(args, dict) else None
