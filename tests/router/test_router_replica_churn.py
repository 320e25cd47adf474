"""A router whose replicas come and go keeps no state per URL it ever had (load_metrics.py
NOTE(replica-churn)): once a removed replica's beats end, what was said of it goes (its
/metrics failing, its /metrics unusable, its beat raising), and a URL that comes back is
said again, as a new replica. Before, each URL stayed in those sets for the life of the
process, and a replica back on an old URL was never warned about again. Replicas are real
aiohttp servers on 127.0.0.1; the beats run on a real aiohttp session."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import aiohttp
from aiohttp import web

from kvpool.router.replicas import ReplicaSet
from tests.router.helpers import apps_served
from tests.router.kv_events import until


def _vllm_like(metrics_status: int) -> web.Application:
    """An empty 200 /health (as vLLM's) and a /metrics answering ``metrics_status``."""
    async def health(_request):
        return web.Response(status=200)

    async def metrics(_request):
        return web.Response(status=metrics_status, text="no\n")

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_get("/metrics", metrics)
    return app


@contextlib.asynccontextmanager
async def _beaten(rs: ReplicaSet, session: aiohttp.ClientSession):
    task = asyncio.create_task(rs.run(session))
    try:
        yield
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def _said(caplog, what: str, url: str) -> int:
    return sum(what in m and url in m for m in caplog.messages)


async def test_a_removed_replicas_metrics_state_goes_and_comes_back_new(caplog):
    """A failing /metrics (503) and an unusable one (404): each said once; removed and
    drained, nothing is kept of either URL; added again, each is said again."""
    caplog.set_level(logging.INFO, logger="kvpool.router")
    async with apps_served(_vllm_like(503), _vllm_like(404)) as urls, \
            aiohttp.ClientSession() as session:
        failing, unusable = urls
        rs = ReplicaSet(urls, interval=0.02, timeout=2.0, metrics_timeout=2.0)
        async with _beaten(rs, session):
            await until(lambda: rs.scrapes.failed >= 2 and rs.scrapes.done >= 4, "scrapes")
            assert rs.scrapes.failing == {failing}
            for u in urls:
                rs.remove(u)
            await until(lambda: not rs.beats, "the removed replicas' beats to end")
            assert not rs.scrapes.failing and not rs.scrapes.logged
            done = rs.scrapes.done
            for u in urls:
                rs.add(u)
            await until(lambda: rs.scrapes.done >= done + 4, "scrapes of the URLs back")
    assert _said(caplog, "its /metrics answered 503", failing) == 2
    assert _said(caplog, "its /metrics answered 404", unusable) == 2


async def test_a_removed_replicas_beat_bug_goes_and_comes_back_new(caplog):
    """A beat that raises (here: on a session closed under the beats, a RuntimeError no
    beat expects) is logged once per replica; removed, its URL is forgotten, and the same
    URL added again is a new replica whose failing beat is logged again."""
    caplog.set_level(logging.INFO, logger="kvpool.router")
    async with apps_served(_vllm_like(200)) as urls:
        url = urls[0]
        session = aiohttp.ClientSession()
        rs = ReplicaSet(urls, interval=0.02, timeout=2.0)
        async with _beaten(rs, session):
            await session.close()
            await until(lambda: url in rs.beat_bugs, "a beat that raised")
            rs.remove(url)
            await until(lambda: not rs.beats, "the removed replica's beats to end")
            assert rs.beat_bugs == set()
            rs.add(url)
            await until(lambda: url in rs.beat_bugs, "the new replica's beat raising")
    assert _said(caplog, "a /health beat of", url) == 2
