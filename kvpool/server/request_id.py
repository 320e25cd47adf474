"""The ``X-Request-Id`` response header on every response, as vLLM sends it.

A client (or a gateway) that sends ``X-Request-Id`` gets the same value back, so its logs and
this server's line up; otherwise the server makes one up. A value that could not be echoed
safely (over ``MAX_REQUEST_ID_CHARS``, or with characters outside visible ASCII) is replaced by
a fresh one. Set in ``on_response_prepare``, which runs before the headers of any response go
out, streams included.
"""

from __future__ import annotations

import uuid

from aiohttp import web

__all__ = ["MAX_REQUEST_ID_CHARS", "REQUEST_ID_HEADER", "add_request_id"]

REQUEST_ID_HEADER = "X-Request-Id"
MAX_REQUEST_ID_CHARS = 256


def _echoable(value: str) -> bool:
    return 0 < len(value) <= MAX_REQUEST_ID_CHARS and all(" " < c <= "~" for c in value)


async def add_request_id(request: web.Request, response: web.StreamResponse) -> None:
    """aiohttp ``on_response_prepare`` hook."""
    given = request.headers.get(REQUEST_ID_HEADER, "")
    response.headers[REQUEST_ID_HEADER] = given if _echoable(given) else uuid.uuid4().hex
