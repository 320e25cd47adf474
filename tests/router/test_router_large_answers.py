"""A replica's JSON answer larger than the router holds (kvpool/router/upstream.py
NOTE(large-answer)): it is passed on as it comes, a 503 refusal's body is read only up to its
bound, and a replica that breaks off a large answer midway cuts its client's connection (a
short body the client sees as broken, never a clean one). Replicas are real aiohttp servers on 127.0.0.1
whose writes wait (bounded) for the client to have seen the earlier bytes."""

from __future__ import annotations

import asyncio
import contextlib

import aiohttp
import pytest
from aiohttp import web

from tests.router.helpers import apps_served, router

OK_HEALTH = b'{"status": "ok", "num_running": 0, "num_waiting": 0}'
LOOKUP = {"replica_id": "r", "block_size": 16, "device_hit_tokens": 0, "host_hit_tokens": 0,
          "num_running": 0, "num_waiting": 0}
BLOCK = b"0," * (128 * 1024)
LARGE = 64 << 20  # bytes of the large answer: many times upstream.MAX_BUFFERED
HELD = 16 << 20  # of them the client may lack while the replica writes on
GATE_WAIT = 10.0  # seconds the replica waits for the client


@contextlib.asynccontextmanager
async def replicas(*answers):
    """One replica per ``answers`` item: its POST /v1/completions handler."""
    async def health(_):
        return web.Response(body=OK_HEALTH, content_type="application/json")

    async def lookup(_):
        return web.json_response(LOOKUP)

    def app_of(answer) -> web.Application:
        app = web.Application()
        app.router.add_get("/health", health)
        app.router.add_post("/v1/kvpool/lookup", lookup)
        app.router.add_post("/v1/completions", answer)
        return app

    async with apps_served(*map(app_of, answers)) as urls:
        yield urls


def large(status: int, seen: asyncio.Event | None, waited: list, *, short: bool = False,
          taken: list | None = None, headers: dict | None = None):
    """An answer of LARGE bytes (``short``: it breaks off at half); past LARGE - HELD bytes it
    waits for ``seen``; ``taken`` gets what the socket took of it."""
    async def answer(request):
        await request.read()
        resp = web.StreamResponse(status=status, headers={"Content-Type": "application/json",
                                                          **(headers or {})})
        resp.content_length = LARGE + 2
        await resp.prepare(request)
        sent = 0
        with contextlib.suppress(ConnectionError):
            await resp.write(b"[")
            while sent < (LARGE // 2 if short else LARGE):
                await resp.write(BLOCK)
                sent += len(BLOCK)
                if seen is not None and sent == LARGE - HELD:
                    waited.append(await _waited(seen))
            if short:
                request.transport.abort()
                return resp
            await resp.write(b"0]")
        if taken is not None:
            taken.append(sent)  # what the socket took before the router stopped reading
        return resp
    return answer


async def _waited(gate: asyncio.Event) -> bool:
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(GATE_WAIT):
            await gate.wait()
    return gate.is_set()


async def _read_to(resp, n: int) -> int:
    got = 0
    while got < n:
        chunk = await resp.content.readany()
        assert chunk, got
        got += len(chunk)
    return got


async def test_a_large_answer_reaches_the_client_as_the_replica_sends_it():
    """Before: held whole (64 MiB here) until its last byte, so the client had nothing while
    the replica waited for it."""
    seen, waited = asyncio.Event(), []
    async with replicas(large(200, seen, waited)) as urls, router(urls) as (_, url), \
            aiohttp.ClientSession() as s, s.post(url + "/v1/completions",
                                                 json={"prompt": "x"}) as resp:
        assert resp.status == 200
        got = await _read_to(resp, LARGE - HELD - len(BLOCK))
        seen.set()
        got += len(await resp.content.read())
    assert waited == [True]
    assert got == LARGE + 2


async def test_a_large_refusal_is_not_read_on_and_the_next_replica_answers():
    """Before: a refusal's body was read whole to be dropped (a replica that sent without end
    held the request, and the router's memory, as long as it sent). A full replica's 503 +
    Retry-After is the refusal retried elsewhere (upstream.py NOTE(retry))."""
    taken: list[int] = []

    async def good(request):
        await request.read()
        return web.json_response({"served_by": "good"})

    full = large(503, None, [], taken=taken, headers={"Retry-After": "1"})
    async with replicas(full, good) as urls, \
            router(urls) as (_, url), aiohttp.ClientSession() as s:
        for _ in range(2):  # round robin: the first try of one of them is the 503
            async with s.post(url + "/v1/completions", json={"prompt": "x"}) as resp:
                assert (resp.status, await resp.json()) == (200, {"served_by": "good"})
    assert len(taken) == 1 and taken[0] < LARGE // 2  # the 500 was not read to its end


async def test_a_large_answer_broken_off_midway_cuts_the_client():
    """The replica stops at half of what its Content-Length says: the client's body must not
    look whole."""
    seen = asyncio.Event()
    seen.set()  # no waiting: the replica writes its half at once
    async with replicas(large(200, seen, [], short=True)) as urls, router(urls) as (_, url), \
            aiohttp.ClientSession() as s:
        with pytest.raises(aiohttp.ClientPayloadError):
            async with s.post(url + "/v1/completions", json={"prompt": "x"}) as resp:
                await _read_to(resp, LARGE // 4)  # passed on before the break
                await resp.read()
        async with s.get(url + "/health") as h:
            assert h.status == 200  # the router goes on
