"""The sampling-control fields of a request body -> SamplingParams keyword arguments.

``presence_penalty``, ``frequency_penalty`` (OpenAI), ``repetition_penalty``, ``min_p``,
``min_tokens`` (vLLM's extras) and ``logit_bias``. JSON types and token ids are checked here
(the tokenizer's vocabulary is known here); value ranges by :class:`SamplingParams` itself, so
both paths answer 400 naming the field.
"""

from __future__ import annotations

import json
from typing import Any

from kvpool.errors import RequestError

__all__ = ["MAX_LOGIT_BIAS_ENTRIES", "SAMPLING_FIELDS", "parse_sampling_controls"]

MAX_LOGIT_BIAS_ENTRIES = 1024  # one request may not build an unbounded per-step index
_NUMBERS = ("presence_penalty", "frequency_penalty", "repetition_penalty", "min_p")
SAMPLING_FIELDS = frozenset(_NUMBERS + ("min_tokens", "logit_bias"))


def _bad(param: str, message: str, code: str | None = None) -> RequestError:
    return RequestError(f"{param}: {message}", param=param, code=code)


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def parse_sampling_controls(body: dict[str, Any], vocab_size: int) -> dict[str, Any]:
    """Only the fields present (``null`` = not given); SamplingParams' defaults do the rest."""
    out: dict[str, Any] = {}
    for name in _NUMBERS:
        v = body.get(name)
        if v is None:
            continue
        if not _number(v):
            raise _bad(name, f"must be a number, got {json.dumps(v)[:50]}")
        out[name] = float(v)
    v = body.get("min_tokens")
    if v is not None:
        if not isinstance(v, int) or isinstance(v, bool):
            raise _bad("min_tokens", f"must be an integer, got {json.dumps(v)[:50]}")
        out["min_tokens"] = v
    bias = body.get("logit_bias")
    if bias is not None:
        out["logit_bias"] = _logit_bias(bias, vocab_size)
    return out


def _logit_bias(bias: Any, vocab_size: int) -> dict[int, float]:
    """OpenAI's shape: ``{"<token id>": bias}``, keys are decimal token-id strings."""
    if not isinstance(bias, dict):
        raise _bad("logit_bias", "must be an object mapping token ids to biases")
    if len(bias) > MAX_LOGIT_BIAS_ENTRIES:
        raise _bad("logit_bias", f"at most {MAX_LOGIT_BIAS_ENTRIES} entries, got {len(bias)}")
    out: dict[int, float] = {}
    for key, value in bias.items():
        if not (key.isascii() and key.isdigit()) or len(key) > 12:
            raise _bad("logit_bias", f"keys must be token ids (decimal strings), got "
                       f"{json.dumps(key)[:40]}")
        tid = int(key)
        if tid >= vocab_size:
            raise _bad("logit_bias", f"token id {tid} is outside the vocabulary "
                       f"[0, {vocab_size})", "invalid_token_id")
        if not _number(value):
            raise _bad("logit_bias", f"bias for token {tid} must be a number, got "
                       f"{json.dumps(value)[:40]}")
        out[tid] = float(value)
    return out
