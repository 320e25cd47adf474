"""vLLM's HTTP series (kvpool/metrics/http_series.py, kvpool/server/http_counting.py): real
requests to one real server on 127.0.0.1, counted by route template and status group, with
bounded labels, vLLM's exclusions, and a lean exposition equal to prometheus_client's."""

from __future__ import annotations

import asyncio
import re
import uuid

import aiohttp
import pytest
import pytest_asyncio
from aiohttp.test_utils import TestServer
from prometheus_client import CollectorRegistry, generate_latest

from kvpool.metrics.http_series import HTTP_METRIC_NAMES, HttpSeries
from kvpool.server.app import GATE_KEY, build_app
from tests.configs import SERVE_LIMITS, engine_config
from tests.server.grafana import dashboard_exprs, load_dashboard, plain
from tests.server.helpers import Running, parse_metrics, scrape
from tests.torch_threads import one_torch_thread  # noqa: F401 (autouse)

MODULE_LOOP = pytest.mark.asyncio(loop_scope="module")  # the module's one server's loop

COMPLETIONS = "/v1/completions"
BODY = {"prompt": "hello", "max_tokens": 2}
TOTAL = "http_requests_total"
LOWR = "http_request_duration_seconds_count"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def srv():
    """One server for the module (each test reads the deltas of its own requests)."""
    from kvpool.runtime.engine.async_engine import AsyncEngine

    engine = AsyncEngine(engine_config("serve", **SERVE_LIMITS))
    app = build_app(engine, engine_shutdown_timeout=5.0)
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server(shutdown_timeout=5.0)
    try:
        yield Running(f"http://127.0.0.1:{server.port}", engine, app, server)
    finally:
        await server.close()


async def call(srv: Running, method: str, path: str, **kw) -> tuple[int, bytes]:
    async with aiohttp.ClientSession() as s, s.request(method, srv.url + path, **kw) as r:
        return r.status, await r.read()


def sample(m: dict, name: str, **labels: str) -> float:
    return m.get(name, {}).get(tuple(sorted(labels.items())), 0.0)


def total(m: dict, handler: str, method: str, status: str) -> float:
    return sample(m, TOTAL, handler=handler, method=method, status=status)


@MODULE_LOOP
async def test_answers_by_route_template_and_status_group(srv):
    before = await scrape(srv)
    assert (await call(srv, "POST", COMPLETIONS, json=BODY))[0] == 200
    assert (await call(srv, "POST", COMPLETIONS, data=b"{not json",
                       headers={"Content-Type": "application/json"}))[0] == 400
    assert (await call(srv, "GET", "/v1/models/no-such-model"))[0] == 404
    assert (await call(srv, "GET", COMPLETIONS))[0] == 405  # the route's template, as Starlette
    after = await scrape(srv)
    for labels, n in [((COMPLETIONS, "POST", "2xx"), 1), ((COMPLETIONS, "POST", "4xx"), 1),
                      (("/v1/models/{model}", "GET", "4xx"), 1), ((COMPLETIONS, "GET", "4xx"), 1)]:
        assert total(after, *labels) - total(before, *labels) == n, labels
    lowr = sample(after, LOWR, handler=COMPLETIONS, method="POST") - \
        sample(before, LOWR, handler=COMPLETIONS, method="POST")
    assert lowr == 2  # a whole body's duration is observed when it is prepared


@MODULE_LOOP
async def test_server_errors_are_5xx(srv):
    gate = srv.app[GATE_KEY]
    before = await scrape(srv)
    gate.draining = True  # new requests get 503 shutting_down
    try:
        assert (await call(srv, "POST", COMPLETIONS, json=BODY))[0] == 503
    finally:
        gate.draining = False
    after = await scrape(srv)
    assert total(after, COMPLETIONS, "POST", "5xx") - total(before, COMPLETIONS, "POST", "5xx") \
        == 1


@MODULE_LOOP
async def test_an_answer_made_before_the_middlewares_is_counted(srv):
    # aiohttp refuses an Expect it does not know ahead of the middleware chain
    before = await scrape(srv)
    status, _ = await call(srv, "POST", COMPLETIONS, json=BODY, headers={"Expect": "a-lot"})
    assert status == 417
    after = await scrape(srv)
    assert total(after, COMPLETIONS, "POST", "4xx") - total(before, COMPLETIONS, "POST", "4xx") \
        == 1
    assert sample(after, LOWR, handler=COMPLETIONS, method="POST") - \
        sample(before, LOWR, handler=COMPLETIONS, method="POST") == 1


@MODULE_LOOP
async def test_random_paths_add_no_series(srv):
    before = await scrape(srv)
    paths = [f"/{uuid.uuid4().hex}/{uuid.uuid4().hex}" for _ in range(12)]
    for path in paths:
        assert (await call(srv, "GET", path))[0] == 404
    after = await scrape(srv)
    assert total(after, "none", "GET", "4xx") - total(before, "none", "GET", "4xx") == 12
    new = {k for name in HTTP_METRIC_NAMES for s in (name, name + "_count")
           for k in after.get(s, {})} - {k for s in before.values() for k in s}
    handlers = {dict(k).get("handler") for k in new}
    assert handlers <= {"none", None}, handlers
    assert not any(p.split("/")[1] in repr(after) for p in paths)


