"""The protocol's fallback endpoints (kvpool/epp/picker.py NOTE(fallbacks), docs/epp.md
"Fallback endpoints") through a real Envoy (bench/envoy_proc.py) running the shipped
deploy/envoy/envoy-fallback.yaml (its replicas and ports changed), the real picker and real
aiohttp replicas on 127.0.0.1, each stopped by context, Envoy by pid.

Three replicas, listed to Envoy and the picker as ``doomed``, ``busy``, ``idle``. ``doomed``
answers the picker's first /health poll, then stops listening (killed after the poll: the
picker, with no beat since, still holds it healthy). Its lookup fails, so it scores load 0,
``idle`` reports 10 running and ``busy`` 20: the load guard chooses ``doomed`` every time
and the router's order is doomed, idle, busy. Round robin over the cluster (doomed, busy,
idle) would send a retry to ``busy`` as often as to ``idle``: every request served by
``idle`` is the picker's order, not Envoy's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json

import aiohttp
import pytest
from aiohttp import web

from bench.envoy_proc import Envoy
from kvpool.epp.cli import main, picking
from kvpool.epp.picker import Picker, endpoint_of
from kvpool.router.proxy import Router
from kvpool.router.replicas import ReplicaSet
from stress.http.servers import ROOT
from tests.epp.test_epp_envoy_gateway_error import failing_replica
from tests.epp.test_epp_envoy_local_reply import error_of
from tests.epp.test_epp_envoy_protocol import BODY, FORWARD_HINT, SUBSET_FILTER
from tests.router.helpers import LOOKUP_TIMEOUT, apps_served
from tests.router.test_router_hostile_replica import GOOD, OK_HEALTH

CONFIG = ROOT / "deploy" / "envoy" / "envoy-fallback.yaml"
SHIPPED = "".join(
    f"        - endpoint: {{address: {{socket_address: {{address: 10.0.0.{n}, port_value: 8000}}}}}}\n"
    for n in (7, 8, 9))
REQUESTS = 6  # round robin would send some of them to busy


def replica(name: str, running: int, served: list[str], health_status: int = 200
            ) -> web.Application:
    """A fake replica reporting ``running`` requests on its lookup (its /health answering
    ``health_status``); each completion it runs is appended to ``served`` as ``name``."""
    lookup_body = json.dumps({**GOOD, "device_hit_tokens": 0, "num_running": running}).encode()

    async def health(_):
        return web.Response(body=OK_HEALTH, content_type="application/json",
                            status=health_status)

    async def lookup(_):
        return web.Response(body=lookup_body, content_type="application/json")

    async def complete(request):
        await request.read()
        served.append(name)
        return web.json_response({"object": "text_completion", "served_by": name})

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_post("/v1/kvpool/lookup", lookup)
    app.router.add_post("/v1/completions", complete)
    return app


def cluster(urls: list[str]) -> tuple[str, str]:
    """The edit listing ``urls`` as the replicas cluster's endpoints."""
    return SHIPPED, "".join(
        "        - endpoint: {address: {socket_address: {address: 127.0.0.1, port_value: "
        f"{endpoint_of(u).rsplit(':', 1)[1]}}}}}}}\n" for u in urls)


@contextlib.asynccontextmanager
async def gateway(workdir, fallbacks: int, first: str | None = None, edits=()):
    """doomed (or ``first``, a replica of the test's), busy and idle behind the picker
    (``fallbacks``) and Envoy; yields (Envoy's URL, {name: endpoint}, completions served).
    ``doomed`` stops listening after the picker's first poll."""
    served: list[str] = []
    async with contextlib.AsyncExitStack() as stack:
        busy, idle = await stack.enter_async_context(apps_served(
            replica("busy", 20, served), replica("idle", 10, served)))
        doomed = contextlib.AsyncExitStack()
        head = first or (await doomed.enter_async_context(
            apps_served(replica("doomed", 0, served))))[0]
        urls = [head, busy, idle]
        picker = Picker(Router(ReplicaSet(urls, interval=3600, timeout=LOOKUP_TIMEOUT),
                               lookup_timeout=LOOKUP_TIMEOUT),
                        fallbacks=fallbacks)
        port = await stack.enter_async_context(picking(picker, "127.0.0.1", 0))
        await doomed.aclose()  # its port refuses now; the picker still holds it healthy
        envoy = Envoy(port, workdir, (cluster(urls), *edits), config=CONFIG)
        await asyncio.to_thread(envoy.start)
        stack.push_async_callback(asyncio.to_thread, envoy.stop)
        names = dict(zip(("first", "busy", "idle"), map(endpoint_of, urls)))
        yield envoy.url, names, served


async def post(s: aiohttp.ClientSession, url: str, **headers) -> aiohttp.ClientResponse:
    r = await s.post(url + "/v1/completions", json=BODY, headers=headers,
                     timeout=aiohttp.ClientTimeout(total=30))
    await r.read()
    return r


