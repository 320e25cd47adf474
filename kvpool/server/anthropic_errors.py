"""NOTE(anthropic-errors): every error answered on a Messages path (``/v1/messages`` and
below), whoever raised it (a parse 400, the unknown model's 404, the auth middleware's 401, the
router's 404 / 405, a 413, the gate's 503; and ``kvpool router``'s own answers there), is
Anthropic's ``{"type": "error", "error": {"type", "message"}}`` with the type vLLM gives the
status: an ``on_response_prepare`` hook rewrites the OpenAI error JSON the app's middleware
made, so status and headers (Retry-After) stay (docs/architecture.md "The Messages API").
It imports nothing of the model or the engine, so the router installs it without loading them.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from kvpool.server.sse import sse_event

__all__ = ["PREFIX", "anthropic_error", "anthropic_error_event", "anthropic_errors", "error_kind",
           "messages_path"]

PREFIX = "/v1/messages"
# NOTE(render-errors): vLLM answers its scale-out /v1/messages/render with its OpenAI-shaped
# error, as its other scale-out paths (vllm/entrypoints/scale_out/factories.py); the caller is
# vLLM's render client, not an Anthropic SDK (docs/architecture.md "vLLM's scale-out routes")
RENDER = PREFIX + "/render"
# vLLM's status -> Anthropic error type (its translate_error_type)
_KINDS = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
          404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
          503: "overloaded_error"}


def error_kind(status: int) -> str:
    return _KINDS.get(status) or ("api_error" if status >= 500 else "invalid_request_error")


def anthropic_error(status: int, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": error_kind(status), "message": message}}


def anthropic_error_event(status: int, message: str) -> bytes:
    """The ``event: error`` a Messages stream that fails midway ends with, as the Anthropic
    API ends one (anthropic_view.py's ``tail`` writes it for a failure), and
    ``kvpool router``'s streams cut off by a replica (router/stream_end.py)."""
    return sse_event(anthropic_error(status, message), "error")


def messages_path(path: str) -> bool:
    """Whether ``path`` (no query string) is a Messages path: ``/v1/messages`` and below, but
    for vLLM's scale-out ``/v1/messages/render`` (NOTE(render-errors))."""
    return path == PREFIX or (path.startswith(PREFIX + "/") and path != RENDER)


async def anthropic_errors(request: web.Request, response: web.StreamResponse) -> None:
    """aiohttp ``on_response_prepare`` hook (NOTE(anthropic-errors)): an OpenAI error body on
    a Messages path becomes Anthropic's error body, same status and headers."""
    if response.status < 400 or not messages_path(request.path) or \
            not isinstance(response, web.Response) or not isinstance(response.body, bytes):
        return
    try:
        said = json.loads(response.body)
        message = said["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return
    if not isinstance(message, str):
        return
    body = json.dumps(anthropic_error(response.status, message)).encode()
    response.body = body
    response.content_type = "application/json"
    response.headers["Content-Length"] = str(len(body))
