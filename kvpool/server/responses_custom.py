"""Responses ``custom`` (free-form) and ``namespace`` tools, shown to the model as function
tools the way vLLM 0.33 shows them (its tool_parsers/utils.py get_function_tools)::

    {"type": "custom", "name", "description"?, "format"?}
        a function of one required string parameter ``input`` (the shim: PARAMETERS); a
        ``format`` of type ``grammar`` is vLLM's 400, ``text`` (or none) is free-form text
    {"type": "namespace", "name": NS, "description", "tools": [...]}
        each function tool in it as ``NS__name``; the custom tools in it are not shown

A call of the shim is a ``custom_tool_call`` item whose ``input`` is the ``input`` string of
its JSON arguments (the arguments as they are when they are not such an object, as vLLM
decodes them); a call of a namespaced function is a ``function_call`` named as in its
namespace, with ``namespace``. Sent back, a ``custom_tool_call`` is the shim call with
arguments ``{"input": ...}`` and a ``custom_tool_call_output`` its tool message
(responses_items.py), as vLLM's responses/utils.py renders them.
"""

from __future__ import annotations

import json
import re
from typing import Any

from kvpool.errors import RequestError
from kvpool.server.tools.calls import escaped_surrogates  # NOTE(lone-args)

_bad = RequestError.field  # errors.py: "param: message", with the param named

__all__ = ["PARAMETERS", "choice_name", "decode_input", "decode_input_prefix", "encode_input",
           "flat_name", "shown_tools"]

INPUT_KEY = "input"
PARAMETERS = {"type": "object",
              "properties": {INPUT_KEY: {"type": "string",
                                         "description": "The freeform text payload for this "
                                                        "tool."}},
              "required": [INPUT_KEY], "additionalProperties": False}
_HEAD = re.compile(r'\s*\{\s*"input"\s*:\s*"')
_LAX = json.JSONDecoder(strict=False)


def flat_name(namespace: str, name: str) -> str:
    return f"{namespace}__{name}"


def shown_tools(tool: dict[str, Any], where: str) -> list[dict[str, Any]]:
    """The Responses function tools the model is shown for a custom or namespace ``tool``."""
    name = tool.get("name")
    if not isinstance(name, str) or not name:
        raise _bad(f"{where}.name", "is required: a non-empty string")
    if tool["type"] == "custom":
        if _format_kind(tool, where) == "grammar":  # vLLM's refusal, its words
            raise _bad("tools", "Custom tools with a grammar format are not supported; only "
                       "free-form text custom tools are accepted.", "unsupported_parameter")
        return [{"type": "function", "name": name, "description": tool.get("description"),
                 "parameters": PARAMETERS}]
    inner = tool.get("tools")
    if not isinstance(inner, list):
        raise _bad(f"{where}.tools", "is required: a list of function or custom tools")
    if not isinstance(tool.get("description"), str):
        raise _bad(f"{where}.description", "is required: a string")
    return [{**t, "name": flat_name(name, t["name"])} for t in _inner(inner, f"{where}.tools")
            if t["type"] == "function"]


def _format_kind(tool: dict[str, Any], where: str) -> str:
    """A custom tool's format: ``text`` (also none) or ``grammar``; any other is a 400, as
    vLLM's pydantic request model (the openai package's CustomTool) refuses it."""
    fmt = tool.get("format")
    kind = "text" if fmt is None else fmt.get("type") if isinstance(fmt, dict) else None
    if kind not in ("text", "grammar"):
        raise _bad(f"{where}.format", "must be {'type': 'text'} or {'type': 'grammar', "
                   "'syntax': ..., 'definition': ...}")
    return kind


def _inner(tools: list[Any], where: str) -> list[dict[str, Any]]:
    """A namespace's ``tools``, each a function or custom tool with a string name (no
    namespace in a namespace), as the openai package's NamespaceTool, which vLLM's request
    model validates, holds them; a 400 names ``{where}[j]``'s field."""
    for j, tool in enumerate(tools):
        at = f"{where}[{j}]"
        if not isinstance(tool, dict):
            raise _bad(at, "must be a function or custom tool object")
        if tool.get("type") not in ("function", "custom"):
            raise _bad(f"{at}.type", f"must be function or custom, got "
                       f"{json.dumps(tool.get('type'))[:40]}", "unsupported_parameter")
        if not isinstance(tool.get("name"), str):
            raise _bad(f"{at}.name", "is required: a string")
        if tool["type"] == "custom":
            _format_kind(tool, at)
    return tools


def encode_input(payload: str) -> str:
    return json.dumps({INPUT_KEY: payload}, ensure_ascii=False)


def decode_input(arguments: str) -> str:
    """A finished shim call's payload; arguments that hold none are the payload as they are.
    NOTE(lone-input): a lone UTF-16 surrogate in it (the model wrote an unpaired ``\\ud83d``,
    legal JSON) stays the JSON escape the model wrote, as text: an input holding the surrogate
    itself is no text a body may carry (json_body.py refuses it), so the item sent back inline
    was a 400 while previous_response_id took it."""
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return escaped_surrogates(arguments)
    value = parsed.get(INPUT_KEY) if isinstance(parsed, dict) else None
    return escaped_surrogates(value if isinstance(value, str) else arguments)


def decode_input_prefix(arguments: str) -> str:
    """The payload read so far from a shim call's partial arguments ``{"input": "...``, so
    that streamed deltas stay a prefix of the final input (an escape not yet whole, or half
    a surrogate pair, waits for the rest); "" until the string opens."""
    head = _HEAD.match(arguments)
    if head is None:
        return ""
    body, i = arguments[head.end():], 0
    while i < len(body) and body[i] != '"':
        step = 1 if body[i] != "\\" else 6 if body[i + 1:i + 2] == "u" else 2
        if i + step > len(body):
            break
        i += step
    try:
        payload = _LAX.decode('"' + body[:i] + '"')
    except ValueError:
        return ""
    if payload and "\ud800" <= payload[-1] <= "\udbff":  # half a pair waits for the rest
        payload = payload[:-1]
    return escaped_surrogates(payload)  # NOTE(lone-input)


def choice_name(name: str, tools: list[Any]) -> str:
    """A named ``tool_choice``'s tool as the model is shown it, as vLLM 0.33 resolves it
    (responses/protocol.py _resolve_named_tool_choice): a name in ``tools`` (a namespaced one
    as ``NS__name``) as it is, else the one namespaced function of that name; one in two
    namespaces is ambiguous (vLLM's 400); none: as it is (the chat parser's 400 names it)."""
    exact: set[Any] = set()
    local: dict[str, list[str]] = {}
    for tool in tools:
        if not isinstance(tool, dict):
            continue
        if tool.get("type") != "namespace":
            exact.add(tool.get("name"))
            continue
        for inner in tool.get("tools") or []:
            if isinstance(inner, dict) and isinstance(inner.get("name"), str):
                flat = flat_name(tool["name"], inner["name"])
                exact.add(flat)
                local.setdefault(inner["name"], []).append(flat)
    found = [] if name in exact else local.get(name, [])
    if len(found) > 1:
        raise _bad("tool_choice", f"Tool choice {name[:64]!r} is ambiguous: it is defined in "
                   f"more than one namespace ({', '.join(found)}). Select it by its full "
                   "'<namespace>__<name>' name.")
    return found[0] if found else name
