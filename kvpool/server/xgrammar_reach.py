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

and past it, a schema xgrammar itself refuses as it reads it (NOTE(xgrammar-ignores)).

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
- one with no ``type`` is typed as xgrammar infers it (NOTE(xgrammar-infers)): an object, an
  array, or any value with its keywords dropped;
- a node typed object or array with a keyword past xgrammar's bare ``{"type": "object"}``
  (annotations at most, ``_BARE``: any object / array) is a strict one: with no member
  keyword it takes only ``{}`` / ``[]`` (``maxProperties``, ``maxItems``, ``$defs``, an
  unknown keyword or one dropped above: measured). An object that ``required``s a key stays
  open, where xgrammar would take ``{}`` against it (guided_fields.py NOTE(strict-schemas)).
Where a node xgrammar reads cannot hold so (``minProperties`` past the ``properties`` of a
closed object, ``minItems`` past a closed ``prefixItems`` or none, ``minItems`` or
``minContains`` past ``maxItems``), xgrammar refuses the schema and vLLM gives the whole of it
to guidance, which reads it as sent, every object open (``goes_to_xgrammar`` is False, so
nothing is read or closed here either, and a keyword llguidance lacks is its 400). A node
xgrammar drops (under ``not``, a ``$ref``'s sibling) is not read and refuses nothing; every
``$defs`` entry is read, referenced or not.
In a schema vLLM gives to guidance, each stays llguidance's 400, as vLLM's guidance answers it
(``uniqueItems`` on an array, so pydantic's ``set[str]``, is always one).

NOTE(property-names): llguidance refuses ``propertyNames`` ("Unimplemented keys"), where vLLM
gives xgrammar an object with it and no ``properties`` / ``patternProperties`` (pydantic's
``dict[Literal["x", "y"], int]``, ``dict[SomeEnum, int]``, a ``max_length`` key). Measured
with xgrammar 0.2.8: a key is generated from ``propertyNames`` read as a string's schema (its
``type`` defaults to string; a ``$ref`` target read as any schema: untyped, any string), its
pattern matched against the whole key; each value from ``additionalProperties`` where that is
a schema, else any value (``false`` too: the names allow them); ``minProperties`` /
``maxProperties`` hold and ``required`` does not (``{}`` and ``{"b": 1}`` pass ``required:
["a"]``). So each such object is read as ``patternProperties`` of one key regex (a
``pattern``, the ``enum`` / ``const`` strings, or any ``minLength`` to ``maxLength``
characters) and no other key, before its nodes are read (``{"pattern": ...}`` alone is an
untyped node: any value). xgrammar refuses ``propertyNames`` that is not an object or is
typed other than string. Left as sent (llguidance's 400): a key schema with ``format``,
``anyOf`` / ``oneOf`` / ``allOf``, no string value, or a ``$ref`` outside ``$defs`` /
``definitions``; an object with ``properties`` or ``patternProperties`` beside it (untyped
only: typed, vLLM gives it to guidance).
"""

from __future__ import annotations

from typing import Any

from kvpool.runtime.model.grammar import map_subschemas

__all__ = ["as_xgrammar_reads", "goes_to_xgrammar", "read_property_names"]

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
_DROPPED = _IGNORED | _READ_AS.keys()
_MEMBERED = frozenset({"object", "array"})
_OBJECT_MEMBERS = _OBJECT_READ | {"patternProperties", "propertyNames"}
# a node of only these is xgrammar's bare one (its cache key skips annotations): any object
_BARE = frozenset({"type", "title", "description", "default", "examples", "deprecated",
                   "readOnly", "writeOnly", "$comment", "$schema"})
_REGEX_META = frozenset("\\.+*?()|[]{}^$#&-~")  # escaped in a key regex: NOTE(property-names)
_REF_HOPS = 8  # $ref to $ref followed from a propertyNames, at most


def goes_to_xgrammar(schema: Any) -> bool:
    """Whether vLLM 0.33 compiles ``schema`` with xgrammar (NOTE(xgrammar-reach)): vLLM's own
    test, then xgrammar's, which refuses a schema object it cannot read (NOTE(xgrammar-ignores))."""
    return not _unsupported(schema) and not (isinstance(schema, dict) and _refused(schema))


def as_xgrammar_reads(node: dict) -> dict:
    """NOTE(xgrammar-ignores): one schema object of a schema that goes to xgrammar, as xgrammar
    reads it (``node`` itself where xgrammar refuses that reading)."""
    read = _reading(node)
    return node if read is None else _whole_patterns(read)


def _whole_patterns(node: dict) -> dict:
    """NOTE(whole-pattern): xgrammar 0.2.8 matches a string's ``pattern``, and a
    ``patternProperties`` key, against the whole string; llguidance, as JSON Schema says,
    anywhere in it: ``"abc"`` took ``"xabcx"``, ``"^[a-z]+"`` took ``"abc1"`` and ``"^x-"`` the
    key ``"x-a"``, none of which vLLM generates (third probe, P3). Each is anchored at both
    ends here, ``^(?:...)$``, which llguidance reads as xgrammar reads the pattern."""
    pattern, keyed = node.get("pattern"), node.get("patternProperties")
    strings = isinstance(pattern, str) and "string" in _types(node)
    if not strings and not isinstance(keyed, dict):
        return node
    out = dict(node)
    if strings:
        out["pattern"] = f"^(?:{pattern})$"
    if isinstance(keyed, dict):
        out["patternProperties"] = {f"^(?:{k})$": v for k, v in keyed.items()}
    return out


def read_property_names(schema: Any) -> Any:
    """NOTE(property-names): ``schema`` (one that goes to xgrammar) with each object xgrammar
    reads with ``propertyNames`` as the ``patternProperties`` it means (``schema`` itself
    where none has one); read before its nodes are, each alone (``as_xgrammar_reads``)."""
    if not isinstance(schema, dict) or not _names_anywhere(schema):
        return schema
    defs = {k: schema[k] for k in _DEFS if isinstance(schema.get(k), dict)}
    return map_subschemas(schema, lambda node: _keyed(node, defs))


def _names_anywhere(schema: dict) -> bool:
    """Whether a dict in ``schema`` has a ``propertyNames`` key (a walk, no copy)."""
    stack: list[Any] = [schema]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            if "propertyNames" in value:
                return True
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
    return False


def _keyed(node: dict, defs: dict) -> dict:
    """``node`` as NOTE(property-names) reads it, where xgrammar reads it as an object with
    ``propertyNames`` and a key regex is written here; else as sent."""
    read = _reading(node) if "propertyNames" in node else None
    if read is None or "propertyNames" not in read or "object" not in _types(read) \
            or {"properties", "patternProperties"} & read.keys():
        return node
    regex = _key_regex(read["propertyNames"], defs, True, _REF_HOPS)
    if regex is None:
        return node
    value = read.get("additionalProperties")
    out = {k: v for k, v in read.items()
           if k not in ("propertyNames", "additionalProperties", "required")}
    return {**out, "patternProperties": {regex: value if isinstance(value, dict) else {}},
            "additionalProperties": False}


def _key_regex(key: Any, defs: dict, typed: bool, hops: int) -> str | None:
    """The regex (matched whole: NOTE(whole-pattern)) of the keys ``key`` takes as xgrammar
    reads it, a string's schema where ``typed`` (else any schema: a ``$ref`` target); None
    where that is not written here (NOTE(property-names))."""
    if not isinstance(key, dict):
        return None
    if "$ref" in key:
        target = _target(key["$ref"], defs)
        return None if target is None or not hops else _key_regex(target, defs, False, hops - 1)
    values = [key["const"]] if "const" in key else key.get("enum")
    if values is not None:
        texts = [v for v in values if isinstance(v, str)] if isinstance(values, list) else ()
        return "|".join("".join("\\" + c if c in _REGEX_META else c for c in text)
                        for text in texts) if texts else None
    types = _types(key)
    if {"anyOf", "oneOf", "allOf", "format"} & key.keys() or types and "string" not in types:
        return None
    if not types and not typed:
        return "(?s:.)*"  # an untyped target: any value, so any key
    if isinstance(key.get("pattern"), str):
        return key["pattern"]
    least, most = _count(key, "minLength"), key.get("maxLength")
    return f"(?s:.){{{least},{most if isinstance(most, int) else ''}}}"


def _target(ref: Any, defs: dict) -> Any:
    """The local definition ``ref`` names (``#/$defs/x``, ``#/definitions/x``), else None."""
    if not isinstance(ref, str) or not ref.startswith("#/"):
        return None
    where, _, name = ref[2:].partition("/")
    found = defs.get(where, {}).get(name.replace("~1", "/").replace("~0", "~"))
    return found if isinstance(found, dict) else None


def _refused(node: dict) -> bool:
    """Whether xgrammar refuses ``node`` or a schema object it reads below it (its own reading's
    members, as it parses them: not what it drops)."""
    read = _reading(node)
    if read is None:
        return True
    subs = [read.get(k) for k in ("items", "additionalProperties", "propertyNames")]
    for key in ("prefixItems", "anyOf", "oneOf", "allOf"):
        subs += read[key] if isinstance(read.get(key), list) else ()
    for key in ("properties", "patternProperties", *_DEFS):
        subs += read[key].values() if isinstance(read.get(key), dict) else ()
    return any(_refused(sub) for sub in subs if isinstance(sub, dict))


def _reading(node: dict) -> dict | None:
    """``node`` as xgrammar reads it; None where it refuses it."""
    only = next((k for k in _ONLY if k in node), None)
    if only is not None:
        kept = {k: v for k, v in node.items() if k == only or k in _DEFS}
        return node if len(kept) == len(node) else kept
    if "type" in node and not _DROPPED & node.keys() and not _MEMBERED & _types(node):
        return node  # a scalar's node, as sent (the common leaf: no copy)
    typed = node if "type" in node else _inferred(node)
    if typed is None:  # untyped, no object / array keyword: any value (NOTE(xgrammar-infers))
        return {k: v for k, v in node.items() if k in _DEFS}
    out = {k: v for k, v in typed.items() if k not in _IGNORED and k not in _READ_AS}
    for key, read_as in _READ_AS.items():
        if key in node and read_as not in node:
            out[read_as] = node[key]
    if "minContains" in node and typed is not node and typed["type"] == "array":
        out["minItems"] = max(_count(node, "minItems"), _count(node, "minContains"))
    return out if node.keys() <= _BARE or _strict(out) else None


def _inferred(node: dict) -> dict | None:
    """NOTE(xgrammar-infers): xgrammar 0.2.8 reads an untyped node with ``properties``,
    ``additionalProperties`` or ``unevaluatedProperties`` as an object (those first), one with
    ``items``, ``prefixItems`` or ``unevaluatedItems`` as an array, and any other (``required``,
    ``minLength``, ``pattern``, ``minimum``, ``maxItems``, ``patternProperties``, ...) as any
    value, its keywords unenforced. llguidance applies each keyword to the type it concerns
    and lets every other type through: ``{"properties": ...}`` took ``5``, so a forced call of
    a tool whose parameters lack ``"type": "object"`` could come out as a number, and
    ``{"required": ["a"]}`` refused ``{}``, which vLLM generates. None: any value."""
    if _OBJECT_READ & node.keys():
        return {**node, "type": "object"}
    if _ARRAY_READ & node.keys():
        return {**node, "type": "array"}
    return None


def _strict(out: dict) -> bool:
    """Closes a typed object / array with no member keyword as xgrammar's strict mode does
    (NOTE(xgrammar-ignores)), unless it requires a key (guided_fields.py
    NOTE(strict-schemas)); False where xgrammar refuses the node instead."""
    types = _types(out)
    if "object" in types and (_too_few_keys(out) or _names_refused(out)):
        return False
    if "object" in types and not _OBJECT_MEMBERS & out.keys() and not out.get("required"):
        out["additionalProperties"] = False
    if "array" in types and not _ARRAY_READ & out.keys():
        if _count(out, "minItems") > 0:
            return False
        out["items"] = False
    if "array" not in types:
        return True
    prefix, least, most = out.get("prefixItems"), _count(out, "minItems"), out.get("maxItems")
    if isinstance(prefix, list) and "items" not in out and least > len(prefix):
        return False
    return not (isinstance(most, int) and least > most)


def _too_few_keys(node: dict) -> bool:
    """Whether xgrammar refuses an object node: strict, it takes no key past ``properties``
    (none where absent) unless ``additionalProperties`` (or a pattern) says otherwise, and
    ``minProperties`` asks more (NOTE(xgrammar-ignores))."""
    if {"additionalProperties", "unevaluatedProperties", "patternProperties",
            "propertyNames"} & node.keys():
        return False
    declared = node.get("properties")
    return _count(node, "minProperties") > (len(declared) if isinstance(declared, dict) else 0)


def _names_refused(node: dict) -> bool:
    """NOTE(property-names): xgrammar refuses ``propertyNames`` that is not a schema object or
    is typed other than string (a type list it reads, ``["integer"]``: no key then)."""
    if "propertyNames" not in node:
        return False
    names = node["propertyNames"]
    kind = names.get("type", "string") if isinstance(names, dict) else None
    return kind != "string" and not isinstance(kind, list)


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
