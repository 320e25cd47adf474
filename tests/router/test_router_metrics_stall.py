"""A vLLM-like replica whose /metrics stops answering in time keeps its last load read
(load_metrics.py NOTE(scrape-failed)): the load guard goes on seeing it loaded and sends
requests elsewhere. Before, a scrape that timed out set its load to 0, silently, so the
replica too busy to answer became the least loaded one and drew the next requests.

The warning comes once when a replica's scrapes start failing, an info line when they answer
again, and a warning again when they fail again, never one per scrape. Replicas are real
aiohttp servers on 127.0.0.1 (an empty 200 /health, as vLLM's)."""

from __future__ import annotations

import asyncio
import logging

import aiohttp
from aiohttp import web

from kvpool.router.proxy import Router
from kvpool.router.replicas import ReplicaSet
from kvpool.router.scoring import LoadGuard
from tests.router.helpers import LOOKUP_TIMEOUT, apps_served, served
from tests.router.kv_events import until
from tests.router.test_router_metrics_load import vllm_text

SCRAPE_TIMEOUT = 0.3  # seconds: a slow /metrics fails a scrape within this


class Engine:
    """One vLLM-like replica: ``running`` is its load on /metrics; ``slow()`` makes /metrics
    wait until ``fast()`` (each scrape meanwhile times out)."""

    def __init__(self, n: int, running: int) -> None:
        self.n, self.running = n, running
        self.held: asyncio.Event | None = None

    def slow(self) -> None:
        self.held = asyncio.Event()

    def fast(self, running: int) -> None:
        self.running = running
        if self.held is not None:
            self.held.set()
            self.held = None

    def app(self) -> web.Application:
        async def health(_request):
            return web.Response(status=200)

        async def metrics(_request):
            if self.held is not None:
                await self.held.wait()
            return web.Response(body=vllm_text((self.running,), (0,)), content_type="text/plain")

        async def complete(_request):
            return web.json_response({"object": "text_completion", "served_by": self.n})

        app = web.Application()
        app.router.add_get("/health", health)
        app.router.add_get("/metrics", metrics)
        app.router.add_post("/v1/completions", complete)
        return app


async def served_by(url: str, n: int) -> list[int]:
    async with aiohttp.ClientSession() as s:
        out = []
        for _ in range(n):
            async with s.post(url + "/v1/completions", json={"prompt": "hi"}) as r:
                assert r.status == 200
                out.append((await r.json())["served_by"])
        return out


def said(caplog, what: str) -> int:
    return sum(what in m for m in caplog.messages)


async def test_a_slow_metrics_keeps_the_last_load_and_is_said_once_per_outage(caplog):
    busy, idle = Engine(0, running=7), Engine(1, running=1)
    caplog.set_level(logging.INFO, logger="kvpool.router")
    async with apps_served(busy.app(), idle.app()) as urls:
        rs = ReplicaSet(urls, interval=0.05, timeout=2.0, metrics_timeout=SCRAPE_TIMEOUT)
        router = Router(rs, lookup_timeout=LOOKUP_TIMEOUT, guard=LoadGuard(0, 1.0))
        try:
            async with served(router) as url:
                await outages(rs, busy, url, caplog)
        finally:
            busy.fast(running=0)  # held scrapes' handlers end: the servers stop at once
    warned = [m for m in caplog.messages if "did not answer within" in m]
    assert len(warned) == 2 and "load stays 7" in warned[0] and "load stays 4" in warned[1]
    assert all(urls[0] in m for m in warned)


async def outages(rs: ReplicaSet, busy: Engine, url: str, caplog) -> None:
    """Loads read; ``busy``'s /metrics slow (load kept, routing away, said once); answering
    again (said); slow again (said again)."""
    a, b = rs.replicas
    await until(lambda: (a.load, b.load) == (7, 1), "both loads read")
    busy.slow()
    await until(lambda: rs.scrapes.failed >= 3, "three failed scrapes")
    assert a.load == 7  # the last one read, not 0
    assert await served_by(url, 4) == [1, 1, 1, 1]  # still the less loaded one
    assert said(caplog, "did not answer within 0.3 s") == 1
    busy.fast(running=4)
    await until(lambda: a.load == 4, "the load read again")
    assert said(caplog, "its /metrics answers again") == 1
    failed = rs.scrapes.failed
    busy.slow()
    await until(lambda: rs.scrapes.failed >= failed + 2, "two more failed scrapes")
    assert a.load == 4
