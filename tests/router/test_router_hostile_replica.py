"""A replica whose /v1/kvpool/lookup answer is malformed or hostile (not an object, counts
that are strings, negative, fractional, huge or missing) scores like a silent replica: no hit,
and the choice goes on. Before, one such replica made every request a 500 ("picker error" in
kvpool epp, which shares Router.plan), even with a healthy replica beside it.

The two replicas are real aiohttp servers on 127.0.0.1 playing kvpool serve's three routes
(/health, the lookup, /v1/completions), so the router's own parsing meets the hostile bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json

import aiohttp
import pytest
from aiohttp import web

from kvpool.router.kv_routing import EventRouting
from kvpool.router.proxy import Router
from kvpool.router.relayed import BodyReader
from kvpool.router.replicas import ReplicaSet
from kvpool.router.scoring import lookup_counts
from tests.router.helpers import LOOKUP_TIMEOUT, apps_served, router, served
from stress.http.edge import open_raw, trickled_answer

GOOD = {"replica_id": "good", "block_size": 16, "device_hit_tokens": 32, "host_hit_tokens": 0,
        "num_running": 0, "num_waiting": 0, "free_device_blocks": 10}
HOSTILE = [[], "x", None, {"device_hit_tokens": "x", "host_hit_tokens": 0, "num_running": 0,
                           "num_waiting": 0},
           {**GOOD, "device_hit_tokens": -5}, {**GOOD, "num_running": 1.5},
           {**GOOD, "host_hit_tokens": 10 ** 30}, {**GOOD, "num_waiting": True},
           {k: v for k, v in GOOD.items() if k != "num_running"},
           {**GOOD, "replica_id": ["not", "a", "name"]}]


OK_HEALTH = b'{"status": "ok", "num_running": 0, "num_waiting": 0}'


def answering_replica(answer, *paths: str) -> web.Application:
    """A replica whose /health is OK_HEALTH and whose lookup finds GOOD; ``answer`` serves a
    POST to each of ``paths`` (the EPP's answer-phase tests)."""

    async def health(_):
        return web.Response(body=OK_HEALTH, content_type="application/json")

    async def lookup(_):
        return web.json_response(GOOD)

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_post("/v1/kvpool/lookup", lookup)
    for path in paths:
        app.router.add_post(path, answer)
    return app


@contextlib.asynccontextmanager
async def fake_replica(name: str, lookup_body: bytes, health_answer: list | None = None,
                       kv_info: object = None):
    """``health_answer``: [status, body] the test may change while the replica runs;
    ``kv_info``: its GET /v1/kvpool/kv_events answer (None: it publishes none)."""
    answer = health_answer if health_answer is not None else [200, OK_HEALTH]

    async def kv_events(_):
        return web.json_response(kv_info if kv_info is not None else {"enabled": False})

    async def health(_):
        return web.Response(status=answer[0], body=answer[1], content_type="application/json")

    async def lookup(_):
        return web.Response(body=lookup_body, content_type="application/json")

    async def complete(request):
        got = await request.read()  # aiohttp decodes it by its Content-Encoding, as a replica
        return web.json_response({"id": "x", "object": "text_completion", "served_by": name,
                                  "body": json.loads(got)})

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_post("/v1/kvpool/lookup", lookup)
    app.router.add_post("/v1/completions", complete)
    app.router.add_post("/tokenize", complete)
    app.router.add_get("/v1/kvpool/kv_events", kv_events)
    async with apps_served(app) as (url,):
        yield url


@pytest.mark.parametrize("answer", HOSTILE[:-1])
def test_a_malformed_answer_has_no_counts(answer):
    assert lookup_counts(answer) is None


def test_a_wellformed_answer_counts_hits_and_load():
    assert lookup_counts(GOOD) == (32, 0)
    assert lookup_counts({**GOOD, "num_waiting": 3, "host_hit_tokens": 16}) == (48, 3)


async def test_a_hostile_replica_does_not_fail_the_requests_a_good_one_can_serve():
    async with contextlib.AsyncExitStack() as stack:
        good = await stack.enter_async_context(fake_replica("good", json.dumps(GOOD).encode()))
        for answer in [*map(json.dumps, HOSTILE), "{not json", "NaN"]:
            bad = await stack.enter_async_context(fake_replica("bad", answer.encode()))
            async with router([bad, good], interval=0.2) as (r, url):
                await _wait_healthy(r, 2)
                async with aiohttp.ClientSession() as s:
                    async with s.post(url + "/v1/completions",
                                      json={"prompt": "hello", "max_tokens": 1}) as resp:
                        out = await resp.json()
                        assert resp.status == 200, (answer, out)
                        if lookup_counts(_loads(answer)) is None:  # scored as no hit
                            assert out["served_by"] == "good", answer


def _loads(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return None


async def _wait_healthy(r, n: int) -> None:
    for _ in range(100):
        if len(r.replicas.healthy()) == n:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{len(r.replicas.healthy())} of {n} replicas healthy")


@pytest.mark.parametrize("body", [b'{"status": "ok", "num_running": 1e999, "num_waiting": 0}',
                                  b'{"status": "ok", "num_running": "many"}', b"[1, 2]"])
async def test_a_health_answer_with_wild_counts_neither_stops_the_router_nor_its_beats(body):
    """A /health count of 1e999 raised OverflowError out of the beat: at startup the router
    failed, later that replica's beat task died and its health froze (requests hung on it
    after it went silent). Now its load reads 0 and its beats go on."""
    answer = [200, body]
    async with fake_replica("wild", json.dumps(GOOD).encode(), answer) as url:
        async with router([url], interval=0.1) as (r, _):
            await _wait_healthy(r, 1)
            assert r.replicas.replicas[0].load == 0
            answer[0] = 503  # its next beats must still run and see it go unhealthy
            await _wait_healthy(r, 0)


async def test_a_gzip_body_reaches_the_replica_decoded_and_not_labelled_gzip():
    """aiohttp decodes the client's gzip body; the router relayed it with Content-Encoding:
    gzip still on, so the replica could not decode plain JSON (a 400 through the router,
    a 200 direct)."""
    body = {"prompt": "hello", "max_tokens": 1}
    async with fake_replica("good", json.dumps(GOOD).encode()) as url:
        async with router([url], interval=0.2) as (r, rurl):
            await _wait_healthy(r, 1)
            async with aiohttp.ClientSession() as s:
                async with s.post(rurl + "/v1/completions", data=gzip.compress(
                        json.dumps(body).encode()), headers={
                        "Content-Encoding": "gzip", "Content-Type": "application/json"}) as resp:
                    out = await resp.json()
                    assert resp.status == 200 and out["body"] == body, out


async def test_a_trickled_body_on_any_route_gets_408():
    """NOTE(slow-body): passthrough routes (/tokenize here) read their body bare, so a body
    trickled a byte at a time held the router's handler for ever; now 408 like the
    generation routes."""
    async with fake_replica("good", json.dumps(GOOD).encode()) as url:
        async with router([url], interval=0.2) as (r, rurl):
            r.bodies = BodyReader(body_timeout=0.5)
            await _wait_healthy(r, 1)
            reader, writer = await open_raw(rurl)
            writer.write(b"POST /tokenize HTTP/1.1\r\nHost: t\r\nContent-Type: "
                         b"application/json\r\nContent-Length: 100\r\n\r\n{")
            try:
                status, _, answer = await trickled_answer(reader, writer)
                assert status == 408, answer
                assert json.loads(answer)["error"]["code"] == "request_timeout"
            finally:
                writer.close()


INFO = {"enabled": True, "replica_id": "odd", "endpoint": "tcp://127.0.0.1:9",
        "replay_endpoint": None, "topic": "", "block_size": 16,
        "hash": {"spec": "kvpool/prefix/v1", "algo": "sha256", "model_id": "m"},
        "tokenizer": None, "chat_template": None, "max_model_len": 256,
        "tenant_namespaced": False, "tenant_header": None, "model_names": ["m"]}


@pytest.mark.parametrize("info", [
    {**INFO, "endpoint": "not-a-zmq-endpoint"}, {**INFO, "block_size": 0},
    {**INFO, "hash": {"algo": "nope", "model_id": "m"}}, {**INFO, "hash": "x"},
    {**INFO, "tenant_header": 7}, [1, 2]])
async def test_kv_event_info_the_router_cannot_use_is_placed_by_lookups_and_breaks_nothing(info):
    """A replica's kv_events info with an endpoint ZMQ refuses made the --kv-events router
    fail at startup; a block size of 0 made every token-id request a ZeroDivisionError 500.
    Now such a replica is not followed (warned once) and requests are placed by lookups."""
    async with fake_replica("odd", json.dumps(GOOD).encode(), kv_info=info) as url:
        rs = ReplicaSet([url], interval=0.2)
        events = EventRouting(rs, refresh_interval=0.1)
        async with served(Router(rs, lookup_timeout=LOOKUP_TIMEOUT, kv_events=events)) as rurl:
            async with aiohttp.ClientSession() as s:
                for _ in range(3):  # across refreshes of the bad info
                    async with s.post(rurl + "/v1/completions",
                                      json={"prompt": list(range(40)), "max_tokens": 1}) as r:
                        assert r.status == 200, await r.text()
                    await asyncio.sleep(0.15)
            assert events.keys is None  # nothing hashed with the bad spec
