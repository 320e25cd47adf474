"""Chat ``messages`` -> the :class:`ChatMessage` list the chat templates render.

A message is ``{"role", "content"}``. The role is any string of 1..64 characters, as vLLM
takes it: the template decides what it means (Llama 3.1's ``ipython``, the legacy
``function``); a string ``name`` reaches the template for every role. Content is a string or
a list of text parts joined with newlines, as vLLM joins them for a template that reads
content as a string. A text part is a plain string or ``{"type": T, ...}`` with T ``text``,
``input_text`` or ``output_text`` (its ``text``), ``refusal`` or ``thinking`` (the key of
that name); one whose text is null is skipped, as vLLM skips it. A ``null`` or missing
content is empty for every role, as vLLM reads it (OpenAI requires it for a user; vLLM's
clients, e.g. a tool message carrying only its ``tool_call_id``, may leave it out). Function
calling (OpenAI's shapes)::

    {"role": "assistant", "content": null, "tool_calls": [{"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\\"city\\": \\"Paris\\"}"}}]}
    {"role": "tool", "tool_call_id": "call_1", "content": "18 C"}

A template sees a call's ``arguments`` as the object they spell (vLLM parses them too: the
templates of Llama, Qwen and Mistral write ``arguments | tojson``); arguments that are not a
JSON object (a call cut short) are ``{}``, as vLLM coerces them. Anything else is a 400
naming the message (``messages[i].role``). An assistant's earlier thinking, ``reasoning`` or
``reasoning_content`` (a string), reaches the template under both names, as vLLM hands it on
(Qwen3's template reads ``reasoning_content``).
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from kvpool.errors import RequestError
from kvpool.server.json_body import decode_json_text

_bad = RequestError.field  # errors.py: "param: message", with the param named

__all__ = ["MAX_ROLE_CHARS", "ROLES", "ChatMessage", "message_dict", "parse_messages"]

ROLES = ("system", "developer", "user", "assistant", "tool")  # OpenAI's; any string is taken
MAX_ROLE_CHARS = 64
# a text part's type -> the key holding its text (vLLM's text kinds)
_TEXT_PARTS = {"text": "text", "input_text": "text", "output_text": "text",
               "refusal": "refusal", "thinking": "thinking"}


class ChatMessage(NamedTuple):
    """One message: its role, its text, and the function-calling fields it carries (an
    assistant's ``tool_calls``, a tool's ``tool_call_id`` / ``name``), or None."""

    role: str
    content: str
    extra: dict[str, Any] | None = None


def message_dict(m: tuple) -> dict[str, Any]:
    """A message as a template reads it (a plain ``(role, content)`` pair also works)."""
    extra = m[2] if len(m) > 2 and m[2] else {}
    return {"role": m[0], "content": m[1], **extra}


def parse_messages(messages: Any) -> list[ChatMessage]:
    if messages is None:
        raise _bad("messages", "is required")
    if not isinstance(messages, list) or not messages:
        raise _bad("messages", "must be a non-empty list of message objects")
    out = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise _bad(where, "must be an object with 'role' and 'content'")
        role = m.get("role")
        if not isinstance(role, str) or not 0 < len(role) <= MAX_ROLE_CHARS:
            raise _bad(f"{where}.role", f"must be a string of 1..{MAX_ROLE_CHARS} characters "
                       f"(e.g. {', '.join(ROLES)}), got {json.dumps(role)[:40]}")
        calls = m.get("tool_calls") if role == "assistant" else None
        text = _content(m.get("content"), f"{where}.content")
        out.append(ChatMessage(role, text, _extra(m, role, calls, where)))
    return out


def _extra(m: dict[str, Any], role: str, calls: Any, where: str) -> dict[str, Any] | None:
    extra = {}
    for key in ("tool_call_id", "name") if role == "tool" else ("name",):
        if m.get(key) is not None:
            if not isinstance(m[key], str):
                raise _bad(f"{where}.{key}", "must be a string")
            extra[key] = m[key]
    thought = m.get("reasoning", m.get("reasoning_content")) if role == "assistant" else None
    if thought is not None:
        if not isinstance(thought, str):
            raise _bad(f"{where}.reasoning", "must be a string")
        extra["reasoning"] = extra["reasoning_content"] = thought
    if calls is not None:
        if not isinstance(calls, list):
            raise _bad(f"{where}.tool_calls", "must be a list of tool calls")
        extra["tool_calls"] = [_call(c, f"{where}.tool_calls[{j}]") for j, c in enumerate(calls)]
    return extra or None


def _call(call: Any, where: str) -> dict[str, Any]:
    fn = call.get("function") if isinstance(call, dict) else None
    if not isinstance(fn, dict) or not isinstance(fn.get("name"), str):
        raise _bad(where, "must be {'id', 'type': 'function', 'function': {'name', "
                   "'arguments'}}")
    out = {"type": "function", "function": {"name": fn["name"],
                                            "arguments": _arguments(fn.get("arguments"), where)}}
    if call.get("id") is not None:
        if not isinstance(call["id"], str):
            raise _bad(f"{where}.id", "must be a string")
        out["id"] = call["id"]
    return out


def _arguments(args: Any, where: str) -> dict[str, Any]:
    """A call's arguments as the object a template reads. As vLLM takes them, arguments that
    are not JSON (a call ``max_tokens`` cut short, sent back by an agent loop) or JSON but not
    an object are ``{}``, so the conversation can go on."""
    if isinstance(args, str):
        try:
            args = decode_json_text(args, f"{where}.function.arguments", "JSON text")
        except RequestError:  # not JSON, too deep a nest, a lone surrogate: dropped
            args = None
    return args if isinstance(args, dict) else {}


def _content(content: Any, param: str) -> str:
    if isinstance(content, str):
        return content
    if content is None:  # null or missing: empty, as vLLM takes it for every role
        return ""
    if isinstance(content, list):
        texts = [t for t in map(_part_text, content) if t is not None]
        if any(t is False for t in texts):
            raise _bad(param, "only text content parts ({'type': 'text', 'text': ...}, "
                       "input_text, output_text, refusal, thinking, or a string) are supported")
        return "\n".join(texts)
    raise _bad(param, "must be a string or a list of text parts")


def _part_text(part: Any) -> str | None | bool:
    """A part's text, None for a text part without one (skipped), False for any other."""
    if isinstance(part, str):
        return part
    key = _TEXT_PARTS.get(part.get("type")) if isinstance(part, dict) else None
    text = part.get(key) if key is not None else False
    return text if text is None or isinstance(text, str) else False
