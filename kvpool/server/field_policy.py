"""FieldPolicy: what becomes of request-body fields an endpoint does not know.

Unknown fields are **ignored** by default, as vLLM does: gateways and clients add their own
(OpenAI's ``metadata``, ``store``, ``service_tier``; SGLang's ``no_stop_trim``), and a 400 for
each one stopped them fronting this server. Each ignored name is logged once (a warning) and
listed in the response's ``X-Kvpool-Ignored-Fields`` header (body_fields.ignored_header), so a
typo such as ``max_token`` is still visible to whoever looks. ``--reject-unknown-fields``
restores OpenAI's own strictness (400, code ``unknown_parameter``, param = the field).

It imports nothing of the model or the engine, so the router reads bodies with it (its
NOTE(messages-scored)) without loading them.
"""

from __future__ import annotations

import logging
from typing import Any

from kvpool.errors import RequestError

__all__ = ["IGNORED_FIELDS_HEADER", "MAX_NAME_CHARS", "FieldPolicy", "is_int"]

_bad = RequestError.field  # errors.py: "param: message", with the param named
log = logging.getLogger("kvpool.server")

IGNORED_FIELDS_HEADER = "X-Kvpool-Ignored-Fields"
MAX_LOGGED_NAMES = 1024  # distinct names warned about; a client inventing names grows nothing
MAX_NAME_CHARS = 64


def is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


class FieldPolicy:
    """Unknown body fields: ignored (logged once per name; ``quiet``: not logged, for a
    reader that answers nothing, the router's NOTE(messages-scored)) or, with ``reject``, a
    400."""

    def __init__(self, reject: bool = False, quiet: bool = False) -> None:
        self.reject = reject
        self.quiet = quiet
        self._warned: set[str] = set()

    def check(self, body: dict[str, Any], known: frozenset[str],
              prefix: str = "") -> tuple[str, ...]:
        """The unknown field names of ``body`` (sorted, each after ``prefix``: a nested
        object's keys), or a 400 naming the first."""
        unknown = [prefix + k for k in body if k not in known]
        if not unknown:
            return ()
        unknown.sort()
        if self.reject:
            name = unknown[0][:MAX_NAME_CHARS]
            raise _bad(name, f"unrecognized request argument supplied: {name}",
                       "unknown_parameter")
        for name in unknown:
            self._warn_once(name[:MAX_NAME_CHARS])
        return tuple(unknown)

    def _warn_once(self, name: str) -> None:
        if self.quiet or name in self._warned or len(self._warned) > MAX_LOGGED_NAMES:
            return
        self._warned.add(name)
        if len(self._warned) > MAX_LOGGED_NAMES:
            log.warning("more than %d distinct unknown request fields; no more are logged",
                        MAX_LOGGED_NAMES)
            return
        log.warning("ignoring the unknown request field %r (logged once; the response lists "
                    "it in %s; --reject-unknown-fields makes it a 400)", name,
                    IGNORED_FIELDS_HEADER)
