"""Who sent a request: the tenant identity that fairness and quotas key on.

The identity must be one the client cannot mint at will (``cache_salt`` is client-chosen, so
rotating it bypassed a quota keyed on it)::

    --tenant-header NAME given  -> the value of header NAME (a trusted proxy sets it; a
                                   request without it is the anonymous tenant "")
    else, --api-key set         -> "key:" + the first 16 hex digits of SHA-256(bearer token)
                                   (never the secret itself: tenants show up in errors/logs)
    else                        -> the anonymous tenant ""

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

from kvpool.server.middleware import APIError

__all__ = ["current_tenant", "tenant_middleware", "tenant_of_headers"]

MAX_TENANT_CHARS = 256  # a header value longer than this is refused (400)

_TENANT: contextvars.ContextVar[str] = contextvars.ContextVar("kvpool_tenant", default="")


def current_tenant() -> str:
    """The tenant of the request being handled ("" outside a request: anonymous)."""
    return _TENANT.get()


def tenant_of_headers(headers: Mapping[str, str], header: str | None) -> str:
    """The identity rule of the module docstring, from a request's headers alone (the
    middleware's, and the router's --kv-events computing the replicas' salts)."""
    if header:
        value = headers.get(header, "")
        if len(value) > MAX_TENANT_CHARS:
            raise APIError(400, f"header {header} is longer than {MAX_TENANT_CHARS} "
                                "characters", param=header)
        return value
    auth = headers.get("Authorization", "")
    if auth.startswith("Bearer ") and len(auth) > 7:
        return "key:" + hashlib.sha256(auth[7:].encode()).hexdigest()[:16]
    return ""


def tenant_middleware(header: str | None) -> Callable:
    """Set the request's tenant (see ``tenant_of_headers``) for the handler. Runs after auth, so an
    API key seen here is a valid one."""

    @web.middleware
    async def middleware(request: web.Request,
                         handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                         ) -> web.StreamResponse:
        token = _TENANT.set(tenant_of_headers(request.headers, header))
        try:
            return await handler(request)
        finally:
            _TENANT.reset(token)

    return middleware

