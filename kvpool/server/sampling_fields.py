"""The sampling-control fields of a request body -> SamplingParams keyword arguments.

``presence_penalty``, ``frequency_penalty`` (OpenAI), ``repetition_penalty``, ``min_p``,
``min_tokens`` (vLLM's extras), ``logit_bias`` and ``response_format`` (structured output, in
OpenAI's shapes, compiled by kvpool/runtime/model/grammar.py; vLLM's guided_* spellings:
guided_fields.py). vLLM's ``allowed_token_ids``, ``bad_words`` (each word tokenized as vLLM
does: stripped, alone and after a space), ``include_stop_str_in_output``,
``skip_special_tokens`` and ``spaces_between_special_tokens`` (checked; ``tokenizers``
decoders never put spaces between special tokens, so vLLM's fast detokenizer and this one
read the same either way), and
``repetition_detection`` (an early stop on a loop: kvpool/runtime/model/repetition.py) and
``stream_interval`` (new tokens per streamed chunk, at least: output_processor.py
NOTE(interval)). JSON
types and token ids are checked here (against the model's vocabulary: NOTE(logits-size)); ranges
by :class:`SamplingParams` itself, so both paths answer 400 naming the field (logit_bias's
biases are clamped here instead, as vLLM clamps them: NOTE(bias-clamp)).
"""

from __future__ import annotations

import json
from typing import Any

from kvpool.errors import RequestError
from kvpool.runtime.model.grammar import GrammarSpec
from kvpool.runtime.model.repetition import RepeatStop
from kvpool.server.field_policy import FieldPolicy
from kvpool.server.guided_fields import (GUIDED_FIELDS, close_objects, format_over_guided,
                                         parse_guided, unheeded)
from kvpool.server.json_body import bool_field, json_float, json_int
from kvpool.server.structural_tag import parse_structural_tag

_bad = RequestError.field  # errors.py: "param: message", with the param named

__all__ = ["MAX_LOGIT_BIAS_ENTRIES", "SAMPLING_FIELDS", "parse_sampling_controls",
           "unheeded_keys"]

MAX_LOGIT_BIAS_ENTRIES = 1024  # one request may not build an unbounded per-step index
MAX_BAD_WORDS = 64
MAX_BAD_WORD_TOKENS = 64
_NUMBERS = ("presence_penalty", "frequency_penalty", "repetition_penalty", "min_p")
_FLAGS = ("include_stop_str_in_output", "skip_special_tokens", "spaces_between_special_tokens")
SAMPLING_FIELDS = frozenset(_NUMBERS + _FLAGS + ("min_tokens", "logit_bias", "response_format",
                                                 "allowed_token_ids", "bad_words",
                                                 "repetition_detection", "stream_interval")) \
    | GUIDED_FIELDS
# vLLM's ResponseFormat and JsonSchemaResponseFormat fields (NOTE(format-unheeded))
_FORMAT_KEYS = frozenset({"type", "json_schema"})
_SCHEMA_KEYS = frozenset({"name", "description", "schema", "strict"})
_TAG_KEYS = frozenset({"type", "structures", "triggers", "format"})
_KINDS = ("text", "json_object", "json_schema", "structural_tag")


