"""The replicas' operator routes through the router's passthrough
(kvpool/router/operator_routes.py NOTE(operator-routes)): with credentials configured, a
caller without them gets the 404 of an unknown route for /v1/kvpool/*, /kv_event_sources and
the dev routes, and no replica sees the request; the holders of the admin token or the replica
key, and everyone on a router with neither, reach them; vLLM's public routes pass for all.
The router is built from ``kvpool router`` flags over a real aiohttp replica on 127.0.0.1."""

from __future__ import annotations

import aiohttp
from aiohttp import web

from kvpool.router.cli import REPLICA_API_KEY_ENV
from kvpool.router.operator_routes import is_operator_route
from tests.router.helpers import apps_served, served
from tests.router.test_router_health_view import ADMIN, HEALTHY, KEY, router_for

OPERATOR = [("GET", "/v1/kvpool/kv_events"), ("GET", "/kv_event_sources"),
            ("POST", "/v1/kvpool/lookup"), ("POST", "/reset_prefix_cache"),
            ("GET", "//v1/kvpool/kv_events"), ("GET", "/V1/KVPOOL/kv_events"),
            ("GET", "/v1/%6bvpool/kv_events"), ("GET", "/kv_event_sources/")]
PUBLIC = [("GET", "/v1/models"), ("POST", "/tokenize"), ("GET", "/version")]


def recording_replica(seen: list[str]) -> web.Application:
    """A replica answering 200 ``{"served": path}`` on every route, recording each but
    /health."""
    async def any_route(request: web.Request) -> web.Response:
        if request.path == "/health":
            return web.Response(body=HEALTHY, content_type="application/json")
        seen.append(request.path)
        return web.json_response({"served": request.path})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", any_route)
    return app


async def call(s, url, method, path, token=None) -> tuple[int, dict]:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with s.request(method, url + path, headers=headers, json={"prompt": "x"}) as r:
        return r.status, await r.json()


async def test_operator_routes_reach_replicas_only_with_the_routers_credentials(
        tmp_path, monkeypatch):
    monkeypatch.delenv(REPLICA_API_KEY_ENV, raising=False)
    (tmp_path / "token").write_text(ADMIN + "\n")
    seen: list[str] = []
    async with apps_served(recording_replica(seen)) as urls:
        r = router_for(urls, "--admin-token-file", str(tmp_path / "token"),
                       "--replica-api-key", KEY)
        async with served(r) as url, aiohttp.ClientSession() as s:
            for method, path in OPERATOR:
                for anon in (None, "wrong"):
                    status, body = await call(s, url, method, path, anon)
                    assert status == 404, (path, body)
                    assert body["error"]["code"] == "not_found"
                    assert "127.0.0.1" not in str(body)
            assert seen == []  # none reached the replica
            for token in (ADMIN, KEY):
                assert (await call(s, url, "GET", "/v1/kvpool/kv_events", token))[0] == 200
            for method, path in PUBLIC:
                assert await call(s, url, method, path) == (200, {"served": path})
    assert seen == ["/v1/kvpool/kv_events"] * 2 + [p for _, p in PUBLIC]


async def test_a_router_without_keys_passes_operator_routes(monkeypatch):
    """No key configured: nothing on the router is guarded (a trusted network)."""
    monkeypatch.delenv(REPLICA_API_KEY_ENV, raising=False)
    seen: list[str] = []
    async with apps_served(recording_replica(seen)) as urls:
        async with served(router_for(urls)) as url, aiohttp.ClientSession() as s:
            assert await call(s, url, "GET", "/v1/kvpool/kv_events") == (
                200, {"served": "/v1/kvpool/kv_events"})


def test_operator_paths_are_told_from_public_ones():
    assert all(is_operator_route(p) for p in ("/v1/kvpool/lookup", "/v1/kvpool",
                                              "/reset_mm_cache", "//kv_event_sources"))
    assert not any(is_operator_route(p) for p in ("/v1/models", "/v1/kvpoolx", "/load",
                                                  "/v1/chat/completions", "/"))
