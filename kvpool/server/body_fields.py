"""Small, typed reads of request-body fields shared by the request parser.

``null`` means "not given" everywhere; a value of the wrong JSON type is a 400 naming the
field (bool is never an int; an int is a number).
"""

from __future__ import annotations

import json
from typing import Any

from kvpool.errors import RequestError

MAX_CACHE_SALT_CHARS = 1024
INT32 = 1 << 31

__all__ = ["INT32", "MAX_CACHE_SALT_CHARS", "is_int", "is_number", "opt", "salt_and_priority",
           "stream_options", "with_defaults"]


def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


_CHECKS = {bool: lambda v: isinstance(v, bool), int: is_int, float: is_number,
           str: lambda v: isinstance(v, str)}
_NAMES = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}


def _bad(param: str, message: str) -> RequestError:
    return RequestError(f"{param}: {message}", param=param)


def opt(body: dict[str, Any], name: str, kind: type, default: Any, *,
        param: str | None = None) -> Any:
    """An optional field of one JSON type."""
    value = body.get(name)
    if value is None:
        return default
    if not _CHECKS[kind](value):
        raise _bad(param or name, f"must be {_NAMES[kind]}, got {json.dumps(value)[:50]}")
    return value


def stream_options(options: Any, stream: bool) -> tuple[bool, bool]:
    """(include_usage, vLLM's continuous_usage_stats: usage in every chunk)."""
    if options is None:
        return False, False
    if not isinstance(options, dict):
        raise _bad("stream_options", "must be an object")
    if not stream:
        raise _bad("stream_options", "is only allowed when stream is true")
    include = opt(options, "include_usage", bool, False, param="stream_options.include_usage")
    continuous = opt(options, "continuous_usage_stats", bool, False,
                     param="stream_options.continuous_usage_stats")
    return include, include and continuous


def with_defaults(body: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """``body`` with ``defaults`` (generation_config.py) filling fields left out or null."""
    if not defaults:
        return body
    merged = dict(body)
    for name, value in defaults.items():
        if merged.get(name) is None:
            merged[name] = value
    return merged


def salt_and_priority(body: dict[str, Any]) -> tuple[str | None, int]:
    """The client's cache salt (NUL-free, bounded) and its priority (32-bit)."""
    salt = opt(body, "cache_salt", str, None)
    # NUL marks the server's own salts (cache_namespace.py): no client salt spells one
    if salt is not None and (not 0 < len(salt) <= MAX_CACHE_SALT_CHARS or "\x00" in salt):
        raise _bad("cache_salt", f"must be 1..{MAX_CACHE_SALT_CHARS} characters, none of "
                   "them NUL")
    priority = opt(body, "priority", int, 0)
    if not -INT32 <= priority < INT32:
        raise _bad("priority", "must fit in a 32-bit signed integer")
    return salt, priority
