"""vLLM's structural tags: free text in which each tool call the model opens is held to a
schema. The request names the calls' openings and closings and the text that starts one::

    "response_format": {"type": "structural_tag",
                        "structures": [{"begin": "<function=get_weather>",
                                        "schema": {"type": "object", ...},
                                        "end": "</function>"}],
                        "triggers": ["<function="]}

or the same object (or its JSON text) as ``structured_outputs: {"structural_tag": ...}``.
Outside a call the text is free; once the output contains a trigger, it must go on as the
``begin`` of a structure that starts with that trigger, then JSON valid under the
structure's ``schema`` (any JSON when it has none), then its ``end``. Compiled by llguidance's
``StructTag`` into a Lark grammar, as vLLM's guidance backend compiles it, and bounded and
probed like any grammar (kvpool/runtime/model/grammar.py). xgrammar's newer form
(``{"type": "structural_tag", "format": ...}``) has no llguidance compiler, in vLLM either:
a 400 that says so.

NOTE(tag-probes): the compiled grammar is probed from its start, which is free text, so the
structures' schemas are never reached there. So each distinct schema is also compiled alone
(``GrammarSpec.json_schema``: a schema that cannot compile is a 400 naming its structure),
and the probes that schema would get as a ``json_schema`` (its patterns and referenced
definitions, at most ``MAX_PROBES`` for the whole tag) become the tag's probes: a pattern
over the grammar budget or a ``$ref`` loop inside a structure is a 400 before the request
runs, as it is in ``response_format: json_schema``, not a failed generation once a call
opens.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import llguidance

from kvpool.errors import RequestError
from kvpool.runtime.model.grammar import MAX_PROBES, GrammarSpec
from kvpool.server.json_body import decode_json_text

__all__ = ["MAX_STRUCTURES", "parse_structural_tag"]

_bad = RequestError.field  # errors.py: "param: message", with the param named
MAX_STRUCTURES = 256  # structures (and triggers) one request may name
MAX_TAG_CHARS = 1024  # characters of one begin, end or trigger


def parse_structural_tag(value: Any, param: str) -> GrammarSpec:
    """The grammar of a structural tag (its object, or the object's JSON text); 400s name
    ``param``."""
    if isinstance(value, str):
        value = decode_json_text(value, param, "a structural tag (an object or its JSON text)")
    if not isinstance(value, dict):
        raise _bad(param, "a structural tag must be an object with structures and triggers")
    if "format" in value:
        raise _bad(param, "the structural tag's 'format' form is not supported here: give "
                   "'structures' (begin, schema, end) and 'triggers'")
    extra = set(value) - {"type", "structures", "triggers"}
    if extra:
        raise _bad(param, f"unknown field {sorted(extra)[0][:40]!r} in the structural tag")
    triggers = _texts(value.get("triggers"), param, "triggers")
    structures = value.get("structures")
    if not isinstance(structures, list) or not 1 <= len(structures) <= MAX_STRUCTURES:
        raise _bad(param, f"structures must be a list of 1..{MAX_STRUCTURES} objects")
    tags = [_tag(s, i, triggers, param) for i, s in enumerate(structures)]
    probes = _schema_probes(structures, param)
    try:
        source = llguidance.StructTag.to_grammar(tags)
    except (ValueError, TypeError) as exc:
        raise _bad(param, f"invalid structural tag: {str(exc)[:200]}") from None
    try:
        spec = GrammarSpec.lark(source)
    except RequestError as exc:  # the compiler names response_format: name this field
        raise _bad(param, str(exc).removeprefix("response_format: ")) from None
    return dataclasses.replace(spec, probes=probes)


def _schema_probes(structures: list[dict], param: str) -> tuple[Any, ...]:
    """NOTE(tag-probes): each distinct schema compiled alone; the probes of them all."""
    probes: dict[str, Any] = {}  # canonical JSON -> probe (each probed once)
    seen: set[str] = set()
    for i, s in enumerate(structures):
        schema = s.get("schema")
        if not isinstance(schema, dict) or (key := json.dumps(schema, sort_keys=True)) in seen:
            continue
        seen.add(key)
        try:
            alone = GrammarSpec.json_schema(schema)
        except RequestError as exc:
            raise _bad(param, f"structures[{i}].schema: "
                       f"{str(exc).removeprefix('response_format: ')[:300]}") from None
        probes.update((json.dumps(p, sort_keys=True), p) for p in alone.probes)
    return tuple(probes.values())[:MAX_PROBES]


def _texts(value: Any, param: str, name: str) -> list[str]:
    if not isinstance(value, list) or not 1 <= len(value) <= MAX_STRUCTURES or not all(
            isinstance(t, str) and 0 < len(t) <= MAX_TAG_CHARS for t in value):
        raise _bad(param, f"{name} must be a list of 1..{MAX_STRUCTURES} non-empty strings of "
                   f"at most {MAX_TAG_CHARS} characters")
    return value


def _tag(s: Any, i: int, triggers: list[str], param: str) -> llguidance.StructTag:
    """Structure ``i`` as llguidance's StructTag, under the first trigger its begin starts
    with (vLLM's rule)."""
    where = f"structures[{i}]"
    if not isinstance(s, dict) or set(s) - {"begin", "schema", "end"}:
        raise _bad(param, f"{where} must be an object with begin, schema and end")
    begin, end, schema = s.get("begin"), s.get("end"), s.get("schema")
    if not isinstance(begin, str) or not isinstance(end, str) \
            or len(begin) > MAX_TAG_CHARS or len(end) > MAX_TAG_CHARS:
        raise _bad(param, f"{where}.begin and .end must be strings of at most "
                   f"{MAX_TAG_CHARS} characters")
    if schema is not None and schema is not True and not isinstance(schema, dict):
        raise _bad(param, f"{where}.schema must be a JSON schema object")
    trigger = next((t for t in triggers if begin.startswith(t)), None)
    if trigger is None:
        raise _bad(param, f"{where}.begin {json.dumps(begin)[:60]} starts with none of the "
                   "triggers")
    return llguidance.StructTag(trigger=trigger, begin=begin, end=end,
                                grammar={} if schema is None or schema is True else schema)
