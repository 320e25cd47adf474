"""What the router reads of a replica's own answers to it: /health, a lookup, the kv_events info
(kvpool/router/replicas.py NOTE(small-answers)). JSON nested past the decoder's recursion limit
scores like any malformed answer, and an answer without end is read up to a bound, not for as
long as its timeout lets it run. The replicas are real aiohttp servers on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
import gzip
import json

import aiohttp
from aiohttp import web

from kvpool.router.kv_routing import EventRouting
from kvpool.router.proxy import Router
from kvpool.router.replicas import ReplicaSet
from tests.router.helpers import apps_served, served

OK_HEALTH = b'{"status": "ok", "num_running": 0, "num_waiting": 0}'
LOOKUP = {"replica_id": "r", "block_size": 16, "device_hit_tokens": 0, "host_hit_tokens": 0,
          "num_running": 0, "num_waiting": 0}
DEEP = b"[" * 50_000 + b"]" * 50_000  # valid JSON, past json's recursion limit
ENDLESS = 128 << 20  # bytes a hostile answer offers
READ_AT_MOST = 32 << 20  # of them the router may have taken (its bound + socket buffers)


def _endless(sent: list[int]):
    """A handler answering 200 JSON that never closes its array: ENDLESS bytes; what the
    socket took of them is appended to ``sent`` (one count per answer)."""
    async def answer(request: web.Request) -> web.StreamResponse:
        if request.method == "POST":
            await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "application/json"})
        await resp.prepare(request)
        block = b"[" + b"0," * (128 * 1024)
        taken = 0
        with contextlib.suppress(ConnectionError):
            while taken < ENDLESS:
                await resp.write(block)
                taken += len(block)
        sent.append(taken)
        return resp
    return answer


@contextlib.asynccontextmanager
async def replica(name: str, health=None, lookup=None, kv_info=None, complete=None):
    """A replica playing kvpool serve's routes; each handler may be replaced."""
    async def ok_health(_):
        return web.Response(body=OK_HEALTH, content_type="application/json")

    async def ok_lookup(_):
        return web.json_response({**LOOKUP, "replica_id": name})

    async def no_events(_):
        return web.json_response({"enabled": False})

    async def served(request):
        await request.read()
        return web.json_response({"id": "x", "object": "text_completion", "served_by": name})

    app = web.Application()
    app.router.add_get("/health", health or ok_health)
    app.router.add_post("/v1/kvpool/lookup", lookup or ok_lookup)
    app.router.add_get("/v1/kvpool/kv_events", kv_info or no_events)
    app.router.add_post("/v1/completions", complete or served)
    async with apps_served(app) as (url,):
        yield url


@contextlib.asynccontextmanager
async def routed(urls, *, timeout: float = 30.0, kv_events: bool = False):
    """A router whose answer timeouts are long: only the read bound can stop a long answer."""
    replicas = ReplicaSet(urls, interval=0.1, timeout=timeout, down_after=timeout)
    r = Router(replicas, lookup_timeout=timeout,
               kv_events=EventRouting(replicas) if kv_events else None)
    async with served(r) as url:
        yield r, url


async def _served_by(url: str) -> str:
    async with aiohttp.ClientSession() as s, s.post(
            url + "/v1/completions", json={"prompt": "hello", "max_tokens": 1}) as resp:
        out = await resp.json()
        assert resp.status == 200, out
        return out["served_by"]


async def _healthy(r: Router, n: int) -> None:
    for _ in range(200):
        if len(r.replicas.healthy()) == n:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{len(r.replicas.healthy())} of {n} replicas healthy")


async def test_a_lookup_answer_nested_too_deep_scores_no_hit():
    """Before: RecursionError out of the lookup, every request a 500 (a picker error in
    kvpool epp), a good replica beside it or not."""
    async def deep(_):
        return web.Response(body=DEEP, content_type="application/json")

    async with replica("bad", lookup=deep) as bad, replica("good") as good, \
            routed([bad, good]) as (r, url):
        await _healthy(r, 2)
        assert {await _served_by(url) for _ in range(4)} == {"bad", "good"}  # round robin


async def test_an_endless_lookup_answer_is_read_only_up_to_the_bound():
    """Before: read until the lookup timeout, 128 MiB into the router's memory per request."""
    sent: list[int] = []
    async with replica("bad", lookup=_endless(sent)) as bad, \
            replica("good") as good, routed([bad, good]) as (r, url):
        await _healthy(r, 2)
        await _served_by(url)
    assert sent and max(sent) < READ_AT_MOST, sent


