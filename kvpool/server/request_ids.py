"""Request ids: the ``X-Request-Id`` header of every answer, and the ``id`` a completions or
chat answer shows (docs/architecture.md "Request ids").

``X-Request-Id`` on every response, as vLLM sends it: a client (or a gateway: Envoy sets one
on every request, and kvpool router forwards the client's) that sends one gets the same value
back, so its logs and this server's line up; otherwise the server makes one up. A value that
could not be echoed safely (over ``MAX_REQUEST_ID_CHARS``, or with characters outside visible
ASCII) is replaced by a fresh one. Set in ``on_response_prepare``, which runs before the
headers of any response go out, streams included; the value is chosen once per request, so
the handler shows the same one.

The answer's ``id`` (``cmpl-<x>``, ``chatcmpl-<x>``) takes vLLM's order for ``<x>``::

    X-Request-Id sent       the header's value as echoed (a fresh one where it could not be)
    else body request_id    the client's string (any characters: JSON escapes them)
    else                    the X-Request-Id made up for this answer

NOTE(own-engine-id): the id a client chooses is shown, never used inside. Each engine request
has its own random id (responses.ResponseBuilder.engine_id): two requests sent with the same
X-Request-Id or request_id both run, and an abort or a finished update of one never reaches
the other. Logs name the engine id too (a client's id may hold CR/LF).

The body's ``request_id``: a string (any characters, "" too, as vLLM takes it) of at most
MAX_REQUEST_ID_CHARS (vLLM sets no bound, and repeats the id in every chunk of a stream);
null is absent; another value is a 400 naming it.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from typing import Any

from aiohttp import web

from kvpool.errors import RequestError
from kvpool.server.parsed_request import ParsedRequest

__all__ = ["MAX_REQUEST_ID_CHARS", "REQUEST_ID_HEADER", "add_request_id", "echoed_request_id",
           "shown_request_id", "with_body_id"]

REQUEST_ID_HEADER = "X-Request-Id"
MAX_REQUEST_ID_CHARS = 256  # an echoed header, or a body request_id (vllm_fields.py)
_CHOSEN = web.RequestKey("kvpool_request_id", str)


def _echoable(value: str) -> bool:
    return 0 < len(value) <= MAX_REQUEST_ID_CHARS and all(" " < c <= "~" for c in value)


def echoed_request_id(request: web.Request) -> str:
    """The ``X-Request-Id`` this request's answer carries (chosen on the first call)."""
    chosen = request.get(_CHOSEN)
    if chosen is None:
        given = request.headers.get(REQUEST_ID_HEADER, "")
        chosen = request[_CHOSEN] = given if _echoable(given) else uuid.uuid4().hex
    return chosen


def shown_request_id(request: web.Request, body_id: str | None) -> str:
    """What follows ``cmpl-`` / ``chatcmpl-`` in the answer's ``id`` (the module's table)."""
    if REQUEST_ID_HEADER not in request.headers and body_id is not None:
        return body_id
    return echoed_request_id(request)


def with_body_id(req: ParsedRequest, body: dict[str, Any]) -> ParsedRequest:
    """``req`` with the body's ``request_id`` (the module's rule), checked."""
    v = body.get("request_id")
    if v is None:
        return req
    if not isinstance(v, str) or len(v) > MAX_REQUEST_ID_CHARS:
        raise RequestError.field("request_id", f"must be a string of at most "
                                 f"{MAX_REQUEST_ID_CHARS} characters, got {json.dumps(v)[:50]}")
    return dataclasses.replace(req, request_id=v)


async def add_request_id(request: web.Request, response: web.StreamResponse) -> None:
    """aiohttp ``on_response_prepare`` hook: the ``X-Request-Id`` header."""
    response.headers[REQUEST_ID_HEADER] = echoed_request_id(request)
