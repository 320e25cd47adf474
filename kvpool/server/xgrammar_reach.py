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
xgrammar (measured through vLLM 0.33's own validation, backend "auto"), each schema object is
read as xgrammar reads it:
- one with ``$ref``, ``const``, ``enum``, ``anyOf``, ``oneOf`` or ``allOf`` is that keyword
  alone, the first of them in that order (``$defs`` / ``definitions`` kept): xgrammar drops
  every sibling, so ``{"allOf": [Base], "properties": {...}}`` is ``Base`` (closed: a sibling
  property is refused), not llguidance's "Unsatisfiable" intersection, and ``enum`` beside a
  ``type`` takes every listed value;
- ``dependentRequired``, ``dependentSchemas``, ``dependencies``, ``if`` / ``then`` /
  ``else``, ``not``, ``contains``, ``maxContains`` and ``uniqueItems`` are dropped (a node
  typed array with the last three sends the schema to guidance);
- ``unevaluatedProperties`` / ``unevaluatedItems`` are read as ``additionalProperties`` /
  ``items`` where those are absent (``false``: none past the declared ones; a schema: theirs)
  and dropped where given; ``minContains`` on an untyped node read as an array (``items``,
  ``prefixItems`` or ``unevaluatedItems``, no object keyword) raises ``minItems`` to it,
  elsewhere it is dropped;
- a node typed object or array that loses a keyword this way is no longer xgrammar's bare
  ``{"type": "object"}`` (any object) but a strict one: with no member keyword it takes only
  ``{}`` / ``[]``. Where that cannot hold (``minProperties`` / ``minItems`` above 0, a
  ``minContains`` past ``maxItems`` or a closed ``prefixItems``), xgrammar refuses the schema
  and vLLM gives it to guidance, which refuses the keyword: the node stays as sent, the same
  400 (an object declaring only ``required`` stays open, guided_fields.py
  NOTE(strict-schemas)).
In a schema vLLM gives to guidance, each stays llguidance's 400, as vLLM's guidance answers it
(``uniqueItems`` on an array, so pydantic's ``set[str]``, is always one).
"""

from __future__ import annotations

from typing import Any

__all__ = ["as_xgrammar_reads", "goes_to_xgrammar"]

_FORMATS = frozenset({"email", "date", "time", "date-time", "duration", "ipv4", "ipv6",
                      "hostname", "uuid", "uri", "uri-reference", "uri-template", "json-pointer",
                      "relative-json-pointer"})  # the string formats xgrammar compiles
_IGNORED = frozenset({"dependentRequired", "dependentSchemas", "dependencies", "if", "then",
                      "else", "not", "contains", "maxContains", "minContains",
                      "uniqueItems"})  # NOTE(xgrammar-ignores)
_READ_AS = {"unevaluatedProperties": "additionalProperties", "unevaluatedItems": "items"}
_ONLY = ("$ref", "const", "enum", "anyOf", "oneOf", "allOf")  # xgrammar's order
_DEFS = frozenset({"$defs", "definitions"})
_OBJECT_READ = frozenset({"properties", "additionalProperties", "unevaluatedProperties"})
_ARRAY_READ = frozenset({"items", "prefixItems", "unevaluatedItems"})


def goes_to_xgrammar(schema: Any) -> bool:
    """Whether vLLM 0.33 compiles ``schema`` with xgrammar (NOTE(xgrammar-reach))."""
    return not _unsupported(schema)


def as_xgrammar_reads(node: dict) -> dict:
    """NOTE(xgrammar-ignores): one schema object of a schema that goes to xgrammar, as xgrammar
    reads it (``node`` itself where xgrammar refuses that reading)."""
    only = next((k for k in _ONLY if k in node), None)
    if only is not None:
        kept = {k: v for k, v in node.items() if k == only or k in _DEFS}
        return node if len(kept) == len(node) else kept
    if not (_IGNORED | _READ_AS.keys()) & node.keys():
        return node
    out = {k: v for k, v in node.items() if k not in _IGNORED and k not in _READ_AS}
    for key, read_as in _READ_AS.items():
        if key in node and read_as not in node:
            out[read_as] = node[key]
    if "minContains" in node and "type" not in node and _ARRAY_READ & node.keys() \
            and not _OBJECT_READ & node.keys():
        out["minItems"] = max(_count(node, "minItems"), _count(node, "minContains"))
    return out if _strict(out) else node


def _strict(out: dict) -> bool:
    """Closes a typed object / array left with no member keyword as xgrammar's strict mode
    does (NOTE(xgrammar-ignores)); False where xgrammar refuses the node instead."""
    types = _types(out)
    if "object" in types and not {*_OBJECT_READ, "patternProperties", "propertyNames"} \
            & out.keys() and "required" not in out:
        if _count(out, "minProperties") > 0:
            return False
        out["additionalProperties"] = False
    if "array" in types and not _ARRAY_READ & out.keys():
        if _count(out, "minItems") > 0:
            return False
        out["items"] = False
    prefix, least, most = out.get("prefixItems"), _count(out, "minItems"), out.get("maxItems")
    if isinstance(prefix, list) and "items" not in out and least > len(prefix):
        return False
    return not (isinstance(most, int) and least > most)


def _count(node: dict, key: str) -> int:
    value = node.get(key, 0)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


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
