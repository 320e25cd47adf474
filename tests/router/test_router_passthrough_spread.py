"""The router's other routes (GET /v1/models, POST /tokenize, /detokenize: proxy.py
``passthrough``) are placed by load alone, round robin over the healthy replicas while their
loads are even. Before, the first healthy replica answered every one of them: a fleet's model
polls and tokenize traffic all landed on one replica.

The replicas are real aiohttp servers on 127.0.0.1 answering /health and the three routes with
their own name."""

from __future__ import annotations

import contextlib

import aiohttp
from aiohttp import web

from tests.router.helpers import apps_served, router

HEALTH = b'{"status": "ok", "num_running": 0, "num_waiting": 0}'


def replica(name: str) -> web.Application:
    async def health(_):
        return web.Response(body=HEALTH, content_type="application/json")

    async def named(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({"served_by": name, "path": request.path})

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", named)
    app.router.add_post("/tokenize", named)
    app.router.add_post("/detokenize", named)
    return app


@contextlib.asynccontextmanager
async def fleet(n: int):
    async with apps_served(*(replica(f"r{i}") for i in range(n))) as urls, \
            router(urls) as (_, url), aiohttp.ClientSession() as s:
        yield s, url


async def served_by(s: aiohttp.ClientSession, url: str, method: str, path: str) -> str:
    body = {"prompt": "hi"} if path == "/tokenize" else {"tokens": [1]}
    async with s.request(method, url + path, json=None if method == "GET" else body) as r:
        out = await r.json()
        assert r.status == 200, out
        assert out["path"] == path
        return out["served_by"]


async def test_other_routes_are_spread_over_the_healthy_replicas():
    async with fleet(3) as (s, url):
        for method, path in (("GET", "/v1/models"), ("POST", "/tokenize"),
                             ("POST", "/detokenize")):
            names = [await served_by(s, url, method, path) for _ in range(6)]
            assert sorted(names) == ["r0", "r0", "r1", "r1", "r2", "r2"], (path, names)
