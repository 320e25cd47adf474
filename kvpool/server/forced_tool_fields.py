"""NOTE(tool-forced): the constraint fields a chat request's forcing ``tool_choice``
(``required`` or a named function) leaves unheeded, as vLLM 0.33 leaves them.

vLLM's tool parser (its ``adjust_request``) replaces the request's ``structured_outputs`` with
the forced call's own constraint and sets ``response_format`` to None, so both are answered
with a 200 and do not hold the output; its legacy ``guided_*`` fields are unknown fields there
(ignored on every request). Here each of them is taken out of the body before the sampling
controls read it and listed in ``X-Kvpool-Ignored-Fields``; a warning is logged once.

A ``structured_outputs.structural_tag`` is the exception: vLLM's ``adjust_request`` returns
the request untouched when one is given, so the client's constraints hold the output in place
of the call's schema (the output is still read as the forced call), and only the legacy
``guided_*`` are dropped here. What vLLM refuses before that point stays a 400: a malformed ``structured_outputs`` (its
pydantic model, then the one-constraint rule), a named tool beside ``structured_outputs``
``json`` / ``regex`` / ``choice`` (check_structured_outputs_count), a malformed
``response_format`` (its model). The ``guided_*`` values are not read: vLLM never reads them.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from kvpool.errors import RequestError
from kvpool.server.guided_fields import GUIDED_FIELDS, parse_guided
from kvpool.server.sampling_fields import parse_response_format
from kvpool.server.tools.request import ToolRequest

_bad = RequestError.field  # errors.py: "param: message", with the param named

__all__ = ["drop_for_forced_tool"]

log = logging.getLogger("kvpool.server")

_LEGACY = tuple(sorted(GUIDED_FIELDS - {"structured_outputs"}))
_NAMED_REFUSED = ("json", "regex", "choice")  # vLLM's check_structured_outputs_count
_LOGGED: list[bool] = []  # the drop is logged once per process


def drop_for_forced_tool(body: dict[str, Any], ignored: tuple[str, ...], tools: ToolRequest
                         ) -> tuple[dict[str, Any], tuple[str, ...], ToolRequest]:
    """NOTE(tool-forced): ``body`` without the constraint fields a forcing choice (``required``
    / ``named``) leaves unheeded, ``ignored`` with their names added, and ``tools``: without
    its grammar where the client's structural tag holds the output instead."""
    so = body.get("structured_outputs")
    tagged = isinstance(so, dict) and so.get("structural_tag") is not None
    dropped = [] if tagged else [*_structured_outputs(body, tools.choice),
                                 *_response_format(body)]
    dropped += [k for k in _LEGACY if body.get(k) is not None]
    if tagged:
        tools = dataclasses.replace(tools, grammar=None)
    if not dropped:
        return body, ignored, tools
    if not _LOGGED:
        _LOGGED.append(True)
        log.warning("structured-output constraints (%s) are ignored where tool_choice forces "
                    "a tool call (vLLM's rule; logged once, each response lists them in "
                    "X-Kvpool-Ignored-Fields)", ", ".join(dropped))
    rest = {k: v for k, v in body.items() if k not in dropped}
    return rest, ignored + tuple(dropped), tools


def _structured_outputs(body: dict[str, Any], choice: str) -> list[str]:
    """``["structured_outputs"]`` when it is given (validated first, as vLLM's model is)."""
    so = body.get("structured_outputs")
    if so is None:
        return []
    parse_guided({"structured_outputs": so})
    if choice == "named" and any(so.get(k) is not None for k in _NAMED_REFUSED):
        raise _bad("tool_choice", "a named tool cannot be combined with structured_outputs "
                   "json, regex or choice: use constraints for structured outputs or tools")
    return ["structured_outputs"]


def _response_format(body: dict[str, Any]) -> list[str]:
    """``["response_format"]`` when it constrains (not ``text``), after its shape is read."""
    fmt = body.get("response_format")
    return [] if fmt is None or parse_response_format(fmt) is None else ["response_format"]
