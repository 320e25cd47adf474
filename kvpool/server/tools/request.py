"""``tools``, ``tool_choice`` and ``parallel_tool_calls`` -> one validated :class:`ToolRequest`.

Rules (vLLM's, OpenAI's shapes)::

    tools               [{"type": "function", "function": {"name", "description"?,
                          "parameters"? (an object; checked as a schema only where it
                          is compiled: NOTE(schema-modes)), "strict"?}}, ...]
    tool_choice         "none" | "auto" | "required" | {"type": "function",
                          "function": {"name": NAME}}; left out: "auto" when tools are given
                          (vLLM's default), else "none"
    parallel_tool_calls true (default) | false: at most one call

``auto`` needs ``--enable-auto-tool-choice --tool-call-parser NAME`` (else 400, vLLM's
message); required and named compile a grammar (forced_schema) that the structured-output
path enforces, so they need no parser. Every 400 names the param (``tools[1].function.name``).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from kvpool.errors import RequestError
from kvpool.runtime.model.grammar import GrammarSpec
from kvpool.server.guided_fields import close_objects, xgrammar_closed
from kvpool.server.json_body import bool_field
from kvpool.server.tools.calls import TOOL_NAME, Extracted
from kvpool.server.tools.forced import CallArrayStream, NamedStream
from kvpool.server.tools.stream import ParserStream
from kvpool.server.xgrammar_reach import goes_to_xgrammar

_bad = RequestError.field  # errors.py: "param: message", with the param named

__all__ = ["MAX_TOOLS", "ToolRequest", "check_chat_tools", "forced_schema", "parse_tool_request",
           "template_tools"]

# NOTE(tool-list): vLLM bounds neither the count nor the names (a str) and takes a name twice;
# an agent with several MCP servers loads hundreds of tools named ``mcp__server__tool``, and
# frameworks namespace them with / or :. So: up to MAX_TOOLS (the body's size bounds them
# anyway), any name calls.py's TOOL_NAME takes, a repeated name served (a named tool_choice
# and the auto parsers' typing take its first tool).
MAX_TOOLS = 4096
AUTO_NEEDS_FLAGS = ('"auto" tool choice requires --enable-auto-tool-choice and '
                    '--tool-call-parser to be set')
_CHOICES = ("none", "auto", "required")
_TYPES = frozenset({"object", "array", "string", "number", "integer", "boolean", "null"})
_DEFS = ("$defs", "definitions")  # NOTE(tool-defs)
_EMPTY = {"type": "object", "properties": {}}  # NOTE(closed-tools)


@dataclass(frozen=True, slots=True)
class ToolRequest:
    """What a chat request asked of its tools."""

    tools: tuple[dict[str, Any], ...]  # as sent: the chat template renders them
    choice: str  # none | auto | required | named
    name: str | None = None  # the named function
    parallel: bool = True  # parallel_tool_calls
    parser: Any = None  # auto: the --tool-call-parser
    grammar: GrammarSpec | None = None  # required / named: what forces the call (None
    # beside a client's structural tag: forced_tool_fields.py NOTE(tool-forced))

    @property
    def forced(self) -> bool:
        """Whether the choice forces a call (``required`` or a named function)."""
        return self.choice in ("required", "named")

    @property
    def call_finish(self) -> bool:
        """Whether a call read from an output that stopped makes the finish ``tool_calls``:
        for auto and required; a named choice keeps ``stop``, as OpenAI and vLLM answer it."""
        return self.choice != "named"

    @property
    def extracts(self) -> bool:
        """Whether the output is read for calls (``none``: plain content)."""
        return self.choice != "none"

    def stream(self) -> Any:
        if self.choice == "named":
            return NamedStream(self.name)
        if self.choice == "required":
            return CallArrayStream()
        return ParserStream(self.parser, None if self.parallel else 1)

    def extract(self, text: str) -> Extracted:
        if self.choice == "named":
            return NamedStream.extract(self.name, text)
        if self.choice == "required":
            return CallArrayStream.extract(text)
        got = self.parser.extract(text)
        return got if self.parallel else Extracted(got.content, got.calls[:1])


def parse_tool_request(body: dict[str, Any], parser: Any) -> ToolRequest | None:
    """``parser``: the auto parser, or None without --enable-auto-tool-choice. None: the
    request has no tools."""
    tools = _tools(body.get("tools"))
    parallel = bool_field(body, "parallel_tool_calls", True)  # NOTE(lax-bool): "no", 0 too
    choice, name = _choice(body.get("tool_choice"), tools)
    if not tools:
        return None
    if choice == "auto" and parser is None:
        raise RequestError(AUTO_NEEDS_FLAGS, param="tool_choice")
    grammar = None
    if choice in ("named", "required"):
        _check_compiled(tools, name)
        grammar = _compile(forced_schema(tools, name, parallel), tools, name)
    return ToolRequest(tuple(tools), choice, name, parallel,
                       parser.for_tools(tuple(tools)) if choice == "auto" else None, grammar)


def check_chat_tools(body: dict[str, Any]) -> None:
    """The checks vLLM's chat request makes before anything else (OpenAI's too): ``tools``
    may not be an empty list, and a ``tool_choice`` other than ``"none"`` needs ``tools``.
    Chat's own route only: a Responses body always has a ``tool_choice`` (``"auto"`` by
    default) and may have no tools."""
    if body.get("tools") == []:
        raise _bad("tools", "must not be an empty array: give at least one tool or leave "
                   "the field out")
    if body.get("tool_choice") not in (None, "none") and body.get("tools") is None:
        raise _bad("tool_choice", "needs tools: when using tool_choice, tools must be set")


def template_tools(body: dict[str, Any]) -> tuple[dict[str, Any], ...] | None:
    """vLLM's /tokenize ``tools``: validated, for the template only (nothing is generated);
    ``[]`` stays tools, as vLLM hands it over (chat_template.py NOTE(empty-tools))."""
    tools = body.get("tools")
    return None if tools is None else tuple(_tools(tools))


def _tools(value: Any) -> list[dict[str, Any]]:
    if value is None:
        return []
    if not isinstance(value, list) or len(value) > MAX_TOOLS:
        raise _bad("tools", f"must be a list of at most {MAX_TOOLS} tool objects")
    out = []
    for i, tool in enumerate(value):
        where = f"tools[{i}]"
        if not isinstance(tool, dict) or tool.get("type", "function") != "function":
            raise _bad(f"{where}.type", "each tool must be {'type': 'function', "
                       "'function': {...}}")
        fn = tool.get("function")
        if not isinstance(fn, dict):
            raise _bad(f"{where}.function", "must be an object with a name")
        strict = _function(fn, f"{where}.function")
        # the template sees strict as vLLM's parsed tool holds it: a bool ("no" -> false)
        out.append(tool if strict is fn.get("strict") else
                   {**tool, "function": {**fn, "strict": strict}})
    return out


def _function(fn: dict[str, Any], where: str) -> bool | None:
    """Checks one function; its ``strict`` as vLLM reads it (NOTE(lax-bool))."""
    name = fn.get("name")
    if not isinstance(name, str) or not TOOL_NAME.fullmatch(name):
        raise _bad(f"{where}.name", "is required: a string of 1-256 characters, no control "
                   "characters")
    if fn.get("description") is not None and not isinstance(fn["description"], str):
        raise _bad(f"{where}.description", "must be a string")
    if fn.get("parameters") is not None and not isinstance(fn["parameters"], dict):
        raise _bad(f"{where}.parameters", "must be a JSON schema object")
    return bool_field(fn, "strict", param=f"{where}.strict")


def _check_compiled(tools: list[dict[str, Any]], name: str | None) -> None:
    """NOTE(schema-modes): a schema is checked as one only where it is compiled: each tool's
    for ``required``, the named tool's for a named choice. vLLM's FunctionDefinition keeps
    ``parameters`` as a plain dict and compiles tool schemas only for those two choices, so
    under ``auto`` / ``none`` (and /tokenize) any object is served as sent: Berkeley
    function-calling (BFCL) style ``{"type": "dict", ...}`` tools reach the template and the
    auto parsers (which read ``properties`` defensively: typed.py) unchanged."""
    for i, tool in enumerate(tools):
        if name is not None and tool["function"]["name"] != name:
            continue
        if tool["function"].get("parameters") is not None:
            _schema_shape(tool["function"]["parameters"], f"tools[{i}].function.parameters")
        if name is not None:
            return  # a name given twice: its first tool is the one compiled (NOTE(tool-list))


def _schema_shape(schema: dict[str, Any], param: str) -> None:
    """A compiled schema's top-level ``type`` and ``properties`` (the compile checks the
    rest)."""
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind]
    if kind is not None and not all(isinstance(k, str) and k in _TYPES for k in kinds):
        raise _bad(param, f"invalid JSON schema: unknown type {kind!r}")
    if "properties" in schema and not isinstance(schema["properties"], dict):
        raise _bad(param, "invalid JSON schema: properties must be an object")


def _choice(value: Any, tools: list[dict[str, Any]]) -> tuple[str, str | None]:
    if value is None:
        return ("auto" if tools else "none"), None
    if isinstance(value, str):
        if value not in _CHOICES:
            raise _bad("tool_choice", f"must be one of {', '.join(_CHOICES)} or "
                       "{'type': 'function', 'function': {'name': ...}}")
        if value == "required" and not tools:
            raise _bad("tool_choice", "'required' needs tools")
        return value, None
    fn = value.get("function") if isinstance(value, dict) else None
    name = fn.get("name") if isinstance(fn, dict) else None
    if not isinstance(name, str) or value.get("type") != "function":
        raise _bad("tool_choice", "a named tool choice is {'type': 'function', "
                   "'function': {'name': NAME}}")
    if name not in {t["function"]["name"] for t in tools}:
        raise _bad("tool_choice", f"the function {name[:64]!r} is not in tools")
    return "named", name


def _parameters(tool: dict[str, Any], reach: bool | None = None) -> dict[str, Any]:
    """NOTE(closed-tools): the schema a forced call of ``tool`` is generated under. vLLM
    substitutes ``{"type": "object", "properties": {}}`` for parameters left out, null or
    ``{}`` (its own comment: such a call's arguments are always ``{}``), and its default
    backend (xgrammar, strict mode) closes every object schema with properties and without
    additionalProperties; llguidance leaves them open, so forced calls invented keys and a
    zero-argument tool got an open object (or ran to max_tokens). So those are closed here
    (guided_fields.py NOTE(strict-schemas), as response_format's schemas are). Parameters
    that declare no member (``{"type": "object"}``, a description at most) stay any object,
    as xgrammar 0.2.8's strict mode leaves them (measured): before, they were forced to
    ``{}``, and a free-form tool could never be called with an argument. ``reach``: whether
    the schema it is part of goes to xgrammar (NOTE(union-reach)); if not, it stays as sent;
    None (a named call): asked of the tool's own."""
    params = tool["function"].get("parameters") or _EMPTY
    if reach is None:
        return close_objects(params)
    return xgrammar_closed(params) if reach else params


def _union_reach(tools: list[dict[str, Any]]) -> bool:
    """NOTE(union-reach): for tool_choice required vLLM 0.33 builds one schema, an array of
    every tool's call, and picks its backend for that whole schema (xgrammar_reach.py
    NOTE(xgrammar-reach)): one tool with a feature xgrammar gets wrong (``multipleOf``, ...)
    sends every tool to guidance, where no object is closed and no keyword xgrammar ignores
    is dropped (NOTE(xgrammar-ignores): llguidance's 400, as guidance's). So each tool's
    parameters are closed only when every tool's go to xgrammar, not each tool apart. The
    call envelope ({name, parameters}) stays closed either way: a key beside them is never
    read into the call."""
    return all(goes_to_xgrammar(t["function"].get("parameters") or _EMPTY) for t in tools)


def forced_schema(tools: list[dict[str, Any]], name: str | None, parallel: bool) -> Any:
    """named: the function's parameters; required: an array of {name, parameters} items, one
    shape per tool (name first, so a stream reads the name before its arguments)."""
    if name is not None:
        return next(_parameters(t) for t in tools if t["function"]["name"] == name)
    reach = _union_reach(tools)
    params = [_parameters(t, reach) for t in tools]
    defs = _hoisted_defs(params)
    items = [{"type": "object", "properties": {
        "name": {"const": t["function"]["name"]},
        "parameters": {k: v for k, v in p.items() if k not in _DEFS}},
        "required": ["name", "parameters"], "additionalProperties": False}
        for t, p in zip(tools, params)]
    schema = {"type": "array", "minItems": 1,
              "items": items[0] if len(items) == 1 else {"anyOf": items}, **defs}
    return schema if parallel else {**schema, "maxItems": 1}


def _hoisted_defs(params: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """NOTE(tool-defs): required nests each tool's parameters inside one array schema, where a
    ``#/$defs/X`` reference (pydantic's nested models) would point at that array's root; so
    every tool's ``$defs`` (and draft-7 ``definitions``) move to the root, as vLLM moves
    them. One name defined two ways by two tools is a 400 naming the later tool."""
    out: dict[str, dict[str, Any]] = {}
    for i, tool_params in enumerate(params):
        for key in _DEFS:
            defs = tool_params.get(key)
            if not isinstance(defs, dict):
                continue
            into = out.setdefault(key, {})
            for def_name, schema in defs.items():
                if into.setdefault(def_name, schema) != schema:
                    raise _bad(f"tools[{i}].function.parameters", f"{key}.{def_name} is "
                               "defined differently by an earlier tool")
    return out


def _compile(schema: Any, tools: list[dict[str, Any]], name: str | None) -> GrammarSpec:
    try:  # the compile's 400s (a $ref cycle, over budget) name tools, not response_format
        return replace(GrammarSpec.json_schema(schema, name or "tool_calls"), param="tools")
    except RequestError as exc:
        why = str(exc).removeprefix("response_format: ")
    reach = None if name is not None else _union_reach(tools)
    for i, tool in enumerate(tools):  # which tool's schema the compiler refused
        if name is None or tool["function"]["name"] == name:
            try:
                GrammarSpec.json_schema(_parameters(tool, reach))
            except RequestError as exc:
                raise _bad(f"tools[{i}].function.parameters",
                           str(exc).removeprefix("response_format: ")) from None
    raise _bad("tools", why)
