"""The tenant: who sent a request (the identity that fairness and quotas key on), and so whose
prefix cache it reads and fills (cache_namespace.py).

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
"""

from __future__ import annotations

import contextvars
import hashlib
from collections.abc import Awaitable, Callable, Mapping

from aiohttp import web

from kvpool.server.api_key import bearer_token
from kvpool.server.middleware import APIError

__all__ = ["current_tenant", "header_values", "tenant_middleware", "tenant_of_headers"]

MAX_TENANT_CHARS = 256  # a header value longer than this is refused (400)

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
        values = header_values(headers, header)
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


def header_values(headers: Mapping[str, str], name: str) -> list[str]:
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
