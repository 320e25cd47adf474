"""``GET /load``: vLLM's server load, ``{"server_load": N}``.

NOTE(server-load): vLLM serves ``/load`` always; with ``--enable-server-load-tracking`` N is
the number of requests inside the generation routes (completions, chat, batch chat,
SageMaker's /invocations, the Responses API's three, Anthropic's Messages API's two), from the handler's start until it returns (a stream:
its last chunk written), else it stays 0. A load balancer polls it to pick the least busy
replica. Here the count is one middleware, innermost (after auth and the tenant check, as
vLLM counts only what reached a handler); it counts the route a request matched, so an unknown
path never counts. Unlike vLLM's, a request is taken off exactly once, whether it ends, fails
or its client leaves.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from aiohttp import web

__all__ = ["LOAD_PATH", "TRACKED_ROUTES", "ServerLoad"]

LOAD_PATH = "/load"
# the routes vLLM's load counts that this server has (its --enable-server-load-tracking)
TRACKED_ROUTES = frozenset({"/v1/completions", "/v1/chat/completions",
                            "/v1/chat/completions/batch", "/invocations", "/v1/responses",
                            "/v1/responses/{response_id}",
                            "/v1/responses/{response_id}/cancel",
                            "/v1/messages", "/v1/messages/count_tokens"})

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class ServerLoad:
    """The in-flight count of the tracked routes (0 forever when ``tracking`` is off)."""

    def __init__(self, tracking: bool = False) -> None:
        self.tracking = bool(tracking)
        self.count = 0

    def register(self, app: web.Application) -> None:
        app.router.add_get(LOAD_PATH, self.load)

    async def load(self, request: web.Request) -> web.Response:
        return web.json_response({"server_load": self.count})

    def middleware(self) -> Callable[[web.Request, Handler], Awaitable[web.StreamResponse]]:
        @web.middleware
        async def count_load(request: web.Request, handler: Handler) -> web.StreamResponse:
            resource = request.match_info.route.resource
            if resource is None or resource.canonical not in TRACKED_ROUTES:
                return await handler(request)
            self.count += 1
            try:
                return await handler(request)
            finally:
                self.count -= 1
        return count_load
