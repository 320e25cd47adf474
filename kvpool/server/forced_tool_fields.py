"""NOTE(tool-forced): the constraint fields a chat request's forcing ``tool_choice``
(``required`` or a named function) leaves unheeded, as vLLM 0.33 leaves them.

vLLM's tool parser (its ``adjust_request``) replaces the request's ``structured_outputs`` with
the forced call's own constraint and sets ``response_format`` to None, so both are answered
with a 200 and do not hold the output; its legacy ``guided_*`` fields are unknown fields there
(ignored on every request). Here each of them is taken out of the body before the sampling
controls read it and listed in ``X-Kvpool-Ignored-Fields``; a warning is logged once.

What vLLM refuses before that point stays a 400: a malformed ``structured_outputs`` (its
pydantic model, then the one-constraint rule), a named tool beside ``structured_outputs``
``json`` / ``regex`` / ``choice`` (check_structured_outputs_count), a malformed
``response_format`` (its model). The ``guided_*`` values are not read: vLLM never reads them.
"""

from __future__ import annotations

import logging
from typing import Any

from kvpool.errors import RequestError
from kvpool.server.guided_fields import GUIDED_FIELDS, parse_guided
from kvpool.server.sampling_fields import parse_response_format

_bad = RequestError.field  # errors.py: "param: message", with the param named

__all__ = ["drop_for_forced_tool"]

log = logging.getLogger("kvpool.server")

_LEGACY = tuple(sorted(GUIDED_FIELDS - {"structured_outputs"}))
_NAMED_REFUSED = ("json", "regex", "choice")  # vLLM's check_structured_outputs_count
_LOGGED: list[bool] = []  # the drop is logged once per process


def drop_for_forced_tool(body: dict[str, Any], ignored: tuple[str, ...],
                         choice: str) -> tuple[dict[str, Any], tuple[str, ...]]:
    """NOTE(tool-forced): ``body`` without the constraint fields a forcing ``choice``
    (``required`` / ``named``) leaves unheeded, and ``ignored`` with their names added."""
    dropped = [*_structured_outputs(body, choice), *_response_format(body)]
    dropped += [k for k in _LEGACY if body.get(k) is not None]
    if not dropped:
        return body, ignored
    if not _LOGGED:
        _LOGGED.append(True)
        log.warning("structured-output constraints (%s) are ignored where tool_choice forces "
                    "a tool call (vLLM's rule; logged once, each response lists them in "
                    "X-Kvpool-Ignored-Fields)", ", ".join(dropped))
    rest = {k: v for k, v in body.items() if k not in dropped}
    return rest, ignored + tuple(dropped)


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
