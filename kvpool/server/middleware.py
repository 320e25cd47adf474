"""The server's edge: one error middleware (every failure -> OpenAI's error JSON), API-key auth
and the tenant identity.

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

The tenant: who sent a request (the identity that fairness and quotas key on), and whose
prefix cache it reads and fills (CacheNamespace).

The identity must be one the client cannot mint at will (``cache_salt`` is client-chosen, so
rotating it bypassed a quota keyed on it)::

    --tenant-header NAME given  -> the value of header NAME (a trusted proxy sets it; a
                                   request without it is the anonymous tenant "", one that
                                   carries it twice a 400: NOTE(one-identity))
    else, --api-key set         -> "key:" + the first 16 hex digits of SHA-256(bearer token)
                                   (never the secret itself: tenants show up in errors/logs;
                                   with several keys, each key is a tenant)
    else                        -> the anonymous tenant ""

NOTE(one-identity): a proxy that adds its header rather than replacing it (Envoy's
``request_headers_to_add`` appends by default, HAProxy's ``add-header`` too) forwards a
client's own copy first, and ``headers.get`` read the first one: a client that sent
``X-Tenant-Id: a`` was tenant ``a`` (its cache hits, stored responses and quota) whatever the
proxy said. Taking the last copy instead would trust the proxy's position in the list; the
server cannot tell which copy is the proxy's, so a request carrying the header more than once
is refused (400 naming it) and nobody's identity is guessed.

The middleware puts the tenant in a ContextVar for the rest of the handler's task; the request
gate (request_gate.py) and the lookup route read it. NOTE(contextvar): the route handlers never
pass tenants around; aiohttp runs middleware and handler in one task, so the value cannot leak
between requests.

CacheNamespace: whose prefix cache a request reads and fills, one namespace per tenant or one
for all.

A prefix-cache hit is observable (``usage.prompt_tokens_details.cached_tokens``, the
``/v1/kvpool/lookup`` counts, and the latency), so a cache shared across tenants is an oracle:
tenant B learns whether tenant A sent a prompt by asking for it. So where the server knows who
sends (``--api-key`` or ``--tenant-header``, above), each tenant gets its own namespace by
default; ``--shared-prefix-cache`` opts back into one namespace for all::

    no identity configured            salt = cache_salt                    (one namespace)
    identity, --shared-prefix-cache   salt = cache_salt                    (one namespace)
    identity (the default)            salt = NS_MARK + json([tenant, cache_salt])

The salt is what ``BlockHasher.root`` mixes into every chain hash (kvpool/core/hashing.py), so
the device and host pools and the Redis tier's keys (kvpool/remote/keys.py: a key is a chain
hash) all follow from it. The encoding is injective in ``(tenant, cache_salt)``: two tenants
that send the same ``cache_salt`` still get different roots, and a tenant's own salts stay
apart. Client salts cannot contain NUL (protocol.py), so no client salt sent to a replica in
one-namespace mode spells a tenant's salt either.

Every use goes through ``salt``: the generation routes (request_gate.Ticket) and the lookup
route, so a lookup predicts exactly what the same tenant's next request reports as cached.
"""

from __future__ import annotations

import contextvars
import hashlib
import hmac
import json
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from aiohttp import web

from kvpool.errors import EngineError, QueueFullError, RequestError, RequestRejected
from kvpool.server.json_body import LAX_BOOL_STRINGS
from kvpool.server.options_key import keyless_options_answer

__all__ = ["GUARDED_PREFIXES", "NS_MARK", "STREAM_STARTED", "APIError", "CacheNamespace",
           "auth_middleware", "bearer_token", "current_tenant", "error_body",
           "error_middleware", "error_type", "http_error_code", "json_errors",
           "known_error", "query_bool", "tenant_middleware", "tenant_of_headers",
           "to_api_error"]

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


# NOTE(query-bool): the strings vLLM's query parsing reads as booleans (FastAPI hands a bool
# query parameter to pydantic's lax bool): json_body.py's NOTE(lax-bool) table, every route


def query_bool(request: web.Request, name: str) -> bool:
    """NOTE(query-bool): query parameter ``name`` as a boolean (False when absent; the last
    one when given more than once, as FastAPI reads it); a value vLLM would refuse is a 400
    naming it as vLLM's validation error does (``query.NAME``)."""
    values = request.query.getall(name, [])
    if not values:
        return False
    value = LAX_BOOL_STRINGS.get(values[-1].lower())
    if value is None:
        raise RequestError(f"{name}: Input should be a valid boolean, unable to interpret "
                           "input (use true or false)", param=f"query.{name}")
    return value


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


def bearer_token(headers: Mapping[str, str]) -> str:
    """The token of ``Authorization: Bearer <token>``, "" when there is none. The scheme's
    case does not matter (RFC 7235; vLLM reads it so too)."""
    scheme, _, token = headers.get("Authorization", "").partition(" ")
    return token if scheme.lower() == "bearer" else ""


INVOCATIONS = "/invocations"  # SageMaker's generation route (NOTE(invocations-key))
# vLLM 0.33's GUARDED_PREFIX (vllm/entrypoints/serve/middleware/authenticate.py), matched as it
# matches them: any path that starts with one, served here or not (NOTE(guarded-prefixes))
GUARDED_PREFIXES = ("/v1", "/v2", "/inference", "/cohere")


