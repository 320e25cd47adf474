"""API-key auth: ``--api-key`` guards vLLM's prefixes and /invocations (``auth_middleware``),
and the bearer token a request carries (``bearer_token``; tenant.py keys the tenant on it).

A missing or wrong key is a 401 ``invalid_api_key`` in OpenAI's error JSON (the error table of
middleware.py), with ``WWW-Authenticate: Bearer``.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable, Mapping

from aiohttp import web

from kvpool.server.middleware import APIError
from kvpool.server.options_key import keyless_options_answer

__all__ = ["GUARDED_PREFIXES", "auth_middleware", "bearer_token"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


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
