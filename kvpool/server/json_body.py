"""A request body's bytes -> one JSON object, every failure a 400 with param None.

The body must be UTF-8 JSON (no NaN/Infinity), an object, nested at most ``max_json_depth``,
without lone UTF-16 surrogate escapes, and hold no more JSON values than a request that fits
the context can (NOTE(gil) in protocol.py: counted on the raw bytes, body_bound.py, before
``json.loads`` holds the GIL), nor a string longer than any string of a fitting request
(NOTE(string-bound) in protocol.py; refused before decoding too, naming its field).
"""

from __future__ import annotations

import json
import re
from typing import Any

from kvpool.errors import RequestError, context_length_error
from kvpool.server.body_bound import key_before, longest_string_over, structural_commas

__all__ = ["DEFAULT_MAX_BODY_BYTES", "MAX_JSON_DEPTH", "decode_json_body"]

# the server's and the router's default body bounds (the router passes bodies on unchanged)
DEFAULT_MAX_BODY_BYTES = 4 * 1024 * 1024  # token-id prompts of a 128k context fit easily
MAX_JSON_DEPTH = 32

_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_STRING_FIELDS = frozenset({"prompt", "messages", "stop", "user"})  # named in a too-long 400


def _bad(message: str, code: str) -> RequestError:
    return RequestError(message, param=None, code=code)


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def decode_json_body(raw: bytes, *, max_json_depth: int, max_body_commas: int,
                     max_model_len: int, max_string_bytes: int | None = None) -> dict[str, Any]:
    commas = structural_commas(raw, max_body_commas)
    if commas > max_body_commas:
        raise context_length_error(max_model_len, f"the request body holds {commas + 1} or "
                                   "more JSON values, more than a request that fits can hold")
    if max_string_bytes is not None:
        found = longest_string_over(raw, max_string_bytes)
        if found is not None:  # before decoding, too (NOTE(string-bound))
            key = key_before(raw, found[0])
            param = "messages" if key == "content" else key if key in _STRING_FIELDS else None
            raise context_length_error(max_model_len, f"the request body holds a string of "
                                       f"{found[1]} bytes, more characters than that many "
                                       "tokens can hold, which leaves no room to generate",
                                       param)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _bad(f"request body is not valid UTF-8 (byte {exc.start})",
                   "invalid_encoding") from None
    try:
        body = json.loads(text, parse_constant=_reject_constant)
    except RecursionError:
        raise _bad("request body is nested too deeply", "invalid_json") from None
    except ValueError as exc:
        raise _bad(f"request body is not valid JSON: {exc}", "invalid_json") from None
    if not isinstance(body, dict):
        raise _bad(f"request body must be a JSON object, got {type(body).__name__}",
                   "invalid_json")
    # NOTE(fast-path): walking a 1M-id prompt costs ~0.2 s of event loop; the raw text says
    # whether the walk can find anything (few brackets; no \uD8xx-\uDFxx escape).
    # (counted on the bytes: ~5x faster than on the str, and all of it holds the GIL)
    if raw.count(b"{") + raw.count(b"[") > max_json_depth or _SURROGATE_ESCAPE.search(text):
        _check_structure(body, max_json_depth)
    return body


def _check_structure(body: Any, max_json_depth: int) -> None:
    """Depth bound, and no lone UTF-16 surrogates (``"\\ud800"`` is valid JSON but not text any
    tokenizer or hash can encode)."""
    stack = [(body, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > max_json_depth:
            raise _bad(f"request body is nested deeper than {max_json_depth}", "invalid_json")
        items = list(node.items()) if isinstance(node, dict) else enumerate(node)
        for key, child in items:
            for text in (key, child):
                if isinstance(text, str) and not text.isascii():
                    try:
                        text.encode("utf-8")
                    except UnicodeEncodeError:
                        raise _bad("request body holds a lone UTF-16 surrogate escape (e.g. "
                                   "\\ud800)", "invalid_encoding") from None
            if isinstance(child, (dict, list)):
                stack.append((child, depth + 1))
