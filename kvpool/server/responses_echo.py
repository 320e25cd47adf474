"""The Responses fields this server takes only to echo them, as vLLM 0.33 does.

vLLM's ResponsesRequest has these fields and its response object (ResponsesResponse
.from_request) repeats them; none changes what it generates here (vLLM's ``max_tool_calls``
bounds its built-in tools, which this server has none of), so each is checked as vLLM's
pydantic model checks it (a 400 naming it) and echoed::

    service_tier            "auto" (default), "default", "flex", "scale" or "priority"
    safety_identifier       a string, or null
    prompt_cache_key        a string, or null
    prompt_cache_retention  "in_memory" or "24h" ("in-memory" read as "in_memory"), or null
    prompt_cache_options    {"mode": "implicit"|"explicit", "ttl": "30m",
                            "comparison_response_id"?, "prewarm"?}: echoed without prewarm
                            (a bool as vLLM reads one, NOTE(lax-bool)), mode and ttl filled
                            with their defaults; or null
    max_tool_calls          an integer (read as vLLM's pydantic int reads one: "3", 3.0,
                            true; NOTE(lax-int)), or null

The other fields vLLM's response object has and this server has no value for are null:
``prompt`` (a template is a 400, responses_input.py), ``kv_transfer_params``,
``ec_transfer_params``, ``input_messages`` and ``output_messages`` (vLLM's
``enable_response_messages``, not taken here: an unknown field).
"""

from __future__ import annotations

import json
from typing import Any

from kvpool.errors import RequestError
from kvpool.server.json_body import json_bool, json_int

__all__ = ["ECHOED", "echoed_fields"]

_bad = RequestError.field  # errors.py: "param: message", with the param named

TIERS = ("auto", "default", "flex", "scale", "priority")
RETENTIONS = ("in_memory", "24h")
MODES = ("implicit", "explicit")
ECHOED = frozenset({"service_tier", "safety_identifier", "prompt_cache_key",
                    "prompt_cache_retention", "prompt_cache_options", "max_tool_calls"})
_NONE = {"prompt": None, "kv_transfer_params": None, "ec_transfer_params": None,
         "input_messages": None, "output_messages": None}


def echoed_fields(body: dict[str, Any]) -> dict[str, Any]:
    """The response object's echo of these fields (their defaults when not sent)."""
    tier = body.get("service_tier", "auto")
    if tier not in TIERS:
        raise _bad("service_tier", f"must be one of {', '.join(TIERS)}")
    retention = body.get("prompt_cache_retention")
    retention = "in_memory" if retention == "in-memory" else retention
    if retention is not None and retention not in RETENTIONS:
        raise _bad("prompt_cache_retention", "must be 'in_memory' or '24h'")
    tools = body.get("max_tool_calls")
    if tools is not None:  # NOTE(lax-int): echoed as the int read
        tools = json_int(tools)
        if tools is None:
            raise _bad("max_tool_calls", "must be an integer, got "
                       f"{json.dumps(body['max_tool_calls'])[:50]}")
    return {"service_tier": tier, "safety_identifier": _text(body, "safety_identifier"),
            "prompt_cache_key": _text(body, "prompt_cache_key"),
            "prompt_cache_retention": retention, "max_tool_calls": tools,
            "prompt_cache_options": _cache_options(body.get("prompt_cache_options")), **_NONE}


def _text(body: dict[str, Any], name: str) -> str | None:
    value = body.get(name)
    if value is not None and not isinstance(value, str):
        raise _bad(name, "must be a string")
    return value


def _cache_options(value: Any) -> dict[str, Any] | None:
    """vLLM's PromptCacheOptionsParam.to_response: mode, ttl and comparison_response_id."""
    if value is None:
        return None
    where = "prompt_cache_options"
    if not isinstance(value, dict):
        raise _bad(where, "must be an object")
    mode, ttl = value.get("mode", "implicit"), value.get("ttl", "30m")
    compare, prewarm = value.get("comparison_response_id"), value.get("prewarm")
    if mode not in MODES:
        raise _bad(f"{where}.mode", "must be 'implicit' or 'explicit'")
    if ttl != "30m":
        raise _bad(f"{where}.ttl", "must be '30m'")
    if compare is not None and not isinstance(compare, str):
        raise _bad(f"{where}.comparison_response_id", "must be a string")
    if prewarm is not None and json_bool(prewarm) is None:  # NOTE(lax-bool): "yes", 0 too
        raise _bad(f"{where}.prewarm", f"must be a boolean, got {json.dumps(prewarm)[:50]}")
    return {"mode": mode, "ttl": ttl, "comparison_response_id": compare}
