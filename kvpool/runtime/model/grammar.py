"""Structured output: ``response_format`` json_object / json_schema through llguidance.

A schema becomes a GrammarSpec here (parse time), a probed matcher in grammar_compile.py (a
worker thread), one matcher per sequence in grammar_matchers.py (the step thread). One token
mask per step, batched::

    engine step            GrammarMatchers                      Sampler
    ---------------------  -----------------------------------  --------------------------------
    rows [r0 r1 r2 r3]     token_mask(seq_ids) -> TokenMask     logits[rows] masked to -inf
      r1, r3 have a          rows  = [1, 3]                     where the bit is 0 (rows 0, 2
      grammar                bits  = int32 [2, ceil(V/32)]      untouched); then sampling as
                             (one LLExecutor call, parallel)    usual
    sampled [t0..t3]       advance(seq_ids, tokens) -> [seq ids whose grammar is complete]

No grammar in the batch means ``token_mask`` returns None before any per-row work.

Why llguidance (xgrammar and outlines-core were measured beside it; README, Structured output):
no Python dependencies (one abi3 wheel of ~8 MB; xgrammar requires triton, transformers and
apache-tvm-ffi), JSON-schema compile in about a millisecond even for a 150k vocabulary
(outlines-core builds a vocabulary-wide index per schema: 0.1-0.9 s at 150k, on the request path),
and a per-step mask computed lazily over a token trie with no large cache-miss spikes.

Vocabulary: llguidance reads the ``tokenizers`` JSON itself (the way its own ``hf`` helper does),
so byte-level BPE (the built-in tokenizer and HF tokenizer.json BPE) and SentencePiece
byte-fallback tokens map to the bytes they decode to. NOTE(0xff): llguidance marks special
tokens with a leading 0xff byte, so the lone byte token 0xff (never part of valid UTF-8, so never
allowed by a JSON grammar) is not usable under a grammar.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import llguidance
import torch
from llguidance.gbnf_to_lark import gbnf_to_lark

from kvpool.errors import RequestError

from .grammar_forcing import long_literal
from .grammar_fuel import ENUM_FUEL_PER_CHAR, FUEL_REFUSAL, value_chars, without_values
from .grammar_relax import WIDE_BOUND, bounded, drop_wide_bounds, relax_lookaround

__all__ = ["LIMITS", "OPTIONS", "PARAM", "GrammarSpec", "TokenMask", "apply_token_mask",
           "map_subschemas", "unpack_bitmask"]

PARAM = "response_format"
# NOTE(budget) in grammar_compile.py (a schema's enums may get more initial lexer fuel:
# grammar_fuel.py NOTE(enum-fuel)); llguidance's defaults: 1M, 200k, 50k, 250k. The Earley
# row stays at llguidance's 2,000 items: a choice of 1,999 entries needs it (NOTE(choice-cap)),
# and a tighter row would not bound an ambiguous grammar's cost (NOTE(consume-budget))
LIMITS = dict(initial_lexer_fuel=200_000, step_lexer_fuel=100_000, step_max_items=20_000,
              max_lexer_states=50_000, max_items_in_row=2_000)
# NOTE(schema-cap): a JSON schema may be 1 MiB, a regex / grammar / choice 64 KiB: one request
# may not hand the compiler an unbounded source. The forced schema of tool_choice "required" is
# the union of every tool's (~830 characters a realistic tool): 64 KiB refused ~80 tools, where
# vLLM has no cap. Measured (README, Structured output): 1 MiB (~1,200 such tools) converts and
# validates in ~0.4 s on the parse pool, then compiles and probes in ~0.5 s on the compile
# worker; 256 KB in ~0.1 + ~0.15 s, 80 KB in ~30 + ~30 ms. Never on the event loop.
MAX_SCHEMA_CHARS = 1024 * 1024
# NOTE(schema-nesting): vLLM 0.33 refuses a JSON schema whose objects and arrays nest past 64
# levels (its MAX_STRUCTURED_OUTPUT_JSON_NESTING, checked on the schema it compiles: a forced
# call's array of calls too), as OpenAI allows 10; served here (up to the body's depth bound),
# where a vLLM client got a 400
MAX_SCHEMA_NESTING = 64
MAX_GRAMMAR_CHARS = 64 * 1024
MAX_PROBES = 64  # sub-schemas probed per request; past that the per-step budget still holds
# NOTE(whitespace): compact JSON (no whitespace between tokens). With flexible whitespace a
# sampled model can emit blanks forever and never close the object before max_tokens; json.loads
# accepts compact JSON just the same. NOTE(one-of): ``oneOf`` is compiled as ``anyOf``, as vLLM's
# default backend (xgrammar) compiles it: llguidance refuses a oneOf whose branches it cannot
# prove disjoint (two object shapes, {path} | {url}) unless told to approximate. Every other
# keyword llguidance lacks stays a 400 (its ``lenient`` option stays off) unless the server
# drops it first, as vLLM's xgrammar ignores it (server/xgrammar_reach.py
# NOTE(xgrammar-ignores): ``uniqueItems`` on an array stays one, as in vLLM).
OPTIONS = {"whitespace_flexible": False, "coerce_one_of": True}


# NOTE(formats): json-pointer exactly as RFC 6901 section 3 writes it; relative-json-pointer as
# draft-bhutton-relative-json-pointer-00 section 3 (the one JSON Schema 2020-12 cites, with its
# index manipulation); a URI reference or template permissively: any text without whitespace
# or control characters (RFC 3986 and RFC 6570 allow none of those)
_POINTER = r"(/([^/~]|~[01])*)*"
_NON_NEGATIVE = r"(0|[1-9][0-9]*)"
_URI = r"^[^\s\x00-\x1F\x7F-\x9F]*$"
_FORMAT_PATTERNS = {
    "json-pointer": f"^{_POINTER}$",
    "relative-json-pointer": f"^{_NON_NEGATIVE}([+-]{_NON_NEGATIVE})?(#|{_POINTER})$",
    "uri-reference": _URI, "uri-template": _URI}
# keywords whose values are JSON values or names, not schemas; those whose value maps names to
# schemas
_VALUES = frozenset({"const", "enum", "default", "examples", "required", "dependentRequired"})
_MAPS = frozenset({"properties", "patternProperties", "$defs", "definitions",
                   "dependentSchemas", "dependencies"})


def _bad(message: str) -> RequestError:
    return RequestError(f"{PARAM}: {message}", param=PARAM)


def _gbnf_to_lark(source: str) -> str:
    """NOTE(gbnf): the Lark of a GBNF grammar; one the converter cannot read is a 400."""
    try:
        return gbnf_to_lark(source)
    except Exception as e:  # noqa: BLE001 (it raises bare Exception and RecursionError too)
        raise _bad(f"invalid grammar: neither Lark nor GBNF ({str(e)[:200]})") from None


@dataclass(frozen=True, slots=True)
class GrammarSpec:
    """A validated grammar request: what ``response_format`` asked for, compiled once.

    ``grammar`` is llguidance's grammar JSON (what each sequence's matcher is built from).
    """

    kind: str  # "json_object" | "json_schema" | "regex" | "grammar" | "choice"
    schema: str  # compact JSON text of the schema, its key order kept (json_object:
    # {"type": "object"}), or the regex / Lark source
    name: str | None = None  # json_schema.name (echoed nowhere; kept for logs)
    grammar: str = field(default="", compare=False, repr=False)  # compiled, from the schema
    # what is probed alone before the request runs (grammar_compile.py, NOTE(budget)): every
    # regex of the schema (``pattern`` values, ``patternProperties`` keys) and every local
    # definition it references, each as a schema of its own
    probes: tuple[Any, ...] = field(default=(), compare=False, repr=False)
    # the probed llguidance matcher (GrammarCompiler.compile); its sequences get deep copies
    compiled: Any = field(default=None, compare=False, repr=False)
    # the request field it came from, which the compiler's 400s name (guided_regex, tools, ...)
    param: str = field(default=PARAM, compare=False)
    # NOTE(think-grammar): a token the grammar waits for (a reasoning model's end of thinking,
    # server/reasoning.py): the tokens up to it are free, the matcher reads those after it
    after: int | None = field(default=None, compare=False)
    # NOTE(enum-fuel): the initial lexer fuel the grammar is built under (LIMITS' unless its
    # enums were granted more), and then the schema without its enum values, probed alone
    lexer_fuel: int = field(default=LIMITS["initial_lexer_fuel"], compare=False)
    rest: Any = field(default=None, compare=False, repr=False)

    @classmethod
    def json_object(cls) -> "GrammarSpec":
        return cls.json_schema({"type": "object"}, kind="json_object")

    @classmethod
    def json_schema(cls, schema: Any, name: str | None = None, *,
                    kind: str = "json_schema") -> "GrammarSpec":
        """Compile ``schema`` (a dict or bool); an invalid one raises RequestError naming
        response_format (HTTP 400)."""
        if not isinstance(schema, (dict, bool)):
            raise _bad("json_schema.schema must be a JSON object")
        if _nests_past(schema, MAX_SCHEMA_NESTING):  # NOTE(schema-nesting)
            raise _bad(f"the JSON schema is nested too deeply: objects and arrays may nest at "
                       f"most {MAX_SCHEMA_NESTING} levels")
        # not sort_keys: an object's properties are generated in the order the schema lists
        # them, as vLLM's backends generate them (a "reasoning" field before its "answer")
        for pattern in _patterns(schema):
            _check_escapes(pattern, "JSON schema")
        text = json.dumps(schema, separators=(",", ":"))
        if (literal := long_literal(schema, text)) is not None:  # NOTE(literal-bound)
            raise _bad(literal)
        compiled = _rewritten(schema, text)
        build = functools.partial(_json_grammar, text if compiled is schema
                                  else json.dumps(compiled, separators=(",", ":")))
        return cls._checked(kind, text, build, what="JSON schema", name=name,
                            probes=_probes(compiled), limit=MAX_SCHEMA_CHARS, values=compiled)

    @classmethod
    def regex(cls, pattern: str) -> "GrammarSpec":
        """Output matching ``pattern`` (llguidance's regex syntax, anchored at both ends)."""
        _check_escapes(pattern, "regex")
        return cls._checked("regex", pattern, llguidance.LLMatcher.grammar_from_regex)

    @classmethod
    def lark(cls, source: str) -> "GrammarSpec":
        """Output in the language of a Lark grammar (llguidance's dialect, ``start`` rule) or,
        NOTE(gbnf), of a GBNF one (llama.cpp's ``root ::= ...``, what vLLM's default backend
        takes): a text that is not valid Lark but holds ``::=`` is converted by llguidance's
        gbnf_to_lark, as vLLM's guidance backend converts it."""
        try:
            return cls._checked("grammar", source, llguidance.LLMatcher.grammar_from_lark)
        except RequestError:
            if "::=" not in source or len(source) > MAX_GRAMMAR_CHARS:
                raise
        return cls._checked("grammar", _gbnf_to_lark(source),
                            llguidance.LLMatcher.grammar_from_lark, what="GBNF grammar")

    @classmethod
    def choice(cls, options: list[str]) -> "GrammarSpec":
        """Output exactly one of ``options`` (each a Lark string literal: JSON escapes)."""
        rule = " | ".join(json.dumps(o, ensure_ascii=False) for o in options)
        return cls._checked("choice", f"start: {rule}\n", llguidance.LLMatcher.grammar_from_lark)

    @classmethod
    def _checked(cls, kind: str, source: str, build: Any, *, what: str | None = None,
                 name: str | None = None, probes: tuple[Any, ...] = (),
                 limit: int = MAX_GRAMMAR_CHARS, values: Any = None) -> "GrammarSpec":
        """Bound, build and validate ``source`` under LIMITS (400s naming response_format);
        ``values``: the JSON schema whose enum values may be granted fuel (NOTE(enum-fuel))."""
        what = what or kind
        if len(source) > limit:
            raise _bad(f"the {what} is {len(source)} characters; at most {limit}")
        try:
            grammar = build(source)
        except ValueError as e:
            raise _bad(f"invalid {what}: {_explained(str(e))}") from None
        fuel, rest = LIMITS["initial_lexer_fuel"], None
        err = _validate(grammar, fuel)
        if err and FUEL_REFUSAL in err and values is not None and len(probes) < MAX_PROBES:
            fuel += ENUM_FUEL_PER_CHAR * value_chars(values)  # NOTE(enum-fuel)
            err, rest = _validate(grammar, fuel), map_subschemas(values, without_values)
        if err:
            raise _bad(f"invalid {what}: {_explained(err)}")
        return cls(kind, source, name, grammar, probes, lexer_fuel=fuel, rest=rest)


def _validate(grammar: str, fuel: int) -> str:
    """llguidance's objection to ``grammar`` under LIMITS with ``fuel`` (empty: none)."""
    return llguidance.LLMatcher.validate_grammar(grammar, limits=llguidance.LLParserLimits(
        **{**LIMITS, "initial_lexer_fuel": fuel}))


def _explained(err: str) -> str:
    """NOTE(schema-depth): llguidance reads a grammar nested at most 127 levels (its JSON
    parser's bound; the schema sits 3 levels down in it), tighter than a request body's 128
    (kvpool/server/json_body.py NOTE(json-depth)): a schema about 61 objects deep passes the
    body and compiles alone, but ``tool_choice`` required nests every tool's schema 4-6
    levels down. Its "recursion limit exceeded" says which bound it met."""
    if "recursion limit exceeded" in err:
        return f"nested deeper than the compiler reads (127 levels, grammar included): {err}"
    return err


def _json_grammar(source: str, _client_text: str) -> str:
    """llguidance's grammar of the schema text ``source`` (``_client_text``, what _checked
    bounds, is the schema as sent: NOTE(formats) may have rewritten it)."""
    return llguidance.LLMatcher.grammar_from_json_schema(source, defaults=OPTIONS)


def _rewritten(schema: Any, text: str) -> Any:
    """The schema llguidance compiles: ``schema`` (its compact JSON ``text``) with NOTE(formats)
    and grammar_relax.py's NOTE(look-around) and NOTE(int64-bounds) applied to each schema
    object, when the text holds what they rewrite (else ``schema`` itself, uncopied). One over
    MAX_SCHEMA_CHARS is left as sent, for _checked to refuse before any work."""
    if len(text) > MAX_SCHEMA_CHARS:
        return schema
    steps = [step for step, needed in (
        (_format_pattern, '"format"' in text),
        (functools.partial(relax_lookaround, compiles=bounded(_pattern_compiles)), "(?" in text),
        (drop_wide_bounds, WIDE_BOUND.search(text) is not None)) if needed]
    if not steps:
        return schema
    return map_subschemas(schema, lambda node: functools.reduce(lambda n, f: f(n), steps, node))


def _pattern_compiles(pattern: str) -> bool:
    """Whether llguidance takes ``pattern`` as a JSON-schema ``pattern`` (under LIMITS)."""
    source = json.dumps({"type": "string", "pattern": pattern})
    try:
        grammar = llguidance.LLMatcher.grammar_from_json_schema(source, defaults=OPTIONS)
    except ValueError:
        return False
    return not llguidance.LLMatcher.validate_grammar(
        grammar, limits=llguidance.LLParserLimits(**LIMITS))


def map_subschemas(schema: Any, node: Callable[[dict], dict]) -> Any:
    """A copy of ``schema`` with ``node`` applied to each of its schema objects, children
    first. Only schema positions: values (``const``, ``enum``, ``default``, ``examples``,
    ``required``, ``dependentRequired``) stay as sent, and the keys of a ``properties``-like
    map are names (a property named ``format`` or ``default`` is not that keyword)."""
    if isinstance(schema, list):
        return [map_subschemas(v, node) for v in schema]
    if not isinstance(schema, dict):
        return schema
    return node({k: v if k in _VALUES else _map_named(v, node) if k in _MAPS
                 else map_subschemas(v, node) for k, v in schema.items()})


def _map_named(value: Any, node: Callable[[dict], dict]) -> Any:
    """A ``properties``-like map: each value a schema, each key a name."""
    if not isinstance(value, dict):
        return map_subschemas(value, node)
    return {k: map_subschemas(v, node) for k, v in value.items()}


def _format_pattern(schema: dict) -> dict:
    """NOTE(formats): a string format llguidance lacks but vLLM's default backend (xgrammar)
    takes becomes a ``pattern`` (``_FORMAT_PATTERNS``); beside a ``pattern`` of the schema's
    own it joins it through ``allOf`` (both must hold). Any other unknown format stays
    llguidance's 400."""
    fmt = schema.get("format")
    pattern = _FORMAT_PATTERNS.get(fmt) if isinstance(fmt, str) else None
    if pattern is None or not isinstance(schema.get("allOf", []), list):
        return schema
    out = {k: v for k, v in schema.items() if k != "format"}
    if "pattern" not in out:
        return {**out, "pattern": pattern}
    return {**out, "allOf": [*out.get("allOf", []), {"pattern": pattern}]}


def _check_escapes(pattern: str, what: str) -> None:
    """NOTE(trailing-backslash): llguidance (1.9; its regex-to-Lark step and JSON-schema
    ``pattern``) drops an unpaired trailing backslash instead of refusing it: ``\\`` became the
    empty regex and ``a\\`` the regex ``a``, so an invalid regex got a 200 whose text matched
    another one. Rust's regex syntax, which llguidance parses every other regex with, calls it
    an incomplete escape sequence; so is it here, before llguidance sees it."""
    if (len(pattern) - len(pattern.rstrip("\\"))) % 2:
        raise _bad(f"invalid {what}: regex parse error: incomplete escape sequence (a trailing "
                   f"backslash) in {pattern[-60:]!r}")


def _probes(schema: Any) -> tuple[Any, ...]:
    """Sub-schemas to probe alone: each pattern as a string schema, each ``#/$defs/x`` or
    ``#/definitions/x`` reference as that definition (with the root's definitions)."""
    if not isinstance(schema, dict):
        return ()
    out = [{"type": "string", "pattern": p} for p in dict.fromkeys(_patterns(schema))]
    defs = {k: schema[k] for k in ("$defs", "definitions") if isinstance(schema.get(k), dict)}
    for ref in dict.fromkeys(_refs(schema)):
        where, _, key = ref.removeprefix("#/").partition("/")
        if where in defs and key in defs[where] and "/" not in key:
            out.append({"$ref": ref, **defs})
    return tuple(out[:MAX_PROBES])


def _nodes(schema: Any) -> Iterator[dict]:
    """Every object of a schema, parents before children (the body's own depth bound keeps
    this recursion short)."""
    if isinstance(schema, list):
        for v in schema:
            yield from _nodes(v)
    elif isinstance(schema, dict):
        yield schema
        for v in schema.values():
            yield from _nodes(v)


def _refs(schema: Any) -> Iterator[str]:
    return (n["$ref"] for n in _nodes(schema) if isinstance(n.get("$ref"), str))


def _nests_past(value: Any, levels: int) -> bool:
    """Whether objects and arrays nest in ``value`` more than ``levels`` deep below it
    (NOTE(schema-nesting)): one level of containers at a time, no recursion."""
    level = [value] if isinstance(value, (dict, list)) else []
    for _ in range(levels):
        level = [child for node in level
                 for child in (node.values() if isinstance(node, dict) else node)
                 if isinstance(child, (dict, list))]
        if not level:
            return False
    return True


def _patterns(schema: Any) -> Iterator[str]:
    """The regexes of a schema: ``pattern`` strings and ``patternProperties`` keys, anywhere."""
    for n in _nodes(schema):
        if isinstance(n.get("pattern"), str):
            yield n["pattern"]
        if isinstance(n.get("patternProperties"), dict):
            yield from n["patternProperties"]


@dataclass(frozen=True, slots=True)
class TokenMask:
    """Allowed tokens for some rows of a logits batch (the rest are unconstrained)."""

    rows: torch.Tensor  # int64 [k]: logits rows that have a grammar
    bits: torch.Tensor  # int32 [k, ceil(vocab / 32)]: bit j of word w allows token 32 * w + j


_SHIFTS = torch.arange(32, dtype=torch.int32)


def unpack_bitmask(bits: torch.Tensor, vocab: int) -> torch.Tensor:
    """``bool [k, vocab]`` from an int32 bitmask ``[k, words]`` (little-endian bits)."""
    unpacked = (bits[:, :, None] >> _SHIFTS.to(bits.device)) & 1
    return unpacked.reshape(bits.shape[0], -1)[:, :vocab].bool()


def apply_token_mask(logits: torch.Tensor, mask: TokenMask,
                     fallback: torch.Tensor | None = None) -> torch.Tensor:
    """Set disallowed logits of the masked rows to -inf, in place; returns ``logits``.

    ``fallback`` (the logits before bias/penalties/min_tokens) is used for a row whose every
    allowed token those adjustments had set to -inf (min_tokens masking EOS where the grammar
    allows only EOS): the grammar wins, so the row never samples a forbidden token.
    """
    rows = mask.rows.to(logits.device)
    allowed = unpack_bitmask(mask.bits.to(logits.device), logits.shape[-1])
    sub = logits[rows].masked_fill_(~allowed, float("-inf"))
    if fallback is not None:
        dead = torch.isneginf(sub).all(dim=-1)
        if bool(dead.any()):
            alt = fallback[rows].masked_fill_(~allowed, float("-inf"))
            sub = torch.where(dead[:, None], alt, sub)
    logits[rows] = sub
    return logits
