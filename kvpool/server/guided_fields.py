"""vLLM's structured-output spellings -> the same GrammarSpec ``response_format`` compiles to.

::

    guided_json: SCHEMA (object or JSON text)   structured_outputs: {"json": SCHEMA}
    guided_regex: "REGEX"                        structured_outputs: {"regex": "REGEX"}
    guided_choice: ["a", "b"]                    structured_outputs: {"choice": [...]}
    guided_grammar: "LARK" or "GBNF"             structured_outputs: {"grammar": ...}
                                                 structured_outputs: {"json_object": true}
                                                 structured_outputs: {"structural_tag": TAG}
                                                 (structural_tag.py)

vLLM's option keys of ``structured_outputs`` are taken beside the constraint:
``disable_fallback`` (one backend here: nothing to fall back to), ``disable_any_whitespace``
(JSON comes out compact either way: grammar.py NOTE(whitespace)), ``whitespace_pattern``
(unheeded, as every vLLM 0.33 backend leaves it: listed as ignored, NOTE(so-unheeded)),
and ``disable_additional_properties`` (a bool; what it asks is the default here: every JSON
schema, whichever field it came in, has its open objects closed, NOTE(strict-schemas)).

One constraint per request: two of these is a 400, and so is a ``structured_outputs`` that
gives none (``{}``, option keys alone, ``json_object: false``), as vLLM's
StructuredOutputsParams refuses it: never a silently unconstrained answer. A
``response_format`` other than ``text`` beside them: NOTE(format-over). Grammars are
llguidance's Lark dialect (a ``start`` rule) or GBNF (``root ::= ...``, converted: grammar.py
NOTE(gbnf)); every kind compiles and is probed under the same budget as a JSON schema
(kvpool/runtime/model/grammar_compile.py, NOTE(budget)).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from kvpool.errors import RequestError
from kvpool.runtime.model.grammar import MAX_GRAMMAR_CHARS, GrammarSpec, map_subschemas
from kvpool.server.json_body import decode_json_text
from kvpool.server.structural_tag import parse_structural_tag
from kvpool.server.xgrammar_reach import (as_xgrammar_reads, goes_to_xgrammar,
                                          read_property_names)

_bad = RequestError.field  # errors.py: "param: message", with the param named

__all__ = ["GUIDED_FIELDS", "MAX_CHOICES", "close_objects", "format_over_guided", "parse_guided",
           "unheeded", "xgrammar_closed"]

GUIDED_FIELDS = frozenset({"guided_json", "guided_regex", "guided_choice", "guided_grammar",
                           "structured_outputs"})
# NOTE(choice-cap): as vLLM, any strings ("" too) but not an empty list. The choice grammar
# (``start: "a" | "b"``) has the 64 KiB grammar cap, at least 5 characters an entry: a longer
# list is refused before its grammar is built. llguidance's Earley row (2,000 items, one an
# entry) refuses 2,000 or more at compile, a 400 naming the field (README, Structured output).
MAX_CHOICES = MAX_GRAMMAR_CHARS // len(' | ""')
_OPTIONS = {"disable_fallback": bool, "disable_any_whitespace": bool,
            "disable_additional_properties": bool, "whitespace_pattern": str}
_OUTPUT_KEYS = {"json": "guided_json", "regex": "guided_regex", "choice": "guided_choice",
                "grammar": "guided_grammar", "json_object": "json_object",
                "structural_tag": "structural_tag"}
_SO_KEYS = frozenset(_OUTPUT_KEYS) | frozenset(_OPTIONS)
_KINDS = "json, regex, choice, grammar, json_object or structural_tag"
_FORMAT_KEYS = {"json_schema": "json", "json_object": "json_object",
                "structural_tag": "structural_tag"}  # response_format type -> its key here


def parse_guided(body: dict[str, Any]) -> GrammarSpec | None:
    """The one guided constraint of ``body`` (None: none given); 400s name the field."""
    given = [(k, body[k]) for k in sorted(GUIDED_FIELDS) if body.get(k) is not None]
    so = body.get("structured_outputs")
    if so is not None:
        given = [(k, v) for k, v in given if k != "structured_outputs"] + _constraints(so)
    if not given:
        return None
    if len(given) > 1:
        raise _bad(given[1][0], f"only one structured-output constraint per request "
                   f"({given[0][0]} is given too)")
    param, value = given[0]
    try:
        spec = _spec(param.rpartition(".")[2], value, param)
    except RequestError as exc:  # the compiler names response_format: name this field
        message = str(exc).removeprefix("response_format: ").removeprefix(f"{param}: ")
        raise _bad(param, message) from None
    return dataclasses.replace(spec, param=param)  # so do the compile's 400s (on a worker)


def unheeded(body: dict[str, Any], ignored: tuple[str, ...],
             fields: Any) -> tuple[dict[str, Any], tuple[str, ...]]:
    """NOTE(so-unheeded): what vLLM 0.33 answers with a 200 and leaves unheeded, taken out of
    ``body`` and added to ``ignored`` (the X-Kvpool-Ignored-Fields header). A key
    StructuredOutputsParams (a pydantic dataclass) does not have is dropped by it:
    ``structured_outputs.<key>``, through ``fields`` (field_policy.FieldPolicy: logged once,
    a 400 with --reject-unknown-fields). ``whitespace_pattern`` is a field of it that no
    vLLM 0.33 backend reads (xgrammar and guidance take only the server's
    disable_any_whitespace): checked as a string, then listed, never a 400. Beside chat's
    tool_choice forcing a call, the whole of it goes: forced_tool_fields.py NOTE(tool-forced)."""
    so = body.get("structured_outputs")
    if isinstance(so, dict) and not _SO_KEYS.issuperset(so):
        ignored += fields.check(so, _SO_KEYS, prefix="structured_outputs.")
        body = {**body, "structured_outputs": {k: v for k, v in so.items() if k in _SO_KEYS}}
    if isinstance(so, dict) and so.get("whitespace_pattern") is not None:
        ignored += ("structured_outputs.whitespace_pattern",)
    return body, ignored


def _constraints(so: Any) -> list[tuple[str, Any]]:
    """The constraint keys ``structured_outputs`` gives, as (param, value); at least one."""
    if not isinstance(so, dict):
        raise _bad("structured_outputs", f"must be an object with one of {_KINDS}")
    _options(so)
    given = [(f"structured_outputs.{k}", v) for k, v in so.items()
             if k in _OUTPUT_KEYS and v is not None]
    if not given:  # vLLM: "You must use one kind of structured outputs constraint"
        raise _bad("structured_outputs", f"must give one constraint: one of {_KINDS} (the "
                   "option keys alone constrain nothing)")
    return given


def format_over_guided(body: dict[str, Any], spec: GrammarSpec) -> GrammarSpec:
    """NOTE(format-over): a ``response_format`` other than text (``spec``) beside
    ``structured_outputs`` is merged as vLLM merges them: the format takes the place of the
    constraint of its own kind (json_schema: ``json``, json_object, structural_tag) and the
    option keys stay (the format's schema is closed either way: NOTE(strict-schemas)); a
    constraint of another kind beside it is a 400, as vLLM's "only one kind" is. Beside a
    guided_* field (vLLM 0.33 drops those: its output is unconstrained by them) a 400 too:
    either way one constraint the client sent would go unheeded."""
    fmt, so = body["response_format"], body.get("structured_outputs")
    legacy = sorted(k for k in GUIDED_FIELDS - {"structured_outputs"} if body.get(k) is not None)
    kinds = [k for k, v in so.items() if k in _OUTPUT_KEYS and v is not None] \
        if isinstance(so, dict) else []
    if legacy or kinds != [_FORMAT_KEYS[fmt["type"]]]:
        sent = legacy[0] if legacy else f"structured_outputs.{kinds[0]}"
        raise _bad("response_format", f"give one structured-output constraint: the "
                   f"{fmt['type']} response_format or {sent}, not both")
    return spec


def _options(so: dict[str, Any]) -> None:
    """Checks the option keys' types."""
    for key, kind in _OPTIONS.items():
        if so.get(key) is not None and not isinstance(so[key], kind):
            raise _bad(f"structured_outputs.{key}", f"must be a {kind.__name__}")


def close_objects(schema: Any) -> Any:
    """NOTE(strict-schemas): a copy of ``schema`` generated as vLLM 0.33's default backend
    generates it. For a JSON schema its "auto" picks xgrammar, which compiles with
    ``strict_mode`` on (its default): measured with xgrammar 0.2.8, an object with
    ``properties`` (``{}`` too) or ``patternProperties`` and no ``additionalProperties`` /
    ``unevaluatedProperties`` takes no other key, and an array with ``prefixItems`` and no
    ``items`` / ``unevaluatedItems`` no item past them, nested (items, anyOf, $defs,
    additionalProperties) as at the root; ``additionalProperties: true`` or a schema keeps its
    extra keys, and a bare ``{"type": "object"}`` (json_object too) stays any object.
    llguidance leaves all of these open, and the model invented keys until max_tokens. So
    they are closed here, for response_format's json_schema, ``guided_json`` and
    ``structured_outputs.json`` (``disable_additional_properties`` asks nothing more) and for
    forced tool calls (tools/request.py NOTE(closed-tools)). Not followed where xgrammar
    would refuse or drop what the schema says, which vLLM serves open (its guidance
    fallback) or xgrammar serves unsoundly: a ``required`` name that ``properties`` lacks
    (xgrammar drops the requirement), ``minItems`` past the ``prefixItems``, a schema vLLM
    gives to guidance instead (xgrammar_reach.py NOTE(xgrammar-reach): ``multipleOf``, a
    bounded ``pattern``, ``patternProperties`` beside ``properties``, an ``allOf`` of two or
    more branches, ...) or xgrammar refuses (``minProperties`` past a closed object's keys),
    and an object with no member keyword that ``required``s a key (xgrammar takes only
    ``{}`` then, against it; measured). One with another keyword (``maxProperties``, ...) and
    no member is ``{}`` only, as in xgrammar (xgrammar_reach.py NOTE(xgrammar-ignores)).
    NOTE(closed-values): only schema positions (grammar.py's map_subschemas): an object in a
    ``const`` or ``enum`` stays as sent, and a property named ``default`` is still closed."""
    if not goes_to_xgrammar(schema):  # vLLM's guidance leaves it open: NOTE(xgrammar-reach)
        return schema
    return xgrammar_closed(schema)


def xgrammar_closed(schema: Any) -> Any:
    """``close_objects``' copy of a schema already known to go to xgrammar (a forced call's
    union asks that of every tool once: tools/request.py NOTE(union-reach)): each schema
    object read as xgrammar reads it (xgrammar_reach.py NOTE(xgrammar-ignores); its
    ``propertyNames`` first, NOTE(property-names)), then closed."""
    return map_subschemas(read_property_names(schema),
                          lambda node: _closed(as_xgrammar_reads(node)))


def _closed(schema: dict) -> dict:
    """``schema`` closed as NOTE(strict-schemas) says, its exceptions kept as sent."""
    prefix, least = schema.get("prefixItems"), schema.get("minItems", 0)
    if isinstance(prefix, list) and not {"items", "unevaluatedItems"} & schema.keys() \
            and isinstance(least, int) and least <= len(prefix):
        schema = {**schema, "items": False}
    if {"additionalProperties", "unevaluatedProperties"} & schema.keys() \
            or not ("properties" in schema or "patternProperties" in schema):
        return schema
    declared, required = schema.get("properties"), schema.get("required")
    if "patternProperties" not in schema and isinstance(declared, dict) \
            and isinstance(required, list) \
            and not all(isinstance(r, str) and r in declared for r in required):
        return schema
    return {**schema, "additionalProperties": False}


def _spec(key: str, value: Any, param: str) -> GrammarSpec:
    if key in ("guided_json", "json"):
        if isinstance(value, str):
            value = decode_json_text(value, param, "a JSON schema (an object or its JSON text)")
        return GrammarSpec.json_schema(close_objects(value))  # NOTE(strict-schemas)
    if key == "json_object":
        if value is not True:
            raise _bad(param, "must be true")
        return GrammarSpec.json_object()
    if key == "structural_tag":
        return parse_structural_tag(value, param)
    if key in ("guided_choice", "choice"):
        if not isinstance(value, list) or not value or len(value) > MAX_CHOICES \
                or not all(isinstance(c, str) for c in value):
            raise _bad(param, f"must be a list of 1..{MAX_CHOICES} strings")
        return GrammarSpec.choice(value)
    if not isinstance(value, str) or not value:
        raise _bad(param, "must be a non-empty string")
    if key in ("guided_regex", "regex"):
        return GrammarSpec.regex(value)
    return GrammarSpec.lark(value)
