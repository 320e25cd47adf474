"""Request-body fields: which ones each endpoint knows, and small typed reads of them.

``null`` means "not given" everywhere; a value of the wrong JSON type is a 400 naming the
field. Every int and float field is read as vLLM's pydantic models read one (json_body.json_int
/ json_float, NOTE(lax-int) and NOTE(lax-float)): ``true`` is 1, ``"3"`` and ``3.0`` are 3,
``"0.5"`` is 0.5; ``3.5`` or ``"abc"`` for an int is a 400 naming the field. Every bool field of
completions and chat (``opt(..., bool, ...)`` and the family modules alike) goes through
json_body.bool_field: what vLLM's models read as a bool (``"yes"``, ``1``, ``"off"``...) is
one (NOTE(lax-bool)); another value is a 400 naming the field.

Unknown fields are ignored, logged once and listed in ``X-Kvpool-Ignored-Fields`` (or a 400
with ``--reject-unknown-fields``: field_policy.py). Known OpenAI features this server does
not implement are rejected (``unsupported_parameter``) when set to anything but their default.
"""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import quote

from kvpool.errors import RequestError, shown
from kvpool.server.field_policy import IGNORED_FIELDS_HEADER, MAX_NAME_CHARS, is_int
from kvpool.server.json_body import bool_field, json_bool, json_float, json_int
from kvpool.server.sampling_fields import SAMPLING_FIELDS
from kvpool.server.vllm_fields import CHAT_EXTRAS, COMPLETION_EXTRAS

_bad = RequestError.field  # errors.py: "param: message", with the param named

__all__ = ["INT32", "KNOWN_CHAT", "KNOWN_COMPLETION", "KNOWN_DETOKENIZE", "KNOWN_TOKENIZE",
           "INT64", "MAX_CACHE_SALT_CHARS", "UNSUPPORTED_CHAT", "UNSUPPORTED_COMPLETION",
           "check_unsupported", "ignored_header", "is_number", "opt", "salt_and_priority",
           "seed_field", "stop_strings", "stream_options", "token_ids", "with_defaults"]

MAX_CACHE_SALT_CHARS = 128  # vLLM's _MAX_CACHE_SALT_LENGTH
INT32 = 1 << 31
INT64 = 1 << 63  # vLLM's seed and priority: -INT64 <= value < INT64
# NOTE(salt-rule): vLLM 0.33's validate_cache_salt (chat, completions, responses; messages
# through the chat request it builds), its words: a salt must be a non-empty string of at most
# 128 characters without '@', '/', '\' or NUL (checked "before they reach downstream cache
# backends"); a salt it refuses is the same 400 here, where any but NUL was taken before.
_SALT_FORBIDDEN = frozenset("@/\\\x00")
_SALT_EMPTY = "Parameter 'cache_salt' must be a non-empty string if provided."
_SALT_BAD = ("Parameter 'cache_salt' must be at most 128 characters and must not contain "
             "'@', '/', '\\\\', or NUL.")


def is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


_NAMES = {int: "an integer", float: "a number", str: "a string"}


def opt(body: dict[str, Any], name: str, kind: type, default: Any, *,
        param: str | None = None) -> Any:
    """An optional field of one JSON type; a bool, int or float read as vLLM reads one
    (NOTE(lax-bool), NOTE(lax-int), NOTE(lax-float))."""
    if kind is bool:
        return bool_field(body, name, default, param=param)
    value = body.get(name)
    if value is None:
        return default
    read = {int: json_int, float: json_float}.get(kind, lambda v: None)(value)
    if read is not None:
        return read
    if kind is not str or not isinstance(value, str):
        raise _bad(param or name, f"must be {_NAMES[kind]}, got {json.dumps(value)[:50]}")
    return value


def stream_options(options: Any, stream: bool) -> tuple[bool, bool]:
    """(include_usage, vLLM's continuous_usage_stats: usage in every chunk)."""
    if options is None:
        return False, False
    if not isinstance(options, dict):
        raise _bad("stream_options", "must be an object")
    if not stream and options:  # an empty object passes, as vLLM's check lets it
        raise _bad("stream_options", "is only allowed when stream is true")
    include = opt(options, "include_usage", bool, False, param="stream_options.include_usage")
    continuous = opt(options, "continuous_usage_stats", bool, False,
                     param="stream_options.continuous_usage_stats")
    return include, include and continuous


def stop_strings(stop: Any, max_stop: int) -> tuple[str, ...]:
    """``stop``: one non-empty string or a list of at most ``max_stop`` of them (vLLM's
    VLLM_MAX_STOP_STRINGS, 4 by default: --max-stop; a lone string is never counted)."""
    if stop is None:
        return ()
    items = [stop] if isinstance(stop, str) else stop
    if not isinstance(items, list) or not all(isinstance(s, str) and s for s in items):
        raise _bad("stop", "must be a non-empty string or a list of non-empty strings")
    if len(items) > max_stop:  # pydantic's words, as vLLM's 400 gives them
        raise _bad("stop", f"List should have at most {max_stop} items after validation, "
                   f"not {len(items)}")
    return tuple(items)


def seed_field(body: dict[str, Any]) -> int | None:
    """``seed``: a 64-bit signed integer or null, as vLLM's request models bound it."""
    seed = opt(body, "seed", int, None)
    if seed is not None and not -INT64 <= seed < INT64:
        raise _bad("seed", f"must be a 64-bit signed integer or null, got {shown(seed)}")
    return seed


