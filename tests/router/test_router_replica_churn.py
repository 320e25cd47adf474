"""A router whose replicas come and go keeps no state per URL it ever had (load_metrics.py
NOTE(replica-churn)): once a removed replica's beats end, what was said of it goes (its
/metrics failing, its /metrics unusable, its beat raising), and a URL that comes back is
said again, as a new replica: also when it comes back at once, while the replica removed
from it still drains (an autoscaler replacing a pod on the same IP), and then the two Replica
objects of that URL say one /health failure once, not once each. Before, each URL stayed in
those sets for the life of the process, and a replica back on an old URL was never warned
about again. Replicas are real aiohttp servers on 127.0.0.1; the beats run on a real aiohttp
session."""

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


async def test_a_url_back_at_once_is_said_again_as_a_new_replica(caplog):
    """Removed and added back at once (the old member's beats not ended yet): the new member
    starts with nothing said of its URL, so its failing /metrics is warned about again."""
    caplog.set_level(logging.INFO, logger="kvpool.router")
    async with apps_served(_vllm_like(503)) as urls, aiohttp.ClientSession() as session:
        url = urls[0]
        rs = ReplicaSet(urls, interval=0.02, timeout=2.0, metrics_timeout=2.0)
        async with _beaten(rs, session):
            await until(lambda: rs.scrapes.failed >= 1, "a failing scrape")
            rs.remove(url)
            new = rs.add(url)
            await until(lambda: list(rs.beats) == [new], "the removed replica's beats to end")
            failed = rs.scrapes.failed
            await until(lambda: rs.scrapes.failed >= failed + 2, "the new member's scrapes")
    assert _said(caplog, "its /metrics answered 503", url) == 2


def _health_from(state: dict) -> web.Application:
    """/health answers ``state["status"]`` (empty), /metrics an engine's load gauges."""
    async def health(_request):
        return web.Response(status=state["status"])

    async def metrics(_request):
        return web.Response(text="vllm:num_requests_running 0\nvllm:num_requests_waiting 0\n")

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_get("/metrics", metrics)
    return app


async def test_a_draining_replica_leaves_its_url_to_the_member(caplog):
    """Removed with a request in flight and added back: both Replica objects of the URL are
    beaten, but a /health turn (500, then 200 again) is said once, by the member."""
    caplog.set_level(logging.INFO, logger="kvpool.router")
    state = {"status": 200}
    async with apps_served(_health_from(state)) as urls, aiohttp.ClientSession() as session:
        url = urls[0]
        rs = ReplicaSet(urls, interval=0.02, timeout=2.0)
        old = rs.replicas[0]
        async with _beaten(rs, session), old.lease():
            await until(lambda: old in rs.beats, "the beats to start")
            rs.remove(url)
            new = rs.add(url)
            await until(lambda: new.healthy, "the new member's passing beat")
            state["status"] = 500
            await until(lambda: not new.healthy and not old.healthy, "both to fail a beat")
            state["status"] = 200
            await until(lambda: new.healthy and old.healthy, "both to pass a beat")
            assert old in rs.beats  # still draining, still beaten
    assert _said(caplog, "is unhealthy: /health answered 500", url) == 1
    assert _said(caplog, "is healthy", url) == 2  # the new member's first beat, and the turn
