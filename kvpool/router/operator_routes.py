"""The replicas' operator routes, which the router's passthrough relays only to its credentials.

NOTE(operator-routes): the passthrough relays every route the router does not answer itself to
a replica, so any client read each replica's kvpool-internal routes through it: its id (a pod
name), ZMQ endpoints, tokenizer path and load (``GET /v1/kvpool/kv_events``, vLLM's ``GET
/kv_event_sources``), a cache probe that touches no cache (``POST /v1/kvpool/lookup``), and,
where the replicas run with --dev-routes, a reset of their prefix caches (``POST
/reset_prefix_cache``, ...), while /health hid the same topology (proxy.py NOTE(health-view)).
These routes are for the router and operators: a request for one that carries none of the
router's credentials (``Authorization: Bearer`` the --admin-token-file token or the
--replica-api-key: /health's rule) gets the 404 of an unknown route, OpenAI error JSON, and
reaches no replica. vLLM's public API routes (/v1/models, /tokenize, /load, /version, ...) pass
as before. A router with neither key guards nothing (a trusted network): all routes pass, as
/health lists the URLs to anyone there (docs/architecture.md, Router).
"""

from __future__ import annotations

import re

from kvpool.server.dev_routes import DEV_ROUTES

__all__ = ["is_operator_route"]

# everything under /v1/kvpool/ (the lookup, the KV-event info, the admin API's own path when
# the API is off) and vLLM's KV-event sources route (kvpool/server/kv_events_route.py
# SOURCES_PATH; not imported: that module brings the serving app with it)
_PREFIX = "/v1/kvpool/"
_EXACT = frozenset({"/v1/kvpool", "/kv_event_sources", *DEV_ROUTES})
_SLASHES = re.compile(r"/{2,}")


def is_operator_route(path: str) -> bool:
    """Whether ``path`` (the request's decoded path) names an operator route, as a replica
    could read it: repeated slashes merged, a trailing slash and letter case ignored."""
    norm = _SLASHES.sub("/", path).lower()
    return norm.startswith(_PREFIX) or norm.rstrip("/") in _EXACT
