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
of the output. An agent SDK sends tools without a tool_choice, and vLLM answers it.
``custom`` and ``namespace`` tools are shown to the model as function tools, as vLLM shows
them (responses_custom.py); a named ``tool_choice`` may be ``{"type": "custom", "name"}``.
Hosted tool types (web_search, file_search, mcp, code_interpreter, ...) run nothing here: a
400 naming ``tools[i].type``.
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
from kvpool.server.responses_custom import choice_name, decode_input, flat_name, shown_tools

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
    A custom tool is echoed as CustomTool dumps it (``description`` / ``format`` null when
    not sent), a namespace with its tools echoed so; a named choice names its tool as
    resolved (``choice_name``), as vLLM rewrites it. Build after ``tool_fields`` has checked
    them."""

    def __init__(self, body: dict[str, Any]) -> None:
        tools = body.get("tools")
        tools = tools if isinstance(tools, list) else []
        self.tools = [_echo(t) for t in tools]
        self.tool_choice = body.get("tool_choice") or "auto"
        if not self.tools and self.tool_choice in ("auto", "none"):
            self.tool_choice = "none"
        if isinstance(self.tool_choice, dict):
            self.tool_choice = {**self.tool_choice,
                                "name": choice_name(self.tool_choice["name"], tools)}
        self.parallel = json_bool(body.get("parallel_tool_calls")) is not False
        self.custom = frozenset(t["name"] for t in tools if t["type"] == "custom")
        # a namespaced function's shown name -> (its namespace, its name there)
        self.namespaced = {flat_name(t["name"], f["name"]): (t["name"], f["name"])
                           for t in tools if t["type"] == "namespace" for f in t["tools"]
                           if isinstance(f, dict) and f.get("type") == "function"}

    def call_item(self, name: str, arguments: str, status: str) -> dict[str, Any]:
        """The output item of a call the model made, as vLLM 0.33 makes it (its responses/
        utils.py build_response_output_items): a custom tool's ``custom_tool_call`` (no
        status), a namespaced function's ``function_call`` named as in its namespace, with
        ``namespace``; else a ``function_call``."""
        if name in self.custom:
            return {"type": "custom_tool_call", "id": "ctc_" + uuid.uuid4().hex,
                    "call_id": "call_" + uuid.uuid4().hex, "name": name,
                    "input": decode_input(arguments)}
        item = function_call_item(name, arguments, status)
        if name in self.namespaced:
            item["namespace"], item["name"] = self.namespaced[name]
        return item


def _echo(tool: dict[str, Any]) -> dict[str, Any]:
    if tool["type"] == "custom":
        return {"description": None, "format": None, **tool}
    if tool["type"] == "namespace":
        return {**tool, "tools": [_echo(t) if isinstance(t, dict) and t.get("type") in
                                  ("function", "custom") else t for t in tool["tools"]]}
    return {**_TOOL_NULLS, **tool, "strict": json_bool(tool.get("strict"))}  # NOTE(lax-bool)


def tool_fields(body: dict[str, Any]) -> dict[str, Any]:
    """The chat body's ``tools`` / ``tool_choice`` / ``parallel_tool_calls`` of a Responses
    body (left out when not sent: chat's defaults are OpenAI's)."""
    out: dict[str, Any] = {}
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list):
            raise _bad("tools", "must be a list of function tools")
        out["tools"] = [{"type": "function", "function": {
            k: t[k] for k in _FUNCTION_KEYS if t.get(k) is not None}} for t in _shown(tools)]
    if body.get("tool_choice") is not None:
        out["tool_choice"] = _choice(body["tool_choice"], tools or [])
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
    tools, choice = _shown(body.get("tools") or []), body.get("tool_choice")
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
        want = choice_name(choice["name"], body["tools"])
        named = [p for name, p in params if name == want]
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


def _shown(tools: list[Any]) -> list[dict[str, Any]]:
    """The function tools the model is shown, in Responses' flat shape, in request order."""
    out: list[dict[str, Any]] = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise _bad(f"tools[{i}]", "must be a tool object {'type': 'function', 'name': ...}")
        kind = tool.get("type")
        if kind == "function":
            out.append(tool)
        elif kind in ("custom", "namespace"):
            out += shown_tools(tool, f"tools[{i}]")
        else:
            raise _bad(f"tools[{i}].type", f"only function, custom and namespace tools are "
                       f"supported, got {json.dumps(kind)[:40]} (hosted tools such as "
                       "web_search, file_search or mcp are not run by this server)",
                       "unsupported_parameter")
    return out


def _choice(value: Any, tools: list[Any]) -> Any:
    if isinstance(value, str):
        if value not in _CHOICES:
            raise _bad("tool_choice", f"must be one of {', '.join(_CHOICES)} or "
                       "{'type': 'function', 'name': NAME}")
        return value
    kind = value.get("type") if isinstance(value, dict) else None
    if kind in ("function", "custom") and isinstance(value.get("name"), str):
        return {"type": "function", "function": {"name": choice_name(value["name"], tools)}}
    if isinstance(kind, str) and kind not in ("function", "custom"):
        raise _bad("tool_choice", f"only function and custom tools are supported, got "
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
