"""kvpool.server: the OpenAI-compatible aiohttp app over an AsyncEngine.

``kvpool.server.app.build_app(engine, api_key=...)`` gives the web.Application (routes, one
error middleware, auth, the engine's lifetime in cleanup_ctx); ``kvpool.server.serve.run_server(
config, ServeOptions(host=..., port=...))`` serves it with graceful shutdown; ``kvpool serve``
is ``serve.add_serve_args`` + ``serve.main``.

NOTE(lazy): nothing is imported here. The app pulls in the engine (torch, seconds to import);
the router imports only the HTTP edge modules (middleware, connections, json_body), and
``python -m kvpool.server.serve`` must run serve as a fresh module.
"""