def auth_middleware(api_keys: tuple[str, ...],
                    guarded: tuple[str, ...] = GUARDED_PREFIXES) -> Callable:
    """Require ``Authorization: Bearer <key>``, one of ``api_keys``, on every path that starts
    with one of ``guarded``, and on SageMaker's /invocations (NOTE(invocations-key)).

    Each comparison runs in constant time (``hmac.compare_digest``) and every key is compared,
    so the time taken reveals neither how much of a guess was right nor which key it neared.
    /health and /metrics stay open.

    NOTE(invocations-key): vLLM 0.33 guards /v1, /v2, /inference and /cohere only, so with
    --api-key its /invocations generates for anyone. Here it generated for anyone too, and the
    tenant of such a request was read from a bearer token no one had checked: any made-up token
    was a fresh tenant with its own quota and prefix cache. /invocations takes the key as /v1
    does; SageMaker itself authenticates its callers and sends no bearer, so a deployment
    behind it runs without --api-key (docs/architecture.md "SageMaker's /invocations").

    NOTE(guarded-prefixes): vLLM checks the key before routing: an unkeyed request under its
    prefixes is a 401, be it a scale-out 403 or a 404 with the key. kvpool guarded /v1 only and
    told unkeyed clients what it serves (docs/architecture.md "vLLM's scale-out routes")."""
    expected = [key.encode() for key in api_keys]

    def known(token: str) -> bool:
        got, ok = token.encode("utf-8", "surrogateescape"), False
        for key in expected:
            ok |= hmac.compare_digest(got, key)
        return ok and bool(token)

    @web.middleware
    async def check_key(request: web.Request, handler: Handler) -> web.StreamResponse:
        path = request.path
        if path == INVOCATIONS or path.startswith(guarded):
            if not known(bearer_token(request.headers)):
                if (answer := keyless_options_answer(request)) is not None:
                    raise answer  # vLLM's 405/404: no handler runs (NOTE(options-key))
                raise APIError(401, "invalid or missing API key: send "
                                    "'Authorization: Bearer <key>'", code="invalid_api_key",
                               headers={"WWW-Authenticate": "Bearer"})
        return await handler(request)

    return check_key


MAX_TENANT_CHARS = 256  # a header value longer than this is refused (400)
NS_MARK = "\x00tenant\x00"  # no client salt holds NUL: this prefix is the server's alone

_TENANT: contextvars.ContextVar[str] = contextvars.ContextVar("kvpool_tenant", default="")


def current_tenant() -> str:
    """The tenant of the request being handled ("" outside a request: anonymous)."""
    return _TENANT.get()


def tenant_of_headers(headers: Mapping[str, str], header: str | None, *, keyed: bool) -> str:
    """The identity rule of the module docstring, from a request's headers alone (the
    middleware's, and the router's --kv-events computing the replicas' salts). ``keyed``: an
    API key is configured, so a bearer token is a checked identity; without one any client
    could mint a fresh tenant (and a fresh quota) per request by changing its token."""
    if header:
        values = _all_values(headers, header)
        if len(values) > 1:  # NOTE(one-identity)
            raise APIError(400, f"header {header} is sent {len(values)} times: it names the "
                                "tenant, so a request carries it once", param=header)
        value = values[0] if values else ""
        if len(value) > MAX_TENANT_CHARS:
            raise APIError(400, f"header {header} is longer than {MAX_TENANT_CHARS} "
                                "characters", param=header)
        return value
    token = bearer_token(headers) if keyed else ""
    if token:
        return "key:" + hashlib.sha256(token.encode()).hexdigest()[:16]
    return ""


def _all_values(headers: Mapping[str, str], name: str) -> list[str]:
    """Every value of header ``name`` (a plain mapping holds one at most)."""
    getall = getattr(headers, "getall", None)
    if getall is not None:
        return list(getall(name, []))
    value = headers.get(name)
    return [] if value is None else [value]


def tenant_middleware(header: str | None, *, keyed: bool) -> Callable:
    """Set the request's tenant (see ``tenant_of_headers``) for the handler. Runs after auth, so an
    API key seen here is a valid one (``keyed``: an API key is configured)."""

    @web.middleware
    async def middleware(request: web.Request,
                         handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                         ) -> web.StreamResponse:
        token = _TENANT.set(tenant_of_headers(request.headers, header, keyed=keyed))
        try:
            return await handler(request)
        finally:
            _TENANT.reset(token)

    return middleware


class CacheNamespace:
    """The prefix-cache salt of a request, from its tenant and its client ``cache_salt``."""

    def __init__(self, *, identity: bool, shared: bool = False) -> None:
        """``identity``: the server tells tenants apart (an API key or a tenant header is
        configured). ``shared``: the operator's ``--shared-prefix-cache``."""
        if shared and not identity:
            log.warning("--shared-prefix-cache has no effect: no tenant identity is "
                        "configured (--api-key or --tenant-header), so every request already "
                        "shares one prefix cache; drop the flag")
        self.per_tenant = identity and not shared

    def salt(self, tenant: str, cache_salt: str | None) -> str | None:
        """The salt the request's prefix hashes are made under."""
        if not self.per_tenant:
            return cache_salt
        # ASCII escapes: a header value may hold surrogate escapes that UTF-8 cannot encode
        return NS_MARK + json.dumps([tenant, cache_salt])