async def test_a_killed_pick_is_served_by_the_next_in_the_pickers_order(tmp_path):
    async with gateway(tmp_path, 2) as (url, names, served), aiohttp.ClientSession() as s:
        for _ in range(REQUESTS):
            r = await post(s, url)
            assert r.status == 200, await r.text()
            assert r.headers["x-kvpool-picked"] == ",".join(
                names[n] for n in ("first", "idle", "busy"))
            assert r.headers["x-kvpool-upstream"] == names["idle"]
            assert (await r.json())["served_by"] == "idle"
        assert served == ["idle"] * REQUESTS  # each request run once, by idle


async def test_the_fallbacks_stay_inside_the_subset_hint(tmp_path):
    async with gateway(tmp_path, 2, edits=(SUBSET_FILTER, FORWARD_HINT)) as (
            url, names, served), aiohttp.ClientSession() as s:
        hint = f"{names['first']},{names['busy']}"
        for _ in range(REQUESTS):
            r = await post(s, url, **{"x-subset": hint})
            assert r.status == 200, await r.text()
            assert r.headers["x-kvpool-picked"] == f"{hint},{names['first']}"  # NOTE(padded)
            assert (await r.json())["served_by"] == "busy"
        assert served == ["busy"] * REQUESTS


async def test_one_endpoint_without_fallbacks(tmp_path):
    """--fallbacks 0: the header names the pick alone, as before (the shipped envoy.yaml's
    ORIGINAL_DST then answers 503: tests/epp/test_epp_envoy_gateway_error.py); this config's
    retry goes to override_host's fallback policy, round robin over the cluster."""
    async with gateway(tmp_path, 0) as (url, names, served), aiohttp.ClientSession() as s:
        ok = 0
        for _ in range(REQUESTS):
            r = await post(s, url)
            assert r.headers["x-kvpool-picked"] == names["first"]
            ok += r.status == 200
        assert len(served) == ok  # still never run twice


@pytest.mark.parametrize("mode", ["close", "garbage"])
async def test_a_request_a_replica_took_is_not_run_again(tmp_path, mode):
    """A pick that took the request and failed it (closed the connection, answered no HTTP)
    may have run it: Envoy answers its gateway_error, the fallbacks never get it."""
    async with failing_replica(mode) as bad, \
            gateway(tmp_path, 2, first=bad) as (url, names, served), \
            aiohttp.ClientSession() as s:
        r = await post(s, url)
        err = await error_of(r, 503 if mode == "close" else 502)
        assert err["code"] == "gateway_error", err
        assert r.headers["x-kvpool-picked"].startswith(names["first"] + ",")
        assert served == []


@pytest.mark.parametrize("value", ["-1", "x"])
def test_a_bad_fallbacks_flag_exits_2(value):
    with pytest.raises(SystemExit) if value == "x" else contextlib.nullcontext():
        assert main(["--replica", "http://127.0.0.1:1", "--fallbacks", value]) == 2


@pytest.mark.parametrize("outside", ["unhealthy", "unhinted"])
async def test_every_attempt_stays_on_a_short_list(tmp_path, outside):
    """picker.py NOTE(padded): --fallbacks 3 (num_retries 3) with two replicas the picker may
    choose, both refusing after its poll, and a third it may not (failing its health beats,
    or outside the subset hint) that would serve. The list names the two twice, so all four
    of Envoy's attempts go to them: its 503, the third never asked. Before, the list named
    two and the last two attempts went to round robin over the cluster, the third among
    them (it served some of the requests)."""
    served: list[str] = []
    edits = (SUBSET_FILTER, FORWARD_HINT) if outside == "unhinted" else ()
    async with contextlib.AsyncExitStack() as stack:
        (third,) = await stack.enter_async_context(apps_served(
            replica("third", 0, served, 503 if outside == "unhealthy" else 200)))
        doomed = contextlib.AsyncExitStack()
        urls = [*await doomed.enter_async_context(apps_served(
            replica("a", 0, served), replica("b", 0, served))), third]
        picker = Picker(Router(ReplicaSet(urls, interval=3600, timeout=LOOKUP_TIMEOUT),
                               lookup_timeout=LOOKUP_TIMEOUT),
                        fallbacks=3)
        port = await stack.enter_async_context(picking(picker, "127.0.0.1", 0))
        await doomed.aclose()  # a and b refuse now; the picker still holds them healthy
        envoy = Envoy(port, tmp_path, (cluster(urls), ("num_retries: 2\n", "num_retries: 3\n"),
                                       *edits), config=CONFIG)
        await asyncio.to_thread(envoy.start)
        stack.push_async_callback(asyncio.to_thread, envoy.stop)
        a, b = map(endpoint_of, urls[:2])
        hint = {"x-subset": f"{a},{b}"} if outside == "unhinted" else {}
        async with aiohttp.ClientSession() as s:
            answers = [await post(s, envoy.url, **hint) for _ in range(REQUESTS)]
            assert served == []  # the third replica never asked
            for r in answers:
                assert r.headers["x-kvpool-picked"] in (f"{a},{b},{a},{b}", f"{b},{a},{b},{a}")
                assert r.headers["x-envoy-attempt-count"] == "4"
                assert (await error_of(r, 503))["code"] == "gateway_error"
