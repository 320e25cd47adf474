"""What an OPTIONS request sent without the API key gets under the guarded prefixes.

NOTE(options-key): vLLM 0.33's key check (vllm/entrypoints/serve/middleware/authenticate.py)
lets every OPTIONS through, keyed or not, on every path. A CORS preflight (``Origin`` and
``Access-Control-Request-Method``) is answered by its CORSMiddleware (cors.py here, before the
key is asked); any other OPTIONS, with no ``Origin`` for instance, reaches its router, and none
of its routes takes OPTIONS: starlette answers 405 with ``Allow`` on a path it serves, 404 on
one it does not, with the CORS headers an ``Origin`` earns, CORS configured or not. kvpool
asked for the key instead (a 401), so a client probing with a plain OPTIONS read a server that
said "unauthorized" where vLLM says "method not allowed". kvpool now answers as vLLM does, in
its own error JSON (code ``method_not_allowed`` / ``not_found``, as any 405 or 404 here).

Only the router's own answer is given: a keyless OPTIONS never runs a handler. Should a route
here ever take OPTIONS (or any method), its handler would do work or tell what it serves, so
the key is asked there as before (a 401). The 404/405 tells a keyless client which paths exist
under the guarded prefixes, exactly what vLLM's answer tells (docs/architecture.md
"vLLM's scale-out routes").
"""

from __future__ import annotations

from aiohttp import web

__all__ = ["keyless_options_answer"]


def keyless_options_answer(request: web.Request) -> web.HTTPException | None:
    """The router's 404/405 for an OPTIONS request (NOTE(options-key)); None for any other
    method, or for a route that would run a handler on OPTIONS: the caller asks for the key."""
    if request.method != "OPTIONS":
        return None
    return request.match_info.http_exception
