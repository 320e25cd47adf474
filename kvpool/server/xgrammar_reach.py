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

NOTE(xgrammar-ignores): what xgrammar 0.2.8 compiles and does not enforce, llguidance refuses
("Unimplemented keys"), so a schema vLLM serves was a 400 here. In a schema that goes to
xgrammar (measured through vLLM 0.33's own validation, backend "auto"): ``dependentRequired``,
``dependentSchemas``, ``dependencies``, ``if`` / ``then`` / ``else`` and ``uniqueItems`` (on
a node not typed array: one typed array sends the schema to guidance) are ignored, so they
are dropped; ``unevaluatedProperties`` is read as ``additionalProperties`` where that is
absent (``false``: no undeclared key, even with no ``properties``; a schema: the extra keys'
schema; ``true``: open) and dropped where it is given. In a schema vLLM gives to guidance,
each stays llguidance's 400, as vLLM's guidance answers it (``uniqueItems`` on an array, so
pydantic's ``set[str]``, is always one).
"""

from __future__ import annotations

from typing import Any

__all__ = ["as_xgrammar_reads", "goes_to_xgrammar"]

_FORMATS = frozenset({"email", "date", "time", "date-time", "duration", "ipv4", "ipv6",
                      "hostname", "uuid", "uri", "uri-reference", "uri-template", "json-pointer",
                      "relative-json-pointer"})  # the string formats xgrammar compiles
_IGNORED = frozenset({"dependentRequired", "dependentSchemas", "dependencies", "if", "then",
                      "else", "uniqueItems"})  # NOTE(xgrammar-ignores)
_UNEVALUATED = "unevaluatedProperties"


def goes_to_xgrammar(schema: Any) -> bool:
    """Whether vLLM 0.33 compiles ``schema`` with xgrammar (NOTE(xgrammar-reach))."""
    return not _unsupported(schema)


def as_xgrammar_reads(node: dict) -> dict:
    """NOTE(xgrammar-ignores): one schema object of a schema that goes to xgrammar, as xgrammar
    reads it: what it ignores dropped, ``unevaluatedProperties`` as ``additionalProperties``."""
    if not (_IGNORED & node.keys() or _UNEVALUATED in node):
        return node
    out = {k: v for k, v in node.items() if k not in _IGNORED and k != _UNEVALUATED}
    if _UNEVALUATED in node and "additionalProperties" not in node:
        out["additionalProperties"] = node[_UNEVALUATED]
    return out


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
