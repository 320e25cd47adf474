"""The router's GET /health with credentials configured (kvpool/router/proxy.py
NOTE(health-view)): every caller gets the status and its code, only the holders of the
router's admin token or the replicas' API key get the replica URLs. The router is built from
``kvpool router`` flags (cli.build_router) over real aiohttp replicas on 127.0.0.1."""

from __future__ import annotations

import argparse

import aiohttp
from aiohttp import web

from kvpool.router.cli import REPLICA_API_KEY_ENV, add_arguments, build_router
from tests.router.helpers import apps_served, served

ADMIN = "adm1n-t0ken"
KEY = "replica-key"
HEALTHY = b'{"status": "ok", "num_running": 0, "num_waiting": 0}'


def replica(status: int) -> web.Application:
    """A replica whose /health answers ``status`` (200: healthy)."""
    async def health(_: web.Request) -> web.Response:
        return web.Response(status=status, body=HEALTHY, content_type="application/json")

    app = web.Application()
    app.router.add_get("/health", health)
    return app


def router_for(urls, *flags: str):
    args = add_arguments(argparse.ArgumentParser()).parse_args(
        [*(a for u in urls for a in ("--replica", u)), "--health-interval", "0.2", *flags])
    return build_router(args)


async def get_health(s, url, token: str | None = None) -> tuple[int, dict, str]:
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with s.get(url + "/health", headers=headers) as r:
        text = await r.text()
        return r.status, await r.json(), text


async def test_health_names_replicas_only_to_credential_holders(tmp_path, monkeypatch):
    monkeypatch.delenv(REPLICA_API_KEY_ENV, raising=False)
    (tmp_path / "token").write_text(ADMIN + "\n")
    async with apps_served(replica(200), replica(200), replica(503)) as urls:
        r = router_for(urls, "--admin-token-file", str(tmp_path / "token"),
                       "--replica-api-key", KEY)
        async with served(r) as url, aiohttp.ClientSession() as s:
            for anon in (None, "wrong", ADMIN + "x", ""):
                status, body, text = await get_health(s, url, anon)
                assert (status, body) == (200, {"status": "ok", "healthy_replicas": 2})
                assert "127.0.0.1" not in text and all(u not in text for u in urls)
            async with s.get(url + "/health", headers={"Authorization": ADMIN}) as resp:
                assert "healthy" not in await resp.json()  # the token without "Bearer "
            for token in (ADMIN, KEY):
                status, body, _ = await get_health(s, url, token)
                assert (status, body) == (200, {"status": "ok", "healthy": urls[:2]})
            async with s.get(url + "/health", headers={"Authorization": "bearer " + KEY}) as r:
                assert (await r.json())["healthy"] == urls[:2]  # the scheme in any case


async def test_health_status_code_is_the_same_for_every_caller(monkeypatch):
    monkeypatch.delenv(REPLICA_API_KEY_ENV, raising=False)
    async with apps_served(replica(503)) as urls:
        async with served(router_for(urls, "--replica-api-key", KEY)) as url, \
                aiohttp.ClientSession() as s:
            assert (await get_health(s, url))[:2] == (
                503, {"status": "unavailable", "healthy_replicas": 0})
            assert (await get_health(s, url, KEY))[:2] == (
                503, {"status": "unavailable", "healthy": []})


async def test_a_router_without_keys_lists_replicas_to_everyone(monkeypatch):
    """No key configured: nothing on this router is guarded (a trusted network), and /health
    answers as it always has."""
    monkeypatch.delenv(REPLICA_API_KEY_ENV, raising=False)
    async with apps_served(replica(200)) as urls:
        async with served(router_for(urls)) as url, aiohttp.ClientSession() as s:
            assert (await get_health(s, url))[:2] == (200, {"status": "ok", "healthy": urls})
