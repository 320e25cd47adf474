"""Which JSON schemas vLLM 0.33's "auto" structured-output backend gives to xgrammar.

NOTE(xgrammar-reach): vLLM compiles a JSON schema with xgrammar (strict mode: open objects
closed, guided_fields.py NOTE(strict-schemas)) unless the schema uses a feature xgrammar gets
wrong; then the whole schema goes to guidance, which leaves every object open. A schema kvpool
closes must be one vLLM closes, or a value vLLM generates (an undeclared key of an object
elsewhere in a schema that also says ``multipleOf``) can never be generated here. The test is
vLLM's ``has_xgrammar_unsupported_json_features``, restated: anywhere in the schema (every
nested object and list, as vLLM walks it),

    integer / number with multipleOf
    array with uniqueItems, contains, minContains or maxContains
    string with a format outside xgrammar's list, or a pattern / format with a length bound
    object with propertyNames that has a pattern / format with a length bound, or beside
        patternProperties, properties or an unevaluatedProperties other than true
    object with patternProperties beside properties, or with more than one pattern
    allOf of two or more branches
"""

from __future__ import annotations

from typing import Any

__all__ = ["goes_to_xgrammar"]

_FORMATS = frozenset({"email", "date", "time", "date-time", "duration", "ipv4", "ipv6",
                      "hostname", "uuid", "uri", "uri-reference", "uri-template", "json-pointer",
                      "relative-json-pointer"})  # the string formats xgrammar compiles


def goes_to_xgrammar(schema: Any) -> bool:
    """Whether vLLM 0.33 compiles ``schema`` with xgrammar (NOTE(xgrammar-reach))."""
    return not _unsupported(schema)


def _unsupported(node: Any) -> bool:
    if not isinstance(node, dict):
        return False
    if _unsupported_here(node, _types(node)):
        return True
    for value in node.values():
        items = value if isinstance(value, list) else [value]
        if any(isinstance(v, dict) and _unsupported(v) for v in items):
            return True
    return False


def _unsupported_here(node: dict, types: set[str]) -> bool:
    if types & {"integer", "number"} and "multipleOf" in node:
        return True
    if "array" in types and {"uniqueItems", "contains", "minContains", "maxContains"} & \
            node.keys():
        return True
    if "string" in types and ("format" in node and node["format"] not in _FORMATS
                              or _bounded_pattern(node)):
        return True
    if "object" in types and _object_unsupported(node):
        return True
    branches = node.get("allOf")
    return isinstance(branches, list) and len(branches) >= 2


def _object_unsupported(node: dict) -> bool:
    names = node.get("propertyNames")
    if "propertyNames" in node and (
            isinstance(names, dict) and _bounded_pattern(names)
            or "patternProperties" in node or "properties" in node
            or node.get("unevaluatedProperties", True) is not True):
        return True
    patterns = node.get("patternProperties")
    return isinstance(patterns, dict) and ("properties" in node or len(patterns) > 1)


def _bounded_pattern(node: dict) -> bool:
    return ("pattern" in node or "format" in node) and \
        ("minLength" in node or "maxLength" in node)


def _types(node: dict) -> set[str]:
    kind = node.get("type")
    if isinstance(kind, str):
        return {kind}
    return {k for k in kind if isinstance(k, str)} if isinstance(kind, list) else set()
