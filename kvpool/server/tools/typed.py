"""Arguments written as text, typed by the tool's JSON schema (the XML formats' values).

Formats that write each argument between tags (qwen3_coder's ``<parameter=days>3</parameter>``,
glm45's ``<arg_value>3</arg_value>``) carry no JSON types: the value is text. vLLM types it by
the request's tool schema, and so does this module::

    the parameter's types   "type" (a name or a list), the types of its "enum" values, and
                            those of its anyOf / oneOf / allOf branches; none: string
    tried in this order     null ("null", any case), integer, number (finite; 3.0 -> 3),
                            boolean ("true" / "1", "false" / "0", any case), object and array
                            (JSON of that kind), string (the text as it is)
    none of them fits       the text as JSON where it is finite JSON, else the text

A parameter the schema does not name, or a tool not among the request's, keeps its text.
Type names also take the aliases models and hand-written schemas use (int, float, bool,
dict, list, str, ...), as vLLM's reader does.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from kvpool.server.tools.calls import ToolParser, arguments_text

__all__ = ["TypedParser", "coerce", "properties_of", "typed_arguments"]

ORDER = ("null", "integer", "number", "boolean", "object", "array", "string")
ALIASES = {"str": "string", "text": "string", "varchar": "string", "char": "string",
           "enum": "string", "int": "integer", "int32": "integer", "int64": "integer",
           "uint": "integer", "uint32": "integer", "uint64": "integer", "long": "integer",
           "short": "integer", "unsigned": "integer", "float": "number", "float32": "number",
           "float64": "number", "double": "number", "bool": "boolean", "dict": "object",
           "arr": "array", "list": "array", "sequence": "array"}
_INTEGER = re.compile(r"\s*[-+]?\d+\s*")
_NUMBER = re.compile(r"\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*")
_ENUM_TYPES = ((bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"),
               (list, "array"), (dict, "object"))


class TypedParser(ToolParser):
    """A parser of a format that writes its values as text: ``properties`` holds the request's
    tools' parameter schemas by tool name, which ``for_tools`` binds (a new parser: the
    server's own is never changed, so concurrent requests never see each other's tools)."""

    def __init__(self, properties: dict[str, dict[str, Any]] | None = None) -> None:
        self.properties = properties or {}

    def for_tools(self, tools: tuple[dict[str, Any], ...]) -> "TypedParser":
        return type(self)(properties_of(tools))

    def arguments(self, name: str, raw: dict[str, str]) -> str:
        """The JSON text of tool ``name``'s arguments ``raw`` (parameter -> text), typed."""
        return typed_arguments(raw, self.properties.get(name))


def properties_of(tools: tuple[dict[str, Any], ...]) -> dict[str, dict[str, Any]]:
    """Tool name -> its parameters' ``properties`` (only the dict-valued entries); a name
    given twice, its first tool's (request.py NOTE(tool-list))."""
    out: dict[str, dict[str, Any]] = {}
    for tool in tools:
        fn = tool.get("function") if isinstance(tool, dict) else None
        params = fn.get("parameters") if isinstance(fn, dict) else None
        props = params.get("properties") if isinstance(params, dict) else None
        if isinstance(fn, dict) and isinstance(fn.get("name"), str) and isinstance(props, dict):
            out.setdefault(fn["name"], {k: v for k, v in props.items() if isinstance(v, dict)})
    return out


def typed_arguments(raw: dict[str, str], properties: dict[str, dict[str, Any]] | None) -> str:
    """The JSON text of ``raw`` (parameter -> its text), each value typed by ``properties``
    (the tool's, or None)."""
    props = properties or {}
    args = {k: coerce(v, props[k]) if k in props else v for k, v in raw.items()}
    return arguments_text(args)  # NOTE(lone-args)


def schema_types(schema: Any) -> set[str]:
    """The type names a parameter's schema allows (aliases resolved); empty: none said."""
    if not isinstance(schema, dict):
        return set()
    named = schema.get("type")
    listed = named if isinstance(named, list) else ()
    types = {named} if isinstance(named, str) else {t for t in listed if isinstance(t, str)}
    enum = schema.get("enum")
    for value in enum if isinstance(enum, list) else ():
        types.add("null" if value is None else
                  next(t for cls, t in _ENUM_TYPES if isinstance(value, cls)))
    for key in ("anyOf", "oneOf", "allOf"):
        branches = schema.get(key)
        for branch in branches if isinstance(branches, list) else ():
            types |= schema_types(branch)
    return {ALIASES.get(t.strip().lower(), t.strip().lower()) for t in types}


def coerce(text: str, schema: Any) -> Any:
    """``text`` as the first type of ORDER that ``schema`` allows and that reads it."""
    types = schema_types(schema) or {"string"}
    for name in ORDER:
        if name not in types:
            continue
        if name == "string":
            return text
        ok, value = _read(name, text)
        if ok:
            return value
    ok, value = _json(text)
    return value if ok else text


def _read(name: str, text: str) -> tuple[bool, Any]:
    """Whether ``text`` reads as type ``name`` (not string), and the value."""
    if name == "null":
        return text.strip().lower() == "null", None
    if name == "integer" or (name == "number" and _INTEGER.fullmatch(text)):
        return _integer(text)
    if name == "number":
        value = float(text) if _NUMBER.fullmatch(text) else math.nan
        if not math.isfinite(value):
            return False, None
        return True, int(value) if value.is_integer() else value
    if name == "boolean":
        word = text.strip().lower()
        return word in ("true", "1", "false", "0"), word in ("true", "1")
    ok, value = _json(text)
    return ok and isinstance(value, dict if name == "object" else list), value


def _integer(text: str) -> tuple[bool, Any]:
    """``text`` as an integer, where it is one Python may read: past 4300 digits ``int``
    refuses (CPython's guard against quadratic conversion), and it stays text."""
    if not _INTEGER.fullmatch(text):
        return False, None
    try:
        return True, int(text)
    except ValueError:
        return False, None


def _json(text: str) -> tuple[bool, Any]:
    """``text`` as JSON, where it is JSON with no infinite or NaN number in it."""
    try:
        value = json.loads(text, parse_constant=_refuse)
    except (ValueError, RecursionError):
        return False, None
    return _finite(value), value


def _refuse(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _finite(value: Any) -> bool:
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(_finite(v) for v in value.values())
    if isinstance(value, list):
        return all(_finite(v) for v in value)
    return True