def parse_sampling_controls(body: dict[str, Any], vocab_size: int,
                            tokenizer: Any = None) -> dict[str, Any]:
    """Only the fields present (``null`` = not given); SamplingParams' defaults do the rest.
    ``vocab_size``: the model's, the logits' width (NOTE(logits-size)); ``tokenizer`` encodes
    ``bad_words`` (without one, bad_words is refused)."""
    out: dict[str, Any] = _vllm_controls(body, vocab_size, tokenizer)
    for name in _NUMBERS:
        v = body.get(name)
        if v is None:
            continue
        if json_float(v) is None:  # NOTE(lax-float): "0.5", true too
            raise _bad(name, f"must be a number, got {json.dumps(v)[:50]}")
        out[name] = json_float(v)  # ranges: SamplingParams (NOTE(float32) there)
    v = body.get("min_tokens")
    if v is not None:
        if json_int(v) is None:  # NOTE(lax-int): "3", true too
            raise _bad("min_tokens", f"must be an integer, got {json.dumps(v)[:50]}")
        out["min_tokens"] = json_int(v)
    bias = body.get("logit_bias")
    if bias is not None:
        out["logit_bias"] = _logit_bias(bias, vocab_size)
    spec = parse_response_format(body.get("response_format"))
    # vLLM's spellings (guided_fields.py), read only when the body sends one
    guided = None if GUIDED_FIELDS.isdisjoint(body) else parse_guided(body)
    if spec is not None and guided is not None:  # NOTE(format-over) in guided_fields.py
        spec, guided = format_over_guided(body, spec), None
    if spec is not None or guided is not None:
        out["response_format"] = spec or guided
    return out


def parse_response_format(value: Any) -> GrammarSpec | None:
    """OpenAI's ``response_format``: ``{"type": "text"}`` (None), ``{"type": "json_object"}``
    or ``{"type": "json_schema", "json_schema": {"name", "description"?, "schema",
    "strict"?}}``, and vLLM's ``{"type": "structural_tag", ...}`` (structural_tag.py).
    Keys vLLM leaves unheeded are read past here and listed by :func:`unheeded_keys`
    (NOTE(format-unheeded)); another shape, or a schema the compiler rejects, is a 400 naming
    response_format. ``strict`` is accepted either way: the grammar always enforces the schema,
    its open objects closed as vLLM's default backend closes them (guided_fields.py
    NOTE(strict-schemas)).
    """
    p = "response_format"
    if value is None:
        return None
    if not isinstance(value, dict):
        raise _bad(p, "must be an object with a type (text, json_object or json_schema)")
    kind = value.get("type")
    if not isinstance(kind, str) or kind not in _KINDS:  # a list or object: unhashable
        raise _bad(p, f"type must be 'text', 'json_object', 'json_schema' or 'structural_tag', "
                   f"got {json.dumps(kind)[:50]}")
    if kind == "structural_tag":  # vLLM's (structural_tag.py): it hands every key to the tag
        extra = set(value) - _TAG_KEYS
        if extra:
            raise _bad(p, f"unknown field {sorted(extra)[0]!r} for type {kind!r}")
        return parse_structural_tag(value, p)
    js = value.get("json_schema")
    if kind != "json_schema":  # a json_schema beside text / json_object: read, then unheeded
        if js is not None:
            _schema_object(js, p, required=False)
        return None if kind == "text" else GrammarSpec.json_object()
    _schema_object(js, p, required=True)
    return GrammarSpec.json_schema(close_objects(js["schema"]), js["name"])


def _schema_object(js: Any, p: str, *, required: bool) -> None:
    """vLLM's JsonSchemaResponseFormat: a ``name`` of any string (NOTE(schema-name)), an
    optional string ``description`` and bool ``strict``, and the ``schema`` (``required``:
    vLLM's 400 "none [constraint] specified" without one; else an object or null)."""
    if not isinstance(js, dict):
        raise _bad(p, "json_schema must be an object with a name and a schema")
    # NOTE(schema-name): vLLM types name a plain str (no pattern, no length) and never reads
    # it; OpenAI's ^[a-zA-Z0-9_-]{1,64}$ refused what vLLM serves (LangChain names the format
    # after the schema's title, "Movie Review"). The body's string bound still holds
    if not isinstance(js.get("name"), str):
        raise _bad(p, "json_schema.name must be a string")
    if js.get("description") is not None and not isinstance(js["description"], str):
        raise _bad(p, "json_schema.description must be a string")
    bool_field(js, "strict", param=p)  # NOTE(lax-bool)
    schema = js.get("schema")
    if required and schema is None:  # vLLM: "none [constraint] specified", a 400
        raise _bad(p, "json_schema.schema is required: the JSON schema the output must follow")
    if not required and schema is not None and not isinstance(schema, dict):
        raise _bad(p, "json_schema.schema must be a JSON object")


