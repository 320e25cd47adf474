"""Replicas whose /health answers 200 with an empty body (vLLM, SGLang): the router reads
their running + waiting requests from their Prometheus /metrics (load_metrics.py
NOTE(metrics-load)). The replicas are real aiohttp servers on 127.0.0.1 with no lookup route,
as vLLM has none: every hit is 0, so the choice is the load guard's or round robin."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import aiohttp
import pytest
from aiohttp import web

from kvpool.router.load_metrics import MAX_METRICS_BYTES, load_from_metrics
from kvpool.router.proxy import Router
from kvpool.router.replicas import ReplicaSet
from kvpool.router.scoring import LoadGuard
from tests.router.helpers import LOOKUP_TIMEOUT, apps_served, decisions, metrics, served
from tests.router.kv_events import until


def vllm_text(running: tuple[int, ...], waiting: tuple[int, ...]) -> bytes:
    """vLLM-format /metrics with one series per model for each gauge, among other families."""
    lines = ["# HELP vllm:num_requests_running Number of requests in model execution batches.",
             "# TYPE vllm:num_requests_running gauge"]
    lines += [f'vllm:num_requests_running{{engine="0",model_name="m{i}"}} {n}.0'
              for i, n in enumerate(running)]
    lines += ["# HELP vllm:num_requests_waiting Number of requests waiting to be processed.",
              "# TYPE vllm:num_requests_waiting gauge"]
    lines += [f'vllm:num_requests_waiting{{engine="0",model_name="m{i}"}} {n}.0'
              for i, n in enumerate(waiting)]
    lines += ["# TYPE vllm:kv_cache_usage_perc gauge",
              'vllm:kv_cache_usage_perc{engine="0",model_name="m0"} 0.75',
              "# TYPE vllm:e2e_request_latency_seconds histogram",
              *(f'vllm:e2e_request_latency_seconds_bucket{{le="{b}",model_name="m0"}} 3.0'
                for b in (0.3, 0.5, 1.0, "+Inf"))]
    return ("\n".join(lines) + "\n").encode()


SGLANG = (b'# TYPE sglang:num_running_reqs gauge\n'
          b'sglang:num_running_reqs{model_name="m",tp_rank="0"} 2.0\n'
          b'sglang:num_running_reqs{model_name="m",tp_rank="1"} 3.0\n'
          b'# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs{model_name="m"} 6.0\n'
          b'# TYPE sglang:token_usage gauge\nsglang:token_usage{model_name="m"} 0.28\n')
GARBAGE = b"\x00\xffnot prometheus\nvllm:num_requests_running{model_name=oops 3\n"


def test_the_gauges_are_summed_over_their_series():
    assert load_from_metrics(vllm_text((3, 2), (4, 0))) == 9
    assert load_from_metrics(SGLANG) == 11
    assert load_from_metrics(b"vllm:num_requests_running_total 5\nother 1\n") is None
    assert load_from_metrics(b"vllm:num_requests_waiting NaN\n") is None
    assert load_from_metrics(b"vllm:num_requests_waiting -1\n") is None
    assert load_from_metrics(GARBAGE) is None
    assert load_from_metrics(b"") is None


@contextlib.asynccontextmanager
async def vllm_like(*metrics_answers: list):
    """One replica per [status, body] in ``metrics_answers`` (the test may change it while it
    runs; status None: no /metrics route, 404; body "endless": a stream without end; body
    "hang": no answer): an empty 200 /health, and /v1/completions naming its server."""
    apps, hits, release = [], [0] * len(metrics_answers), asyncio.Event()

    async def health(_request):
        return web.Response(status=200)

    for n, answer in enumerate(metrics_answers):
        app = web.Application()
        app.router.add_get("/health", health)
        app.router.add_post("/v1/completions", _completions(n))
        if answer[0] is not None:
            app.router.add_get("/metrics", _metrics(answer, hits, n, release))
        apps.append(app)
    async with apps_served(*apps) as urls:
        try:
            yield urls, hits
        finally:
            release.set()  # a hanging /metrics answers, so its server stops at once


def _completions(n: int):
    async def complete(_request):
        return web.json_response({"object": "text_completion", "served_by": n})
    return complete


def _metrics(answer: list, hits: list, n: int, release: asyncio.Event):
    async def handle(request: web.Request) -> web.StreamResponse:
        hits[n] += 1
        if answer[1] == "hang":
            await release.wait()
            return web.Response(status=503)
        if answer[1] != "endless":
            return web.Response(status=answer[0], body=answer[1], content_type="text/plain")
        resp = web.StreamResponse()
        await resp.prepare(request)
        line = b'vllm:num_requests_running{model_name="' + b"x" * 4000 + b'"} 1\n'
        while True:  # ends when the router closes the connection (a write then raises)
            await resp.write(line)
    return handle


def _router(urls, **kw) -> Router:
    rs = ReplicaSet(urls, interval=kw.pop("interval", 0.05), timeout=kw.pop("timeout", 2.0))
    return Router(rs, lookup_timeout=LOOKUP_TIMEOUT, guard=LoadGuard(0, 1.0), **kw)


async def _served_by(s, url) -> int:
    async with s.post(url + "/v1/completions", json={"prompt": "hi", "max_tokens": 1}) as r:
        assert r.status == 200
        return (await r.json())["served_by"]


async def test_the_load_follows_the_replicas_metrics_and_routing_prefers_the_less_loaded():
    """Hits tie at 0 (no lookup route): with the loads of their /metrics, every request goes
    to the less loaded replica, and when the numbers change the router follows. Blind to them
    (load 0 everywhere) it went round robin over both."""
    a, b = [200, vllm_text((3, 2), (4,))], [200, vllm_text((1,), (0,))]
    async with vllm_like(a, b) as (urls, _), served(r := _router(urls)) as url:
        ra, rb = r.replicas.replicas
        await until(lambda: (ra.load, rb.load) == (9, 1), "the loads of both /metrics")
        async with aiohttp.ClientSession() as s:
            assert [await _served_by(s, url) for _ in range(4)] == [1, 1, 1, 1]
            a[1], b[1] = vllm_text((0,), (0,)), vllm_text((5, 1), (2, 0))
            await until(lambda: (ra.load, rb.load) == (0, 8), "the new loads")
            assert [await _served_by(s, url) for _ in range(4)] == [0, 0, 0, 0]
            assert decisions(await metrics(s, url), "load") == 8


async def test_an_sglang_replica_is_read_by_its_own_gauge_names():
    async with vllm_like([200, SGLANG]) as (urls, _), served(r := _router(urls)):
        await until(lambda: r.replicas.replicas[0].load == 11, "sglang's running + queued")


@pytest.mark.parametrize("answer, said", [
    ([None, b""], "answered 404"), ([200, GARBAGE], "do not parse"),
    ([200, b"up 1\n"], "do not parse"),
    ([200, "endless"], f"longer than {MAX_METRICS_BYTES} bytes")])
async def test_a_replica_without_usable_metrics_keeps_the_routers_own_count(
        answer, said, caplog):
    """404, garbage, no known gauge, or a /metrics without end (read up to the bound, then
    dropped: its scrapes go on completing): load 0 as before, and one warning saying how to
    fix it however many scrapes fail."""
    with caplog.at_level(logging.INFO, logger="kvpool.router"):
        async with vllm_like(answer) as (urls, hits), served(r := _router(urls)):
            await until(lambda: r.replicas.scrapes.done >= 3, "three scrapes")
            assert r.replicas.replicas[0].load == 0
            assert r.replicas.healthy() == r.replicas.replicas
    warned = [m for m in caplog.messages if "/metrics" in m and "load guard" in m]
    assert len(warned) == 1 and said in warned[0] and "--enable-metrics" in warned[0]


async def test_a_hanging_metrics_never_delays_the_beats():
    """A /metrics that never answers: its one scrape waits out the timeout (2 s) while the
    /health beats (every 0.05 s) go on, and no second scrape of it starts meanwhile."""
    async with vllm_like([200, "hang"]) as (urls, hits), served(r := _router(urls)):
        start = r.replicas.polls
        await until(lambda: r.replicas.polls >= start + 10, "ten more beats")
        assert r.replicas.scrapes.done == 0
        assert hits == [1]


async def test_a_health_carrying_its_load_is_not_scraped():
    """kvpool serve's /health carries its load: its /metrics is never read."""
    seen = []

    async def health(_request):
        return web.json_response({"status": "ok", "num_running": 2, "num_waiting": 1})

    async def scraped(_request):
        seen.append(1)
        return web.Response(text="vllm:num_requests_running 7\n")

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_get("/metrics", scraped)
    async with apps_served(app) as urls, served(r := _router(urls)):
        start = r.replicas.polls
        await until(lambda: r.replicas.polls >= start + 5, "five beats")
        assert r.replicas.replicas[0].load == 3
        assert seen == []
