"""vLLM's structured-output spellings -> the same GrammarSpec ``response_format`` compiles to.

::

    guided_json: SCHEMA (object or JSON text)   structured_outputs: {"json": SCHEMA}
    guided_regex: "REGEX"                        structured_outputs: {"regex": "REGEX"}
    guided_choice: ["a", "b"]                    structured_outputs: {"choice": [...]}
    guided_grammar: "LARK" or "GBNF"             structured_outputs: {"grammar": ...}
                                                 structured_outputs: {"json_object": true}
                                                 structured_outputs: {"structural_tag": TAG}
                                                 (structural_tag.py)

One constraint per request: two of these, or one beside a ``response_format`` other than
``text``, is a 400 (vLLM refuses it too). Grammars are llguidance's Lark dialect (a ``start``
rule) or GBNF (``root ::= ...``, converted: grammar.py NOTE(gbnf)); every kind compiles and is probed under the same budget as a JSON schema
(kvpool/runtime/model/grammar_compile.py, NOTE(budget)).
"""

from __future__ import annotations

from typing import Any

from kvpool.errors import RequestError
from kvpool.runtime.model.grammar import GrammarSpec
from kvpool.server.json_body import decode_json_text
from kvpool.server.structural_tag import parse_structural_tag

_bad = RequestError.field  # errors.py: "param: message", with the param named

__all__ = ["GUIDED_FIELDS", "MAX_CHOICES", "parse_guided"]

GUIDED_FIELDS = frozenset({"guided_json", "guided_regex", "guided_choice", "guided_grammar",
                           "structured_outputs"})
MAX_CHOICES = 1024
_OUTPUT_KEYS = {"json": "guided_json", "regex": "guided_regex", "choice": "guided_choice",
                "grammar": "guided_grammar", "json_object": "json_object",
                "structural_tag": "structural_tag"}


def parse_guided(body: dict[str, Any]) -> GrammarSpec | None:
    """The one guided constraint of ``body`` (None: none given); 400s name the field."""
    given = [(k, body[k]) for k in sorted(GUIDED_FIELDS) if body.get(k) is not None]
    so = body.get("structured_outputs")
    if so is not None:
        if not isinstance(so, dict):
            raise _bad("structured_outputs", "must be an object (json, regex, choice, grammar, "
                       "json_object or structural_tag)")
        unknown = sorted(set(so) - set(_OUTPUT_KEYS))
        if unknown:
            raise _bad("structured_outputs", f"unknown key {unknown[0][:40]!r}")
        given = [(k, v) for k, v in given if k != "structured_outputs"]
        given += [(f"structured_outputs.{k}", v) for k, v in so.items()
                  if v is not None and v is not False]
    if not given:
        return None
    if len(given) > 1:
        raise _bad(given[1][0], f"only one structured-output constraint per request "
                   f"({given[0][0]} is given too)")
    param, value = given[0]
    try:
        return _spec(param.rpartition(".")[2], value, param)
    except RequestError as exc:  # the compiler names response_format: name this field
        message = str(exc).removeprefix("response_format: ").removeprefix(f"{param}: ")
        raise _bad(param, message) from None


def _spec(key: str, value: Any, param: str) -> GrammarSpec:
    if key in ("guided_json", "json"):
        if isinstance(value, str):
            value = decode_json_text(value, param, "a JSON schema (an object or its JSON text)")
        return GrammarSpec.json_schema(value)
    if key == "json_object":
        return GrammarSpec.json_object()
    if key == "structural_tag":
        return parse_structural_tag(value, param)
    if key in ("guided_choice", "choice"):
        if not isinstance(value, list) or not value or len(value) > MAX_CHOICES \
                or not all(isinstance(c, str) and c for c in value):
            raise _bad(param, f"must be a list of 1..{MAX_CHOICES} non-empty strings")
        return GrammarSpec.choice(value)
    if not isinstance(value, str) or not value:
        raise _bad(param, "must be a non-empty string")
    if key in ("guided_regex", "regex"):
        return GrammarSpec.regex(value)
    return GrammarSpec.lark(value)
