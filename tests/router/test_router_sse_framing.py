"""How the router frames a replica's SSE answer (kvpool/router/upstream.py NOTE(event-boundary)):
events ended by CRLF blank lines are passed on as they come, and an event that never ends is
passed on past MAX_PENDING bytes instead of being held whole. The replica is a real aiohttp
server on 127.0.0.1 that waits, between its writes, for the client to have seen the earlier
ones (bounded): a router that held the bytes back makes that wait run out."""

from __future__ import annotations

import asyncio
import contextlib
import json

import aiohttp
from aiohttp import web

from tests.router.helpers import apps_served, router

OK_HEALTH = b'{"status": "ok", "num_running": 0, "num_waiting": 0}'
LOOKUP = {"replica_id": "r", "block_size": 16, "device_hit_tokens": 0, "host_hit_tokens": 0,
          "num_running": 0, "num_waiting": 0}
GATE_WAIT = 10.0  # seconds the replica waits for the client to see what it sent
ENDLESS = 16 << 20  # bytes of the endless event: many times upstream.MAX_PENDING
HELD = 4 << 20  # bytes of it the client may still lack while the replica writes on


@contextlib.asynccontextmanager
async def streaming_replica(stream):
    """A replica answering POST /v1/completions and /v1/responses with ``stream(resp)``."""
    async def health(_):
        return web.Response(body=OK_HEALTH, content_type="application/json")

    async def lookup(_):
        return web.json_response(LOOKUP)

    async def generate(request):
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await stream(resp)
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_post("/v1/kvpool/lookup", lookup)
    app.router.add_post("/v1/completions", generate)
    app.router.add_post("/v1/responses", generate)
    async with apps_served(app) as (url,):
        yield url


async def _seen(gate: asyncio.Event) -> bool:
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(GATE_WAIT):
            await gate.wait()
    return gate.is_set()


async def test_crlf_events_reach_the_client_as_the_replica_sends_them():
    """Before, the router looked for ``\\n\\n`` only: a CRLF stream was held whole and reached
    the client at its end (its first event ``GATE_WAIT`` seconds late here)."""
    seen = asyncio.Event()
    waited = []

    async def stream(resp):
        await resp.write(b'data: {"n": 1}\r\n\r\n')
        waited.append(await _seen(seen))  # the client has event 1 before event 2 exists
        await resp.write(b'data: {"n": 2}\r\n\r\ndata: [DONE]\r\n\r\n')

    async with streaming_replica(stream) as up, router([up]) as (_, url):
        async with aiohttp.ClientSession() as s, s.post(
                url + "/v1/completions", json={"prompt": "x", "stream": True}) as resp:
            first = await resp.content.readuntil(b"\r\n\r\n")
            seen.set()
            rest = await resp.content.read()
    assert first == b'data: {"n": 1}\r\n\r\n'
    assert waited == [True]
    assert rest == b'data: {"n": 2}\r\n\r\ndata: [DONE]\r\n\r\n'  # passed on as sent


async def test_an_event_that_never_ends_is_passed_on_not_held():
    """A replica that writes one event without end: before, the router held every byte of it
    (all 16 MiB of it here, in memory) until the replica closed."""
    seen = asyncio.Event()
    waited = []
    block = b"x" * (256 * 1024)
    sent = ENDLESS

    async def stream(resp):
        await resp.write(b"data: ")
        for _ in range(sent // len(block)):
            await resp.write(block)
        waited.append(await _seen(seen))  # the client got most of it before the end

    async with streaming_replica(stream) as up, router([up]) as (_, url):
        async with aiohttp.ClientSession() as s, s.post(
                url + "/v1/completions", json={"prompt": "x", "stream": True}) as resp:
            got = 0
            while got < sent - HELD:
                chunk = await resp.content.readany()
                assert chunk, got
                got += len(chunk)
            seen.set()
            got += len(await resp.content.read())
    assert waited == [True]
    assert got == sent + len(b"data: ")


async def test_a_crlf_responses_stream_teaches_its_response_id():
    created = {"type": "response.created",
               "response": {"id": "resp_crlf", "object": "response", "status": "in_progress"}}

    async def stream(resp):
        await resp.write(b"event: response.created\r\ndata: " + json.dumps(created).encode()
                         + b"\r\n\r\n")

    async with streaming_replica(stream) as up, router([up]) as (r, url):
        async with aiohttp.ClientSession() as s, s.post(
                url + "/v1/responses", json={"input": "x", "stream": True}) as resp:
            await resp.read()
        assert r.affinity.owner_url("resp_crlf") == up
