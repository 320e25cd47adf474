"""Responses API items -> chat messages: ``input`` (a string, or a list of items) and a stored
response's ``output`` when a later request continues it (``previous_response_id``)::

    {"type": "message", "role", "content"}     a message; content a string or text parts
                                               (input_text / output_text)
    {"type": "reasoning", "content": [{"type": "reasoning_text", "text"}]}
                                               an assistant's earlier thinking, joined with
                                               the assistant message next to it (vLLM's rule;
                                               no content: its first summary's text)
    {"type": "function_call", "call_id", "name", "arguments", "namespace"?}
                                               a call of the assistant turn it follows
                                               (namespaced: ``NS__name``, as shown)
    {"type": "custom_tool_call", "call_id", "name", "input"}
                                               the same, a custom tool's: arguments
                                               ``{"input": ...}`` (responses_custom.py)
    {"type": "function_call_output" / "custom_tool_call_output", "call_id", "output"}
                                               the tool message answering it

Anything else is a 400 naming ``input[i]`` (or ``output[i]``).
"""

from __future__ import annotations

import json
from typing import Any

from kvpool.errors import RequestError
from kvpool.server.builtin_template import ChatTemplate
from kvpool.server.responses_custom import encode_input, flat_name

_bad = RequestError.field  # errors.py: "param: message", with the param named

__all__ = ["TEXT_PARTS", "input_messages", "item_messages"]

TEXT_PARTS = ("input_text", "output_text")


def input_messages(value: Any) -> list[dict[str, Any]]:
    """``input`` -> chat messages ``{"role", "content"}`` (a 400 naming ``input[i]``)."""
    if isinstance(value, str):
        if not value:
            raise _bad("input", "must not be empty")
        return [{"role": "user", "content": value}]
    if value is None:
        raise _bad("input", "is required")
    if not isinstance(value, list) or not value:
        raise _bad("input", "must be a string or a non-empty list of input messages")
    return item_messages(value, "input")


def item_messages(items: list[Any], name: str) -> list[dict[str, Any]]:
    """Input (or output) items -> chat messages; a 400 names ``{name}[i]``. A call's
    arguments go on as they came: chat takes any that are not a JSON object (one
    ``max_output_tokens`` cut short) as ``{}``, as vLLM does (chat_messages.py)."""
    out: list[dict[str, Any]] = []
    for i, item in enumerate(items):
        where = f"{name}[{i}]"
        if not isinstance(item, dict):
            raise _bad(where, "must be a message object with 'role' and 'content'")
        kind = item.get("type", "message")
        if kind in ("function_call", "custom_tool_call"):
            call = _call(item, where)
            if out and out[-1]["role"] == "assistant":  # one assistant turn, its calls
                out[-1].setdefault("tool_calls", []).append(call)
            else:
                out.append({"role": "assistant", "content": "", "tool_calls": [call]})
        elif kind in ("function_call_output", "custom_tool_call_output"):
            out.append(_call_output(item, where))
        elif kind == "message":
            _add_message(out, _message(item, where))
        elif kind == "reasoning":
            _add_message(out, {"role": "assistant", "content": "",
                               "reasoning": _thought(item, where)})
        else:
            raise _bad(f"{where}.type", f"only message, reasoning, function_call, "
                       f"custom_tool_call and their output items are supported, got "
                       f"{json.dumps(kind)[:40]}", "unsupported_parameter")
    return out


def _add_message(out: list[dict[str, Any]], msg: dict[str, Any]) -> None:
    """A reasoning item and the assistant message after it are one turn (vLLM joins them):
    what one of them lacks, the other fills."""
    last = out[-1] if out else None
    if last is None or not last["role"] == msg["role"] == "assistant" or "tool_calls" in last \
            or ("reasoning" in last) == ("reasoning" in msg) \
            or (last["content"] and msg["content"]):
        out.append(msg)
        return
    last["content"] = last["content"] or msg["content"]
    if "reasoning" in msg:
        last["reasoning"] = msg["reasoning"]


def _thought(item: dict[str, Any], where: str) -> str:
    """A reasoning item's text: its first reasoning_text part, else its first summary's (as
    vLLM reads it); encrypted content cannot be read here."""
    if item.get("encrypted_content"):
        raise _bad(f"{where}.encrypted_content", "is not supported", "unsupported_parameter")
    for key in ("content", "summary"):
        parts = item.get(key)
        if isinstance(parts, list) and parts:
            part = parts[0]
            if not isinstance(part, dict) or not isinstance(part.get("text"), str):
                raise _bad(f"{where}.{key}[0].text", "must be a string")
            return part["text"]
    return ""


def _string(item: dict[str, Any], key: str, where: str) -> str:
    value = item.get(key)
    if not isinstance(value, str) or not value:
        raise _bad(f"{where}.{key}", "is required: a non-empty string")
    return value


def _call(item: dict[str, Any], where: str) -> dict[str, Any]:
    """A function_call (or custom_tool_call) item -> a chat tool call (its arguments JSON
    text), named as the model is shown the tool (vLLM's responses/utils.py)."""
    if item["type"] == "custom_tool_call":  # vLLM's: no input is ""
        payload = item.get("input") or ""
        if not isinstance(payload, str):
            raise _bad(f"{where}.input", "must be a string")
        args = encode_input(payload)
    else:
        args = item.get("arguments")
    if not isinstance(args, str):
        raise _bad(f"{where}.arguments", "is required: the call's arguments as JSON text")
    name = _string(item, "name", where)
    namespace = item.get("namespace") if item["type"] == "function_call" else None
    if namespace:
        name = flat_name(_string(item, "namespace", where), name)
    return {"id": _string(item, "call_id", where), "type": "function",
            "function": {"name": name, "arguments": args}}


def _call_output(item: dict[str, Any], where: str) -> dict[str, Any]:
    """A function_call_output item -> the tool message answering its call."""
    return {"role": "tool", "tool_call_id": _string(item, "call_id", where),
            "content": _text(item.get("output"), f"{where}.output")}


def _message(item: dict[str, Any], where: str) -> dict[str, Any]:
    role = item.get("role")
    if role not in ChatTemplate.ROLES:
        raise _bad(f"{where}.role", f"must be one of {', '.join(ChatTemplate.ROLES)}, got "
                   f"{json.dumps(role)[:40]}")
    return {"role": role, "content": _text(item.get("content"), f"{where}.content")}


def _text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise _bad(where, "must be a string or a list of input_text parts")
    texts = []
    for j, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") not in TEXT_PARTS \
                or not isinstance(part.get("text"), str):
            raise _bad(f"{where}[{j}]", "only text parts ({'type': 'input_text', 'text': "
                       "...}) are supported", "unsupported_parameter")
        texts.append(part["text"])
    return "\n".join(texts)
