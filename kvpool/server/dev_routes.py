"""vLLM's development cache routes, which its benchmark sweep calls between runs
(docs/architecture.md "Development routes")::

    POST /reset_prefix_cache?reset_running_requests=B&reset_external=B   -> {"success": bool}
    POST /reset_mm_cache         -> 200, empty body (kvpool caches no multimodal input)
    POST /reset_encoder_cache    -> 200, empty body (nor any encoder output)

They exist only where the server was started with ``--dev-routes`` or with
``VLLM_SERVER_DEV_MODE=1`` in its environment (vLLM's switch, read as vLLM reads it: an
integer, nonzero is on); a security warning naming them is logged once when they are
registered. Without them the paths are 404, as in vLLM. Like vLLM's they sit outside /v1, so
the API key does not guard them: only trusted clients should reach such a server.

``reset_prefix_cache`` answers ``{"success": false}`` (nothing dropped) while any request
holds a block, unless ``reset_running_requests`` preempts them all for recompute first.
NOTE(shared-tier): ``reset_external`` cannot reach the Redis prefix tier: every replica of
the model reads and writes the same keys, so dropping them would take the other replicas'
hits (and race their writes). It is left alone, said once in the log, and the answer is the
local reset's, as vLLM answers for a connector that does not reset its store.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from aiohttp import web

from kvpool.errors import ConfigError
from kvpool.server.engine_client import EngineClient
from kvpool.server.query_bool import query_bool  # NOTE(query-bool)

__all__ = ["DEV_MODE_ENV", "DEV_ROUTES", "DevRoutes", "dev_mode"]

log = logging.getLogger(__name__)

DEV_MODE_ENV = "VLLM_SERVER_DEV_MODE"
DEV_ROUTES = ("/reset_prefix_cache", "/reset_mm_cache", "/reset_encoder_cache")


def dev_mode(environ: Mapping[str, str]) -> bool:
    """Whether ``VLLM_SERVER_DEV_MODE`` turns the routes on: an integer, nonzero is on;
    anything else is a ConfigError naming it (vLLM fails to start on it too)."""
    value = environ.get(DEV_MODE_ENV, "0")
    try:
        return bool(int(value))
    except ValueError:
        raise ConfigError(f"{DEV_MODE_ENV}={value!r}: use an integer (1: on, 0: off)") from None


class DevRoutes:
    """The three routes over one engine."""

    def __init__(self, engine: EngineClient) -> None:
        self.engine = engine
        self._told_shared_tier = False

    @classmethod
    def register(cls, app: web.Application, engine: EngineClient) -> DevRoutes:
        routes = cls(engine)
        app.router.add_post("/reset_prefix_cache", routes.reset_prefix_cache)
        app.router.add_post("/reset_mm_cache", routes.reset_nothing)
        app.router.add_post("/reset_encoder_cache", routes.reset_nothing)
        log.warning("SECURITY WARNING: development routes are on (--dev-routes or %s=1): "
                    "POST %s. Anyone who reaches this port may call them, API key or not; "
                    "never in production", DEV_MODE_ENV, ", ".join(DEV_ROUTES))
        return routes

    async def reset_prefix_cache(self, request: web.Request) -> web.Response:
        running = query_bool(request, "reset_running_requests")
        external = query_bool(request, "reset_external")
        log.info("resetting the prefix cache (reset_running_requests=%s)", running)
        success = await self.engine.reset_prefix_cache(running)
        if success:
            log.info("prefix cache reset")
        else:
            log.warning("prefix cache not reset: requests or transfers hold blocks; retry, "
                        "or pass reset_running_requests=true")
        if external:
            self._leave_shared_tier()
        return web.json_response({"success": bool(success)})

    def _leave_shared_tier(self) -> None:
        """NOTE(shared-tier): said once per server, only where there is such a tier."""
        if self.engine.remote_link is None or self._told_shared_tier:
            return
        self._told_shared_tier = True
        log.warning("reset_external: the Redis prefix tier is shared by every replica and is "
                    "left as it is; only this replica's cache was reset")

    async def reset_nothing(self, request: web.Request) -> web.Response:
        """/reset_mm_cache and /reset_encoder_cache: kvpool keeps neither cache. The answer's
        headers are those of vLLM's Starlette ``Response(status_code=200)``: Content-Length 0
        and no Content-Type (aiohttp adds none to an empty body since aio-libs/aiohttp#8858,
        2024; releases before it added application/octet-stream)."""
        log.info("%s: kvpool keeps no such cache", request.path)
        return web.Response(status=200)
