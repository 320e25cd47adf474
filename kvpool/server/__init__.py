"""kvpool.server: the OpenAI-compatible aiohttp app over an AsyncEngine.

``build_app(engine, api_key=...)`` gives the web.Application (routes, one error middleware,
auth, the engine's lifetime in cleanup_ctx); ``kvpool.server.serve.run_server(config,
ServeOptions(host=..., port=...))`` serves it with graceful shutdown; ``kvpool serve`` is
``serve.add_serve_args`` + ``serve.main``. (``serve`` is not imported here, so ``python -m kvpool.server.serve`` runs it
as a fresh module.)

NOTE(lazy): the app pulls in the engine (torch, seconds to import); the router imports only
the HTTP edge modules (middleware, connections, json_body), so the app loads on first use.
"""

from typing import Any

__all__ = ["ENGINE_KEY", "METRICS_KEY", "ROUTES_KEY", "build_app"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from kvpool.server import app
        return getattr(app, name)
    raise AttributeError(f"module 'kvpool.server' has no attribute {name!r}")
