"""The server's error edge: one error middleware (every failure -> OpenAI's error JSON) and the
hook that gives the errors aiohttp answers ahead of it the same JSON. API-key auth: api_key.py;
the tenant: tenant.py; its prefix-cache namespace: cache_namespace.py.

Every response that is not a success carries OpenAI's error body with the status that fits::

    {"error": {"message": "...", "type": "invalid_request_error", "param": "max_tokens",
               "code": null}}

    cause                                         status  type                   code
    ------------------------------------------------------------------------------------------
    APIError raised by a handler                  its own
    RequestError / SamplingParamsError            400     invalid_request_error  (from the error)
    ModelNotFoundError (a RequestError)           404     invalid_request_error  model_not_found
    RequestRejected (can never fit the pool)      400     invalid_request_error  request_rejected
    missing / wrong API key                       401     invalid_request_error  invalid_api_key
    unknown route                                 404     invalid_request_error  not_found
    wrong method                                  405     invalid_request_error  method_not_allowed
    body over client_max_size (declared: before   413     invalid_request_error  request_too_large
      any of it is read, no 100 Continue)
    body unreadable (corrupt gzip, bad chunking)  400     invalid_request_error  invalid_body
    Expect other than 100-continue (NOTE(expect)) 417     invalid_request_error  expectation_failed
    a transfer coding before chunked (gzip, ...)  501     server_error           not_implemented
    QueueFullError                                503     server_error           queue_full (+Retry-After)
    EngineError (engine stopping or failed)       503     server_error           engine_unavailable
    request arrives while the server drains       503     server_error           shutting_down
    engine ended the request "error" / "abort"    500/503 server_error           generation_error /
                                                                                 request_aborted
    anything else                                 500     server_error           internal_error

The middleware never writes after a streaming response has started (the stream handler reports
its own late failures as an SSE error event) and lets client disconnects and cancellation pass:
there is nobody left to answer.

``X-Request-Id``: request_ids.py.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from kvpool.errors import EngineError, QueueFullError, RequestError, RequestRejected

__all__ = ["STREAM_STARTED", "APIError", "error_body", "error_middleware", "error_type",
           "http_error_code", "json_errors", "known_error", "to_api_error"]

log = logging.getLogger("kvpool.server")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# Set by a streaming handler once its headers are on the wire (no JSON error can follow).
STREAM_STARTED = web.RequestKey("kvpool_stream_started", bool)
RETRY_AFTER_SECONDS = "1"  # NOTE(retry): the queue drains per engine step; a second is plenty

# Statuses aiohttp raises itself (routing, body size) -> our (type, code).
_HTTP_CODES = {
    400: "bad_request", 401: "invalid_api_key", 404: "not_found", 405: "method_not_allowed",
    408: "request_timeout",
    413: "request_too_large", 415: "unsupported_media_type", 417: "expectation_failed",
    431: "headers_too_large",
    501: "not_implemented", 503: "service_unavailable",
}


def http_error_code(status: int) -> str | None:
    """The ``code`` for a status aiohttp produced itself (router, parser, body size)."""
    return _HTTP_CODES.get(status)


class APIError(Exception):
    """A failure with a definite HTTP status and OpenAI error fields, raised by handlers."""

    def __init__(self, status: int, message: str, *, param: str | None = None,
                 code: str | None = None, type: str | None = None,
                 headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code
        self.type = type or error_type(status)
        self.headers = headers or {}

    def response(self) -> web.Response:
        return web.json_response(error_body(self.message, self.type, self.param, self.code),
                                 status=self.status, headers=self.headers)


def error_type(status: int) -> str:
    """OpenAI's error ``type`` for a status: client errors are invalid requests."""
    return "server_error" if status >= 500 else "invalid_request_error"


