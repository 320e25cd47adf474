"""A Responses API creation's answer teaches the picker its holder (kvpool/epp/picker.py
NOTE(learn-answer)) through a real Envoy (the shipped deploy/envoy/envoy.yaml, or
envoy-fallback.yaml with --fallbacks 2 and a first replica that refuses after the picker's
poll), the real picker and aiohttp replicas on 127.0.0.1 (Envoy stopped by pid).

Each replica stores the responses it creates per tenant (``x-tenant``) and counts the GETs of
/v1/responses/{id} it gets: the picker's searches. A follow-up after a creation through Envoy
is placed with no search, on the replica that made the response; another tenant naming the
id is not helped (searched for, the replicas' 404). Before, each follow-up's first pick cost
a search of every healthy replica.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import uuid

import aiohttp
import pytest
from aiohttp import web

from bench.envoy_proc import Envoy
from kvpool.epp.cli import picking
from kvpool.epp.picker import Picker
from kvpool.router.affinity import ResponseAffinity
from kvpool.router.proxy import Router
from kvpool.router.replicas import ReplicaSet
from tests.epp.test_epp_envoy_fallback import CONFIG, cluster
from tests.router.helpers import LOOKUP_TIMEOUT, apps_served
from tests.router.test_router_hostile_replica import OK_HEALTH

TENANT = "x-tenant"


def replica(name: str, lookups: list[str]) -> web.Application:
    """Creates responses (JSON or SSE), keeps them per tenant; each GET of one is appended
    to ``lookups``."""
    held: set[tuple[str, str]] = set()

    def missing(rid):
        return web.json_response({"error": {"message": f"no response {rid}", "type":
                                            "invalid_request_error", "param": None,
                                            "code": "not_found"}}, status=404)

    async def create(request):
        body, tenant = await request.json(), request.headers.get(TENANT, "")
        named = body.get("previous_response_id")
        if named is not None and (tenant, named) not in held:
            return missing(named)
        rid = "resp_" + uuid.uuid4().hex
        held.add((tenant, rid))
        made = {"id": rid, "object": "response", "made_by": name, "previous_response_id": named}
        return await streamed(request, made) if body.get("stream") else \
            web.json_response(made)

    async def stored(request):
        lookups.append(name)
        rid = request.match_info["rid"]
        if (request.headers.get(TENANT, ""), rid) in held:
            return web.json_response({"id": rid, "object": "response"})
        return missing(rid)

    async def health(_):
        return web.Response(body=OK_HEALTH, content_type="application/json")

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_post("/v1/responses", create)
    app.router.add_get("/v1/responses/{rid}", stored)
    return app


async def streamed(request: web.Request, made: dict) -> web.StreamResponse:
    """``made`` as kvpool serve streams a response: response.created first."""
    resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
    await resp.prepare(request)
    for kind in ("response.created", "response.output_text.delta", "response.completed"):
        event = {"type": kind, "response": made} if kind != "response.output_text.delta" \
            else {"type": kind, "delta": "hi"}
        await resp.write(f"event: {kind}\ndata: {json.dumps(event)}\n\n".encode())
    await resp.write_eof()
    return resp


@contextlib.asynccontextmanager
async def gateway(workdir, fallbacks: int):
    """Two replicas (and with ``fallbacks`` a first one that refuses) behind the picker
    (tenants by ``x-tenant``) and Envoy; yields (Envoy's URL, the picker, lookups)."""
    lookups: list[str] = []
    async with contextlib.AsyncExitStack() as stack:
        live = await stack.enter_async_context(apps_served(
            replica("r1", lookups), replica("r2", lookups)))
        doomed = contextlib.AsyncExitStack()
        dead = await doomed.enter_async_context(apps_served(replica("dead", lookups))) \
            if fallbacks else []
        urls = [*dead, *live]
        router = Router(ReplicaSet(urls, interval=3600), lookup_timeout=LOOKUP_TIMEOUT,
                        affinity=ResponseAffinity(tenant_header=TENANT))
        port = await stack.enter_async_context(picking(Picker(router, fallbacks=fallbacks),
                                                       "127.0.0.1", 0))
        await doomed.aclose()  # refuses now; the picker still holds it healthy
        envoy = Envoy(port, workdir, (cluster(urls),), config=CONFIG) if fallbacks else \
            Envoy(port, workdir)
        await asyncio.to_thread(envoy.start)
        stack.push_async_callback(asyncio.to_thread, envoy.stop)
        yield envoy.url, router, lookups


async def respond(s, url: str, tenant: str, **body) -> tuple[int, dict]:
    async with s.post(url + "/v1/responses", headers={TENANT: tenant},
                      json={"model": "m", "input": "hi", **body}) as r:
        if r.content_type == "text/event-stream":
            events = [json.loads(line[6:]) for line in (await r.text()).splitlines()
                      if line.startswith("data: ")]
            return r.status, events[0]["response"]
        return r.status, await r.json()


@pytest.mark.parametrize("fallbacks, stream", [(0, False), (0, True), (2, False), (2, True)])
async def test_a_follow_up_after_a_creation_needs_no_search(tmp_path, fallbacks, stream):
    async with gateway(tmp_path, fallbacks) as (url, router, lookups), \
            aiohttp.ClientSession() as s:
        made = []
        for _ in range(4):  # round robin: each replica makes some (fallbacks: some retried)
            status, out = await respond(s, url, "a", stream=stream)
            assert status == 200, out
            made.append(out)
        assert {m["made_by"] for m in made} == {"r1", "r2"}
        for m in made:
            status, out = await respond(s, url, "a", previous_response_id=m["id"])
            assert status == 200 and out["made_by"] == m["made_by"], out
        assert lookups == [] and router.affinity.searches == 0  # no search at all
        # another tenant naming the id: not in its part of the map, searched for, 404
        status, out = await respond(s, url, "b", previous_response_id=made[0]["id"])
        assert status == 404, out
        assert router.affinity.searches == 1 and sorted(lookups) == ["r1", "r2"]
