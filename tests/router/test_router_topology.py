"""What a client sees of a broken stream names no replica: the replica URLs are internal
topology, listed on /health only to the router's credentials (proxy.py NOTE(health-view),
docs/architecture.md, Router). Before, the SSE error event a broken or silent replica's stream
ended with said ``replica http://HOST:PORT broke off the stream``, to any client.

The replica is a real aiohttp server on 127.0.0.1 that sends one event and then breaks its
connection, or goes silent (its /health too), behind a real router given a key.
"""

from __future__ import annotations

import asyncio
import json

import aiohttp
import pytest
from aiohttp import web

from kvpool.router.proxy import Router
from kvpool.router.replicas import ReplicaSet
from tests.router.helpers import LOOKUP_TIMEOUT, apps_served, served

KEY = "router-key"
EVENT = b'data: {"choices": [{"text": "a"}]}\n\n'


def breaking_replica(how: str, silent: asyncio.Event, release: asyncio.Event
                     ) -> web.Application:
    """``how``: "break" (its connection aborted after one event) or "silent" (one event, then
    nothing, its /health unanswered from then on, until ``release``)."""

    async def health(_):
        if silent.is_set():
            await release.wait()
        return web.json_response({"status": "ok", "num_running": 0, "num_waiting": 0})

    async def complete(request):
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(EVENT)
        if how == "break":
            request.transport.abort()
            return resp
        silent.set()
        await release.wait()
        return resp

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_post("/v1/completions", complete)
    return app


@pytest.mark.parametrize("how,code", [("break", "replica_failed"),
                                      ("silent", "replica_unresponsive")])
async def test_a_broken_streams_error_event_names_no_replica(how, code):
    silent, release = asyncio.Event(), asyncio.Event()
    async with apps_served(breaking_replica(how, silent, release)) as (rep,):
        replicas = ReplicaSet([rep], interval=0.1, timeout=0.1, down_after=0.5)
        r = Router(replicas, lookup_timeout=LOOKUP_TIMEOUT, policy="round_robin",
                   health_tokens=[KEY])
        async with served(r) as url, aiohttp.ClientSession() as s:
            async with s.post(url + "/v1/completions", json={"prompt": "x", "stream": True}
                              ) as resp:
                assert resp.status == 200
                raw = await asyncio.wait_for(resp.read(), 30)
            async with s.get(url + "/health") as h:  # the rule the event must keep to
                assert "healthy" not in await h.json()
        release.set()  # the replica's handlers end: its server stops at once
    events = events_in(raw)
    assert events[-1] == "[DONE]" and events[-2]["error"]["code"] == code
    host_port = rep.split("//", 1)[1]
    assert host_port.encode() not in raw, raw
    assert r.replicas.replicas[0].in_flight == 0


def events_in(raw: bytes) -> list:
    """Every SSE ``data:`` payload in ``raw``: JSON objects, and "[DONE]"."""
    return ["[DONE]" if line[6:] == b"[DONE]" else json.loads(line[6:])
            for line in raw.splitlines() if line.startswith(b"data: ")]