async def test_health_answers_nested_too_deep_or_endless_keep_the_beats_going():
    """Before: the deep one raised out of the first beat (the router did not start), the
    endless one was read for the beat's whole timeout, every beat."""
    sent: list[int] = []
    status = [200]

    async def deep(_):
        return web.Response(status=status[0], body=DEEP, content_type="application/json")

    async with replica("deep", health=deep) as d, \
            replica("endless", health=_endless(sent)) as e, \
            routed([d, e]) as (r, _):
        await _healthy(r, 2)
        polls = r.replicas.polls
        status[0] = 503  # the deep one's next beats must still run and see it go
        await _healthy(r, 1)
        assert r.replicas.polls > polls
        assert [x.load for x in r.replicas.replicas] == [0, 0]
    assert sent and max(sent) < READ_AT_MOST, sent


async def test_kv_event_info_nested_too_deep_or_endless_scores_no_hits():
    sent: list[int] = []

    async def deep(_):
        return web.Response(body=DEEP, content_type="application/json")

    async with replica("deep", kv_info=deep) as d, \
            replica("endless", kv_info=_endless(sent)) as e, \
            routed([d, e], kv_events=True) as (r, url):
        await _healthy(r, 2)
        assert {await _served_by(url) for _ in range(4)} == {"deep", "endless"}
        assert r.kv_events is not None and r.kv_events.keys is None  # nobody publishes
    assert sent and max(sent) < READ_AT_MOST, sent



async def test_a_replica_claiming_every_hit_and_no_load_stops_drawing_past_the_guard():
    """NOTE(own-load) in proxy.py: the liar claims a long hit for every prompt and 0 load, and
    holds what it is sent. Before, its word on its load was taken over the router's own count:
    every request went there (never answered) and the good replica beside it stayed idle."""
    held = []
    arrived = asyncio.Condition()
    release = asyncio.Event()

    async def lie(_):
        return web.json_response({**LOOKUP, "device_hit_tokens": 1 << 20})

    async def hold(request):
        await request.read()
        async with arrived:
            held.append(request)
            arrived.notify_all()
        await release.wait()
        return web.json_response({"id": "x", "object": "text_completion", "served_by": "liar"})

    async with replica("liar", lookup=lie, complete=hold) as liar, replica("good") as good, \
            routed([liar, good]) as (r, url), aiohttp.ClientSession() as s:
        await _healthy(r, 2)
        body = {"prompt": "hello", "max_tokens": 1}
        tasks = []
        try:
            for i in range(r.guard.abs_threshold + 1):  # each one placed after the last arrived
                tasks.append(asyncio.create_task(s.post(url + "/v1/completions", json=body)))
                async with arrived, asyncio.timeout(10):
                    await arrived.wait_for(lambda: len(held) > i)
            async with asyncio.timeout(10):  # bounds the hang at the liar, before the fix
                assert await _served_by(url) == "good"  # the guard tripped: the liar is full
        finally:
            release.set()
            for resp in await asyncio.gather(*tasks):
                resp.release()


async def test_what_the_router_reads_it_asks_uncompressed():
    """NOTE(own-asks) in relayed.py: a replica (or a proxy in front of it) that compresses
    whatever may be compressed gave the router gzip bytes it read as "not JSON": lookups
    scored 0 hits for every client accepting gzip, and a compressed /health lost the
    replica's load."""
    asked: list[str] = []

    def squeezed(body: dict):
        async def answer(request: web.Request) -> web.Response:
            if request.method == "POST":
                await request.read()
            enc = request.headers.get("Accept-Encoding", "")
            asked.append(enc)
            raw = json.dumps(body).encode()
            if "gzip" in enc:
                return web.Response(body=gzip.compress(raw), content_type="application/json",
                                    headers={"Content-Encoding": "gzip"})
            return web.Response(body=raw, content_type="application/json")
        return answer

    busy = {"status": "ok", "num_running": 50, "num_waiting": 0}
    async with replica("cold", health=squeezed(busy)) as cold, replica(
            "warm", lookup=squeezed({**LOOKUP, "replica_id": "warm",
                                     "device_hit_tokens": 2000}),
            health=squeezed(busy)) as warm, routed([cold, warm]) as (r, url):
        await _healthy(r, 2)
        async with aiohttp.ClientSession() as s:
            for _ in range(4):
                async with s.post(url + "/v1/completions", json={"prompt": "hello"},
                                  headers={"Accept-Encoding": "gzip, deflate"}) as resp:
                    assert (await resp.json())["served_by"] == "warm"
        assert [x.load for x in r.replicas.replicas] == [50, 50]
    assert asked and all(a == "identity" for a in asked), set(asked)
