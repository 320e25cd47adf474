"""Who sent a request (the tenant identity that fairness and quotas key on), and whose prefix
cache it reads and fills (CacheNamespace).

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
import json
import logging
from collections.abc import Awaitable, Callable, Mapping

from aiohttp import web

from kvpool.server.middleware import APIError

__all__ = ["NS_MARK", "CacheNamespace", "current_tenant", "tenant_middleware",
           "tenant_of_headers"]

log = logging.getLogger("kvpool.server")

MAX_TENANT_CHARS = 256  # a header value longer than this is refused (400)
NS_MARK = "\x00tenant\x00"  # no client salt holds NUL: this prefix is the server's alone

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