def unheeded_keys(body: dict[str, Any], ignored: tuple[str, ...],
                  fields: FieldPolicy) -> tuple[dict[str, Any], tuple[str, ...]]:
    """``body`` and ``ignored`` with what vLLM 0.33 leaves unheeded inside
    ``structured_outputs`` (guided_fields.py NOTE(so-unheeded)) and ``response_format``
    added (the X-Kvpool-Ignored-Fields header).

    NOTE(format-unheeded): vLLM's ResponseFormat and JsonSchemaResponseFormat are pydantic
    models with extra="allow": a key they lack is logged and dropped, a 200. instructor's
    JSON_SCHEMA mode sends ``{"type": "json_object", "schema": ...}`` and vLLM runs it as
    json_object. So such a key is ``response_format.<key>`` (or
    ``response_format.json_schema.<key>``), through ``fields`` (field_policy.FieldPolicy:
    logged once, a 400 with --reject-unknown-fields). A ``json_schema`` beside text or
    json_object is a field of vLLM's model that it reads (checked) and never uses: listed,
    never a 400. structural_tag's keys all go to the tag, so it keeps its own 400. The parser
    calls it only for a body with one of the two: a plain request runs nothing of this module
    (tests/bench/test_request_path.py)."""
    if "structured_outputs" in body:
        body, ignored = unheeded(body, ignored, fields)
    fmt = body.get("response_format")
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    if kind not in ("text", "json_object", "json_schema"):
        return body, ignored
    ignored += fields.check(fmt, _FORMAT_KEYS, prefix="response_format.")
    js = fmt.get("json_schema")
    if kind == "json_schema" and isinstance(js, dict):
        ignored += fields.check(js, _SCHEMA_KEYS, prefix="response_format.json_schema.")
    elif kind != "json_schema" and js is not None:
        ignored += ("response_format.json_schema",)
    return body, ignored


