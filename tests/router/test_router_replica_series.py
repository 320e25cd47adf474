"""The router's /metrics shows each member replica as the router sees it (replicas.py
NOTE(replica-series)): the load it reported, healthy 0/1 and this router's requests in flight
there, labelled by its HOST:PORT; a removed replica's series go. Replicas are real aiohttp
servers on 127.0.0.1: one kvpool-like (/health carries its load), one vLLM-like (empty
/health, load on its /metrics), each holding its completions until the test lets them go."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web

from kvpool.router.membership import ADMIN_PATH, Membership
from kvpool.router.proxy import Router
from kvpool.router.replicas import ReplicaSet
from tests.router.helpers import metrics, served
from tests.router.test_router_metrics_load import vllm_text
from tests.server.test_prometheus import PROMETHEUS, prometheus, query, wait_for_value

SERIES = ("kvpool_router_replica_load", "kvpool_router_replica_healthy",
          "kvpool_router_replica_in_flight")
TOKEN = "replica-series-token"
AUTH = {"Authorization": f"Bearer {TOKEN}"}
DEADLINE = 10.0  # seconds a condition may take on a shared 2-core box


class Fake:
    """One replica: ``state`` is what it answers now (the test changes it), ``gate`` holds its
    completions, ``runner`` serves it (``stop`` takes it down: connections refused)."""

    def __init__(self, vllm: bool) -> None:
        self.vllm = vllm
        self.state = {"running": 0, "waiting": 0, "health": 200}
        self.gate = asyncio.Event()
        self.runner: web.AppRunner | None = None
        self.url = ""

    async def health(self, _request: web.Request) -> web.Response:
        if self.state["health"] != 200 or self.vllm:
            return web.Response(status=self.state["health"])
        return web.json_response({"status": "ok", "num_running": self.state["running"],
                                  "num_waiting": self.state["waiting"]})

    async def prom(self, _request: web.Request) -> web.Response:
        return web.Response(body=vllm_text((self.state["running"],), (self.state["waiting"],)),
                            content_type="text/plain")

    async def complete(self, _request: web.Request) -> web.Response:
        await self.gate.wait()
        return web.json_response({"object": "text_completion", "choices": []})

    @property
    def name(self) -> str:
        """Its label on the router's /metrics: HOST:PORT (replicas.py NOTE(replica-series))."""
        return self.url.removeprefix("http://")

    async def start(self) -> str:
        app = web.Application()
        app.router.add_get("/health", self.health)
        app.router.add_get("/metrics", self.prom)
        app.router.add_post("/v1/completions", self.complete)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", 0).start()
        self.url = f"http://127.0.0.1:{self.runner.addresses[0][1]}"
        return self.url

    async def stop(self) -> None:
        self.gate.set()
        if self.runner is not None:
            runner, self.runner = self.runner, None
            await runner.cleanup()


@contextlib.asynccontextmanager
async def fakes(*vllm: bool):
    reps = [Fake(v) for v in vllm]
    try:
        for f in reps:
            await f.start()
        yield reps
    finally:
        for f in reps:
            await f.stop()


def view(m: dict) -> dict[str, tuple[float, ...]]:
    """replica label -> (load, healthy, in flight) from a parsed router /metrics."""
    out: dict[str, list[float]] = {}
    for i, name in enumerate(SERIES):
        for labels, value in m.get(name, {}).items():
            out.setdefault(dict(labels)["replica"], [0.0] * 3)[i] = value
    return {url: tuple(v) for url, v in out.items()}


async def until_view(s, url: str, want: dict, what: str) -> None:
    """Scrape the router's /metrics until its per-replica view is ``want``."""
    end = time.monotonic() + DEADLINE
    while (seen := view(await metrics(s, url))) != want:
        assert time.monotonic() < end, f"{what}: the router's /metrics shows {seen}"
        await asyncio.sleep(0.02)


def router(urls: list[str], **membership) -> Router:
    rs = ReplicaSet(urls, interval=0.05, timeout=1.0, down_after=1.0)
    return Router(rs, lookup_timeout=1.0, policy="round_robin",
                  membership=Membership(rs, admin_token=TOKEN, **membership))