def error_body(message: str, type: str, param: str | None = None,
               code: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": type, "param": param, "code": code}}


def known_error(exc: BaseException) -> APIError | None:
    """The APIError of the server's own exceptions (the table above: an APIError, a
    RequestError, RequestRejected, QueueFullError, EngineError), or None for any other.
    ``to_api_error`` answers a handler's with it; a background response that failed stores
    it (responses_background.py NOTE(background))."""
    if isinstance(exc, APIError):
        return exc
    if isinstance(exc, RequestError):
        # a RequestError subclass may carry its own 4xx (ModelNotFoundError: 404)
        return APIError(getattr(exc, "http_status", 400), str(exc), param=exc.param,
                        code=exc.code)
    if isinstance(exc, RequestRejected):
        return APIError(400, str(exc), param="prompt", code="request_rejected")
    if isinstance(exc, QueueFullError):
        said = str(exc)  # some queues' messages say "retry later" themselves: once is enough
        return APIError(503, said if said.endswith("retry later") else f"{said}; retry later",
                        code="queue_full", headers={"Retry-After": RETRY_AFTER_SECONDS})
    if isinstance(exc, EngineError):
        return APIError(503, f"the engine cannot take this request: {exc}",
                        code="engine_unavailable", headers={"Retry-After": RETRY_AFTER_SECONDS})
    return None


def to_api_error(exc: BaseException, request: web.Request) -> APIError:
    """Map any exception a handler (or aiohttp's router) raised to an APIError."""
    known = known_error(exc)
    if known is not None:
        return known
    if isinstance(exc, web.RequestPayloadError):
        # NOTE(gzip): aiohttp raises this from request.read() for a body it cannot read
        # (broken chunked framing; a compressed body is decoded in body_coding.py): the
        # client's fault, not a 500
        detail = " ".join(str(exc).split("message:")[-1].split()) or "unreadable body"
        return APIError(400, f"could not read the request body: {detail}", param=None,
                        code="invalid_body")
    if isinstance(exc, web.HTTPException):
        status = exc.status
        headers = {k: v for k, v in exc.headers.items() if k in ("Allow", "Retry-After")}
        if status == 404:
            message = f"unknown route: {request.method} {request.path}"
        elif status == 405:
            message = (f"method {request.method} is not allowed on {request.path}; "
                       f"allowed: {headers.get('Allow', '')}")
        elif status == 413:
            message = f"request body too large: {exc.text or exc.reason}"
        else:
            message = exc.text or exc.reason
        return APIError(status, message, code=_HTTP_CODES.get(status), headers=headers)
    log.exception("unhandled error in %s %s", request.method, request.path, exc_info=exc)
    return APIError(500, "internal server error", code="internal_error")


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    """The one place failures become responses (outermost middleware)."""
    try:
        response = await handler(request)
    except (ConnectionError, web.HTTPSuccessful, web.HTTPRedirection):
        raise  # a gone client cannot read a body; 2xx/3xx exceptions are not failures
    except Exception as exc:  # noqa: BLE001 - the edge: everything is answered in JSON
        if request.get(STREAM_STARTED, False):
            raise  # NOTE(sse): headers already sent; the stream handler owns late errors
        resp = to_api_error(exc, request).response()
        if isinstance(exc, web.RequestPayloadError):
            # NOTE(close): the rest of an unreadable body cannot be skipped, so aiohttp drops
            # the connection after this answer; say so, or a keep-alive client sends its next
            # request into a closing socket (a reset, not an answer)
            resp.force_close()
        return resp
    return response


async def json_errors(request: web.Request, response: web.StreamResponse) -> None:
    """aiohttp ``on_response_prepare`` hook: an error aiohttp answers before any middleware
    runs gets OpenAI's error JSON too. NOTE(expect): the app calls a route's expect handler
    ahead of the middleware chain, and for an ``Expect`` other than ``100-continue`` it raises
    417 with a text/plain body that no middleware sees. Only such raised exceptions are
    rewritten: the middleware's errors are JSON already, and a response a route built itself
    (a refused CORS preflight's text, as vLLM's) passes unchanged."""
    if not isinstance(response, web.HTTPException) or response.status < 400 or \
            response.content_type == "application/json":
        return
    said = response.text if isinstance(response.body, bytes) and response.body else ""
    body = json.dumps(error_body(said or response.reason, error_type(response.status), None,
                                 _HTTP_CODES.get(response.status))).encode()
    response.body = body
    response.content_type = "application/json"
    response.charset = "utf-8"
    response.headers["Content-Length"] = str(len(body))