def token_ids(value: Any, param: str, vocab_size: int, *, allow_none: bool = False,
              lax: bool = False) -> list[int]:
    """A list of token ids inside the vocabulary (``null`` is ``[]`` with ``allow_none``);
    with ``lax`` each id read as vLLM's ``list[int]`` field reads it (NOTE(lax-int))."""
    if value is None and allow_none:
        return []
    if lax and isinstance(value, list):
        value = [json_int(t) for t in value]
    if not isinstance(value, list) or not all(is_int(t) for t in value):
        raise _bad(param, "must be a list of integer token ids")
    bad = next((t for t in value if not 0 <= t < vocab_size), None)
    if bad is not None:
        raise _bad(param, f"token id {bad} is outside the vocabulary [0, {vocab_size})",
                   "invalid_token_id")
    return value


def with_defaults(body: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """``body`` with ``defaults`` (generation_config.py) filling fields left out or null; an
    object default (chat_template_kwargs) goes under the body's object, key by key, as vLLM
    merges its --default-chat-template-kwargs under a request's."""
    if not defaults:
        return body
    merged = dict(body)
    for name, value in defaults.items():
        if merged.get(name) is None:
            merged[name] = value
        elif isinstance(value, dict) and isinstance(merged[name], dict):
            merged[name] = {**value, **merged[name]}
    return merged


def salt_and_priority(body: dict[str, Any]) -> tuple[str | None, int]:
    """The client's cache salt (NOTE(salt-rule); NUL also marks the server's own salts,
    cache_namespace.py) and its priority (64-bit, vLLM's bound)."""
    salt = body.get("cache_salt")
    if salt is not None and (not isinstance(salt, str) or not salt):
        raise RequestError(_SALT_EMPTY, param="cache_salt")
    if salt is not None and (len(salt) > MAX_CACHE_SALT_CHARS
                             or not _SALT_FORBIDDEN.isdisjoint(salt)):
        raise RequestError(_SALT_BAD, param="cache_salt")
    priority = opt(body, "priority", int, 0)
    if not -INT64 <= priority < INT64:
        raise _bad("priority", f"must be a 64-bit signed integer, got {shown(priority)}")
    return salt, priority


MAX_HEADER_NAMES = 32  # names listed in one response header

# field -> (allowed default values) for OpenAI features this server does not implement; vLLM's
# use_beam_search too (README: beam search is not supported), read as vLLM reads a bool, and
# completions' prompt_embeds, which vLLM refuses unless started with --enable-prompt-embeds
# (an empty list it skips, so it is allowed)
UNSUPPORTED_COMPLETION = {"suffix": ("",), "use_beam_search": (False,), "prompt_embeds": ([],)}
# why, where vLLM's own answer says more than "not supported"
_UNSUPPORTED_WHY = {"prompt_embeds": "You must set `--enable-prompt-embeds` to input "
                    "`prompt_embeds` (vLLM's answer); this server has no such flag: prompt "
                    "embeddings are not supported"}
# NOTE(legacy-functions): chat's pre-tools ``functions`` / ``function_call`` are no fields of
# vLLM 0.33's ChatCompletionRequest: it serves them unheeded (older LangChain agents send
# them), so here they are unknown fields, ignored and listed, not refused
UNSUPPORTED_CHAT = {"use_beam_search": (False,)}
_COMMON = {"model", "n", "seed", "stop", "max_tokens", "temperature", "top_p", "top_k",
           "stream", "stream_options", "user", "cache_salt", "priority", "ignore_eos",
           "stop_token_ids", "logprobs", "prompt_logprobs", "logprob_token_ids"} \
    | SAMPLING_FIELDS
KNOWN_COMPLETION = frozenset(_COMMON | {"prompt", "best_of", "echo"} | COMPLETION_EXTRAS
                             | set(UNSUPPORTED_COMPLETION))
KNOWN_CHAT = frozenset(_COMMON | {"messages", "max_completion_tokens", "tools", "tool_choice",
                                  "top_logprobs", "parallel_tool_calls",
                                  "add_generation_prompt", "continue_final_message",
                                  "include_reasoning", "thinking_token_budget"}
                       | CHAT_EXTRAS | set(UNSUPPORTED_CHAT))
# vLLM's TokenizeChatRequest, and reasoning_effort, which chat hands the template (so /tokenize
# counts what chat's usage.prompt_tokens counts); chat's other fields (truncate_prompt_tokens,
# echo...) are unknown here: ignored unread, as vLLM ignores them
KNOWN_TOKENIZE = frozenset({"model", "prompt", "messages", "add_special_tokens",
                            "add_generation_prompt", "continue_final_message",
                            "return_token_strs", "chat_template", "chat_template_kwargs",
                            "tools", "reasoning_effort"})
KNOWN_DETOKENIZE = frozenset({"model", "tokens"})


def ignored_header(names: tuple[str, ...]) -> dict[str, str]:
    """The response header listing ignored fields (empty when none). Names are
    percent-encoded: a field name may hold any character, a header value may not."""
    if not names:
        return {}
    shown = [quote(n[:MAX_NAME_CHARS], safe="_-.") for n in names[:MAX_HEADER_NAMES]]
    if len(names) > MAX_HEADER_NAMES:
        shown.append(f"...{len(names) - MAX_HEADER_NAMES}-more")
    return {IGNORED_FIELDS_HEADER: ",".join(shown)}


def check_unsupported(body: dict[str, Any], fields: dict[str, tuple]) -> None:
    for name, defaults in fields.items():
        value = body.get(name)
        if defaults == (False,) and json_bool(value) is False:  # NOTE(lax-bool): "no", 0
            continue
        if value is not None and value not in defaults:
            raise _bad(name, _UNSUPPORTED_WHY.get(name, "is not supported by this server"),
                       "unsupported_parameter")
