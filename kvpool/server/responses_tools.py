"""Function tools in the Responses API: the request's fields in chat's shapes, and the
``function_call`` output items.

Responses tools are flat, chat's nest the function (tools/request.py checks them)::

    Responses  {"type": "function", "name", "description"?, "parameters"?, "strict"?}
    chat       {"type": "function", "function": {"name", "description"?, "parameters"?, ...}}
    Responses  tool_choice {"type": "function", "name": NAME}
    chat       tool_choice {"type": "function", "function": {"name": NAME}}

``tool_choice`` ``"auto"`` / ``"none"`` / ``"required"`` and ``parallel_tool_calls`` pass as
they are, so chat's rules hold (``required`` and a named function are grammar-forced), but
one: NOTE(auto-text) ``auto`` (also tools with no ``tool_choice``, OpenAI's default) on a
server without ``--enable-auto-tool-choice`` answers text, as vLLM's Responses API does
(chat's ``auto`` is a 400 there): the tools are in the prompt and nothing parses calls out
of the output. An agent SDK sends tools without a tool_choice, and vLLM answers it. Hosted
tool types (web_search, file_search, mcp, code_interpreter, ...) run nothing here: a 400
naming ``tools[i].type``.
A call the model makes is an output item ``{"type": "function_call", "id": "fc_...",
"call_id": "call_...", "name", "arguments", "status"}``; the client answers it with an input
item ``{"type": "function_call_output", "call_id", "output"}`` (responses_input.py).
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from kvpool.errors import RequestError
from kvpool.server.json_body import json_bool

_bad = RequestError.field  # errors.py: "param: message", with the param named

__all__ = ["ResponsesTools", "chat_param", "forced_text_format", "function_call_item",
           "text_only_auto", "tool_fields"]

_FUNCTION_KEYS = ("name", "description", "parameters", "strict")
_TOOL_NULLS = dict.fromkeys(("description", "parameters", "strict"))  # FunctionTool's optionals
_CHOICES = ("auto", "none", "required")
_NESTED = re.compile(r"^(tools\[\d+\])\.function\b")


class ResponsesTools:
    """What the response echoes of the request's tools (OpenAI's defaults when left out).
    Without tools an ``auto`` or ``none`` choice (sent or the default) is ``none``, as vLLM
    0.33's ResponsesRequest.check_tool_usage rewrites the request it echoes. Each tool is
    echoed as vLLM's pydantic FunctionTool (the openai package's) dumps it: its
    ``description``, ``parameters`` and ``strict`` null when not sent, other keys as sent.
    Build after ``tool_fields`` has checked them (function tools only)."""

    def __init__(self, body: dict[str, Any]) -> None:
        tools = body.get("tools")
        self.tools = [{**_TOOL_NULLS, **t, "strict": json_bool(t.get("strict"))}
                      for t in tools] if isinstance(tools, list) else []  # NOTE(lax-bool)
        self.tool_choice = body.get("tool_choice") or "auto"
        if not self.tools and self.tool_choice in ("auto", "none"):
            self.tool_choice = "none"
        self.parallel = json_bool(body.get("parallel_tool_calls")) is not False


def tool_fields(body: dict[str, Any]) -> dict[str, Any]:
    """The chat body's ``tools`` / ``tool_choice`` / ``parallel_tool_calls`` of a Responses
    body (left out when not sent: chat's defaults are OpenAI's)."""
    out: dict[str, Any] = {}
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise _bad("tools", "must be a list of function tools")
        out["tools"] = [_function_tool(t, f"tools[{i}]") for i, t in enumerate(tools)]
    if body.get("tool_choice") is not None:
        out["tool_choice"] = _choice(body["tool_choice"])
    if body.get("parallel_tool_calls") is not None:
        out["parallel_tool_calls"] = body["parallel_tool_calls"]
    return out


def text_only_auto(chat: dict[str, Any]) -> None:
    """NOTE(auto-text): on a server that reads no auto calls, the chat body's ``auto`` (sent,
    or implied by tools) becomes ``none``: text, as vLLM's Responses API answers it. The
    response still echoes the ``tool_choice`` the client sent (ResponsesTools)."""
    if chat.get("tools") and chat.get("tool_choice", "auto") == "auto":
        chat["tool_choice"] = "none"


def forced_text_format(body: dict[str, Any]) -> dict[str, Any] | None:
    """NOTE(forced-text): the ``text.format`` a response echoes under a ``tool_choice`` forcing
    a call (``required``, a named function), or None for any other choice. vLLM 0.33's tool
    parser replaces the request's ``text`` with the forced call's JSON schema, named
    ``tool_calling_response`` (strict), and its response echoes the request's ``text``; the
    schema is vLLM's (a named function's parameters, an empty object schema for none;
    ``required``: an array of ``{name, parameters}`` objects, ``maxItems`` 1 only for
    ``parallel_tool_calls: false``, every tool's ``$defs`` at the root). Beside a
    ``structured_outputs.structural_tag`` vLLM leaves the request's ``text`` as it is (None).
    Call after ``tool_fields`` has checked the tools."""
    tools, choice = body.get("tools") or [], body.get("tool_choice")
    so = body.get("structured_outputs")
    if isinstance(so, dict) and so.get("structural_tag") is not None:
        return None
    if not tools or choice != "required" and not isinstance(choice, dict):
        return None
    # one (name, parameters) per tool: a name given twice is two tools, the first its named
    # choice's (tools/request.py NOTE(tool-list))
    params = [(t.get("name"), _params_or_empty(t.get("parameters"))) for t in tools]
    if not all(isinstance(p, dict) for _, p in params):
        return None  # the chat parser's 400 names the tool
    if isinstance(choice, dict):
        named = [p for name, p in params if name == choice["name"]]
        if not named:
            return None  # the chat parser's 400 names it
        schema: dict[str, Any] = named[0]
    else:
        schema = {"type": "array", "minItems": 1, "items": {"type": "object", "anyOf": [
            {"properties": {"name": {"type": "string", "enum": [name]},
                            "parameters": {k: v for k, v in p.items() if k != "$defs"}},
             "required": ["name", "parameters"]} for name, p in params]}}
        if json_bool(body.get("parallel_tool_calls")) is False:  # NOTE(lax-bool)
            schema["maxItems"] = 1
        defs = {k: v for _, p in params if isinstance(p.get("$defs"), dict)
                for k, v in p["$defs"].items()}
        if defs:
            schema["$defs"] = defs
    return {"type": "json_schema", "name": "tool_calling_response", "schema": schema,
            "strict": True}


def _params_or_empty(params: Any) -> Any:
    return params if params else {"type": "object", "properties": {}}


def _function_tool(tool: Any, where: str) -> dict[str, Any]:
    if not isinstance(tool, dict):
        raise _bad(where, "must be a tool object {'type': 'function', 'name': ...}")
    kind = tool.get("type")
    if kind != "function":
        raise _bad(f"{where}.type", f"only function tools are supported, got "
                   f"{json.dumps(kind)[:40]} (hosted tools such as web_search, file_search "
                   "or mcp are not run by this server)", "unsupported_parameter")
    return {"type": "function",
            "function": {k: tool[k] for k in _FUNCTION_KEYS if tool.get(k) is not None}}


def _choice(value: Any) -> Any:
    if isinstance(value, str):
        if value not in _CHOICES:
            raise _bad("tool_choice", f"must be one of {', '.join(_CHOICES)} or "
                       "{'type': 'function', 'name': NAME}")
        return value
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "function" and isinstance(value.get("name"), str):
        return {"type": "function", "function": {"name": value["name"]}}
    if isinstance(kind, str) and kind != "function":
        raise _bad("tool_choice", f"only function tools are supported, got "
                   f"{json.dumps(kind)[:40]}", "unsupported_parameter")
    raise _bad("tool_choice", "a named tool choice is {'type': 'function', 'name': NAME}")


def chat_param(param: str) -> str | None:
    """The Responses name of a chat parser's tools param (``tools[1].function.name`` is
    ``tools[1].name``), or None for any other param."""
    return _NESTED.sub(r"\1", param) if _NESTED.match(param) else None


def function_call_item(name: str, arguments: str, status: str) -> dict[str, Any]:
    """A new function_call output item (its own ``fc_`` id and ``call_`` call id)."""
    return {"type": "function_call", "id": "fc_" + uuid.uuid4().hex,
            "call_id": "call_" + uuid.uuid4().hex, "name": name, "arguments": arguments,
            "status": status}