@MODULE_LOOP
async def test_health_metrics_and_friends_are_not_counted(srv):
    before = await scrape(srv)
    for path in ("/metrics", "/health", "/ping", "/version", "/metrics/", "/metrics/x/y"):
        await call(srv, "GET", path)
    assert (await call(srv, "GET", "/v1/models"))[0] == 200  # the one answer counted
    after = await scrape(srv)
    assert sum(after[TOTAL].values()) - sum(before.get(TOTAL, {}).values()) == 1
    assert total(after, "/v1/models", "GET", "2xx") - total(before, "/v1/models", "GET", "2xx") \
        == 1
    highr = "http_request_duration_highr_seconds_count"
    assert sample(after, highr) - sample(before, highr) == 1


@MODULE_LOOP
async def test_sizes_and_a_streams_duration(srv):
    before = await scrape(srv)
    sent = [b'{"prompt": "hello", "max_tokens": 2}',
            b'{"prompt": "hello", "max_tokens": 2, "stream": true}']
    json_type = {"Content-Type": "application/json"}
    status, got = await call(srv, "POST", COMPLETIONS, data=sent[0], headers=json_type)
    assert status == 200
    assert (await call(srv, "POST", COMPLETIONS, data=sent[1], headers=json_type))[0] == 200
    after = await _until(srv, lambda m: sample(m, LOWR, handler=COMPLETIONS, method="POST")
                         >= sample(before, LOWR, handler=COMPLETIONS, method="POST") + 2)

    def delta(name: str) -> float:
        return sample(after, name, handler=COMPLETIONS) - sample(before, name, handler=COMPLETIONS)

    assert delta("http_request_size_bytes_count") == 2
    # the stream's body has no Content-Length: it adds 0, as the instrumentator's does
    assert delta("http_response_size_bytes_sum") == len(got)
    assert delta("http_request_size_bytes_sum") == sum(map(len, sent))
    highr = "http_request_duration_highr_seconds_count"
    assert sample(after, highr) - sample(before, highr) == 2


async def _until(srv: Running, done, tries: int = 100) -> dict:
    """A scrape that satisfies ``done`` (a stream's duration lands when its handler returns,
    just after its client read the last event): bounded polling."""
    for _ in range(tries):
        m = await scrape(srv)
        if done(m):
            return m
        await asyncio.sleep(0.02)
    raise AssertionError("the scrape never showed the stream's duration")


def test_labels_are_bounded_and_the_lean_render_matches_prometheus_client():
    series = HttpSeries()
    series.answered(None, "GET", 404, 0, 121)
    series.answered("/v1/models/{model}", "get", 503, 7, 0)  # not a verb: "other"
    series.answered('/odd "x"\\', "POST", 200, 10, 20)
    for seconds in (0.0, 0.1, 0.3, 2.0, 90.0):
        series.ended("/v1/completions", "POST", seconds)
    registry = CollectorRegistry()
    registry.register(series)
    out: list[str] = []
    series.lines(out)
    assert "".join(out).splitlines() == generate_latest(registry).decode().splitlines()
    m = parse_metrics("".join(out))
    assert set(m[TOTAL]) == {(("handler", "none"), ("method", "GET"), ("status", "4xx")),
                             (("handler", "/v1/models/{model}"), ("method", "other"),
                              ("status", "5xx")),
                             (("handler", '/odd "x"\\'), ("method", "POST"), ("status", "2xx"))}
    buckets = m["http_request_duration_seconds_bucket"]
    key = (("handler", "/v1/completions"), ("method", "POST"))
    assert [buckets[key[:1] + (("le", le),) + key[1:]] for le in ("0.1", "0.5", "1.0", "+Inf")] \
        == [2, 3, 3, 5]  # le is inclusive
    assert sample(m, "http_request_duration_highr_seconds_count") == 5


def test_every_http_series_is_on_the_dashboard():
    exprs = [plain(e) for e in dashboard_exprs(load_dashboard())]
    for name in HTTP_METRIC_NAMES:
        pattern = re.compile(rf"\b{name}(_bucket|_sum|_count)?\b")
        assert any(pattern.search(e) for e in exprs), f"{name} is on no dashboard panel"
    assert any('status=~"5xx"' in e or 'status="5xx"' in e for e in exprs)


@MODULE_LOOP
async def test_metrics_answers_under_vllms_path_regex(srv):
    """NOTE(metrics-path) in kvpool/server/handlers.py: vLLM serves its registry on
    ^/metrics(?P<path>.*)$, so a scrape config's metrics_path /metrics/ works (before: 404)."""
    for path in ("/metrics/", "/metrics/anything", "/metricsz"):
        async with aiohttp.ClientSession() as s, s.get(srv.url + path) as r:
            assert r.status == 200, path
            assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4"), path
            assert "vllm:num_requests_running" in await r.text(), path
