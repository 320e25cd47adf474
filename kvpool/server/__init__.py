"""kvpool.server: the OpenAI-compatible aiohttp app over an AsyncEngine.

``build_app(engine, api_key=...)`` gives the web.Application (routes, one error middleware,
auth, the engine's lifetime in cleanup_ctx); ``kvpool.server.serve.run_server(config,
ServeOptions(host=..., port=...))`` serves it with graceful shutdown; ``kvpool serve`` is
``serve.add_serve_args`` + ``serve.main``. (``serve`` is not imported here, so ``python -m kvpool.server.serve`` runs it
as a fresh module.)
"""

from kvpool.server.app import ENGINE_KEY, METRICS_KEY, ROUTES_KEY, build_app

__all__ = ["ENGINE_KEY", "METRICS_KEY", "ROUTES_KEY", "build_app"]