async def test_the_gauges_follow_the_replicas_load_health_and_in_flight_requests():
    """Loads from a /health and from a vLLM /metrics, this router's requests held open
    there, then new numbers: the router's /metrics follows each; a replica answering 503 and
    one stopped both read healthy 0 (their last reported load kept, in flight back to 0)."""
    async with fakes(False, True) as (a, b), served(r := router([a.url, b.url])) as url, \
            aiohttp.ClientSession() as s:
        a.state.update(running=2, waiting=1)
        b.state.update(running=5, waiting=4)
        await until_view(s, url, {a.name: (3, 1, 0), b.name: (9, 1, 0)}, "reported loads")
        held = [asyncio.create_task(s.post(url + "/v1/completions", json={"prompt": "x"}))
                for _ in range(3)]  # round robin: two to a, one to b
        await until_view(s, url, {a.name: (3, 1, 2), b.name: (9, 1, 1)}, "requests in flight")
        a.state.update(running=0, waiting=0)
        b.state.update(running=1, waiting=0)
        await until_view(s, url, {a.name: (0, 1, 2), b.name: (1, 1, 1)}, "the new loads")
        a.gate.set()
        b.gate.set()
        for resp in await asyncio.gather(*held):
            assert resp.status == 200
            resp.release()
        await until_view(s, url, {a.name: (0, 1, 0), b.name: (1, 1, 0)}, "requests done")
        a.state["health"] = 503
        await b.stop()
        await until_view(s, url, {a.name: (0, 0, 0), b.name: (1, 0, 0)}, "both down")
        assert r.replicas.healthy() == []
        a.state["health"] = 200
        await until_view(s, url, {a.name: (0, 1, 0), b.name: (1, 0, 0)}, "a back")


async def test_a_replica_removed_by_the_admin_api_leaves_metrics():
    async with fakes(False, True) as (a, b), served(router([a.url, b.url])) as url, \
            aiohttp.ClientSession() as s:
        a.state.update(running=1)
        await until_view(s, url, {a.name: (1, 1, 0), b.name: (0, 1, 0)}, "both members")
        async with s.delete(url + ADMIN_PATH, json={"url": b.url}, headers=AUTH) as resp:
            assert resp.status == 200, await resp.text()
        m = await metrics(s, url)
        assert view(m) == {a.name: (1, 1, 0)}
        assert not any(b.name in dict(labels).get("replica", "")
                       for series in m.values() for labels in series)
        async with s.post(url + ADMIN_PATH, json={"url": b.url}, headers=AUTH) as resp:
            assert resp.status == 201, await resp.text()
        await until_view(s, url, {a.name: (1, 1, 0), b.name: (0, 1, 0)}, "b back")


async def test_a_replica_dropped_from_the_replicas_file_leaves_metrics(tmp_path):
    path = tmp_path / "replicas.txt"
    async with fakes(False, False) as (a, b):
        path.write_text(f"{a.url}\n{b.url}\n")
        async with served(router([], replicas_file=str(path), poll=0.05)) as url, \
                aiohttp.ClientSession() as s:
            await until_view(s, url, {a.name: (0, 1, 0), b.name: (0, 1, 0)}, "the file's two")
            path.write_text(f"{a.url}\n")
            await until_view(s, url, {a.name: (0, 1, 0)}, "b dropped from the file")


@pytest.mark.skipif(not Path(PROMETHEUS).is_file(),
                    reason="the prometheus binary is not installed (apt-get install prometheus)")
@pytest.mark.timeout(60)
async def test_prometheus_scrapes_the_series_and_a_removed_replica_goes_stale(tmp_path):
    """A real Prometheus scraping the router every second reads each replica's gauges, and
    once a replica is removed its series are stale: an instant query returns nothing."""
    async with fakes(False, True) as (a, b), served(router([a.url, b.url])) as url, \
            aiohttp.ClientSession() as s, prometheus(url.removeprefix("http://"), tmp_path) as p:
        a.state.update(running=4, waiting=2)
        await wait_for_value(p, f'kvpool_router_replica_load{{replica="{a.name}"}}',
                             lambda v: v == 6, "a's load")
        await wait_for_value(p, f'kvpool_router_replica_healthy{{replica="{b.name}"}}',
                             lambda v: v == 1, "b healthy")
        async with s.delete(url + ADMIN_PATH, json={"url": b.url}, headers=AUTH) as resp:
            assert resp.status == 200
        gone = f'kvpool_router_replica_healthy{{replica="{b.name}"}}'
        end = time.monotonic() + 30
        while (await query(p, gone))["result"]:
            assert time.monotonic() < end, "b's series never went stale"
            await asyncio.sleep(0.25)
        assert (await query(p, f'kvpool_router_replica_in_flight{{replica="{a.name}"}}'))[
            "result"]