def _vllm_controls(body: dict[str, Any], vocab_size: int, tokenizer: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in _FLAGS:
        v = bool_field(body, name)  # NOTE(lax-bool): "yes", 1 too
        if v is not None and name != "spaces_between_special_tokens":
            out[name] = v
    ids = body.get("allowed_token_ids")
    if ids is not None:  # each id read as vLLM's list[int] reads it (NOTE(lax-int))
        ids = [json_int(t) for t in ids] if isinstance(ids, list) else None
        if not ids or len(ids) > vocab_size or not all(
                t is not None and 0 <= t < vocab_size for t in ids):
            raise _bad("allowed_token_ids", f"must be a non-empty list of token ids in "
                       f"[0, {vocab_size})", "invalid_token_id")
        out["allowed_token_ids"] = tuple(sorted(set(ids)))
    words = body.get("bad_words")
    if words is not None:
        out["bad_words_ids"] = _bad_words(words, tokenizer)
    rep = body.get("repetition_detection")
    if rep is not None:
        out["repetition_detection"] = _repetition(rep)
    every = body.get("stream_interval")
    if every is not None:  # NOTE(lax-int); the range (>= 1): SamplingParams
        if json_int(every) is None:
            raise _bad("stream_interval", f"must be an integer, got {json.dumps(every)[:40]}")
        out["stream_interval"] = json_int(every)
    return out


def _repetition(value: Any) -> RepeatStop:
    """vLLM's RepetitionDetectionParams: an object of three integers, each read as pydantic
    reads an int (NOTE(lax-int)), a missing one 0; other keys are ignored, as pydantic ignores
    them. The ranges: RepeatStop (a 400 naming repetition_detection)."""
    p = "repetition_detection"
    if not isinstance(value, dict):
        raise _bad(p, "must be an object with max_pattern_size, min_pattern_size and min_count")
    fields: dict[str, int] = {}
    for name in ("max_pattern_size", "min_pattern_size", "min_count"):
        v = json_int(value.get(name, 0))
        if v is None:
            raise _bad(p, f"{name} must be an integer, got {json.dumps(value[name])[:40]}")
        fields[name] = v
    return RepeatStop(**fields)


def _bad_words(words: Any, tokenizer: Any) -> tuple[tuple[int, ...], ...]:
    """vLLM's rule: each word, stripped of its leading whitespace, as its own token ids and as
    the ids of " word" (a word inside a sentence usually carries its leading space), duplicates
    once (NOTE(bad-word-strip))."""
    if not isinstance(words, list) or len(words) > MAX_BAD_WORDS \
            or not all(isinstance(w, str) and w for w in words):
        raise _bad("bad_words", f"must be a list of at most {MAX_BAD_WORDS} non-empty strings")
    if tokenizer is None:
        raise _bad("bad_words", "needs the server's tokenizer")
    out: dict[tuple[int, ...], None] = {}
    for w in words:
        # NOTE(bad-word-strip): vLLM's update_from_tokenizer encodes prefix + word.lstrip()
        # for both prefixes ("" and " "), so " a" bans "a" as well as " a"; a word that is
        # nothing once stripped is vLLM's 400 ("must tokenize to at least one token")
        bare = w.lstrip()
        for spaced, text in ((False, bare), (True, " " + bare)):
            ids = tuple(tokenizer.encode_unlocked(text, add_special_tokens=False))
            if len(ids) > MAX_BAD_WORD_TOKENS:
                raise _bad("bad_words", f"a word may be at most {MAX_BAD_WORD_TOKENS} tokens")
            if not ids and not spaced:
                raise _bad("bad_words", f"{json.dumps(w)[:40]} must tokenize to at least one "
                           f"token once its leading whitespace is stripped")
            if ids:
                out[ids] = None
    return tuple(out)


def _logit_bias(bias: Any, vocab_size: int) -> dict[int, float]:
    """OpenAI's shape: ``{"<token id>": bias}``, each key read by Python's int(), each bias
    clamped to [-100, 100] (NOTE(bias-clamp))."""
    if not isinstance(bias, dict):
        raise _bad("logit_bias", "must be an object mapping token ids to biases")
    if len(bias) > MAX_LOGIT_BIAS_ENTRIES:
        raise _bad("logit_bias", f"at most {MAX_LOGIT_BIAS_ENTRIES} entries, got {len(bias)}")
    out: dict[int, float] = {}
    for key, value in bias.items():
        # NOTE(bias-clamp): vLLM's SamplingParams.from_optional reads each key with int()
        # (" 5", "+5" too) and clamps each bias with min(100.0, max(-100.0, bias)): {"id": -1000},
        # the usual "ban this token", is served there, so it must not be a 400 here. A key int()
        # refuses and an id outside the vocabulary stay 400s, as vLLM's.
        # NOTE(logits-size): vLLM checks logit_bias and allowed_token_ids ids against the
        # model's vocab_size (SamplingParams.verify: ModelConfig.get_vocab_size(), the logits'
        # width), not the tokenizer's: a model whose rows are padded past its tokenizer
        # (Qwen2.5: 151665 tokens, 151936 rows or more) takes a bias for an id in the gap
        try:
            tid = int(key)
        except (TypeError, ValueError):
            raise _bad("logit_bias", f"keys must be integer token ids, got "
                       f"{json.dumps(key)[:40]}") from None
        if not 0 <= tid < vocab_size:
            raise _bad("logit_bias", f"token id {str(tid)[:20]} is outside the model's vocabulary "
                       f"[0, {vocab_size})", "invalid_token_id")
        b = json_float(value)
        if b is None:  # NOTE(lax-float)
            raise _bad("logit_bias", f"bias for token {tid} must be a number, got "
                       f"{json.dumps(value)[:40]}")
        out[tid] = min(100.0, max(-100.0, b))
    return out
