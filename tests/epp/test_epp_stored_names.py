"""A stored response read back names the model the client asked for, as the creation's answer
did (kvpool/epp/stored_names.py NOTE(stored-names); docs/epp.md, "Model rewrite and traffic
splitting"), through a real Envoy (the shipped deploy/envoy/envoy.yaml, bench/envoy_proc.py,
stopped by pid), the real picker with --model-rewrites (tenants by ``x-tenant``) and a real
aiohttp replica on 127.0.0.1 that stores each response with the model it got, per tenant.

Before, ``GET /v1/responses/{id}`` (and a cancel's answer) named the rewrite's target while the
POST's answer had named the client's model.
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
from kvpool.epp.rewrite import parse_rewrites
from kvpool.router.affinity import ResponseAffinity
from kvpool.router.proxy import Router
from kvpool.router.replicas import ReplicaSet
from tests.epp.test_epp_learnt_responses import TENANT, respond
from tests.epp.test_epp_model_restore import ASKED, RULES, TARGET
from tests.router.helpers import LOOKUP_TIMEOUT, apps_served
from tests.router.test_router_hostile_replica import OK_HEALTH


def replica() -> web.Application:
    """Creates responses (JSON, or SSE with ``stream``) and keeps them per tenant; serves
    GET /v1/responses/{id} (``?stream=true``: its events again) and POST .../cancel."""
    held: dict[tuple[str, str], dict] = {}

    def stored(request: web.Request) -> dict | None:
        return held.get((request.headers.get(TENANT, ""), request.match_info["rid"]))

    async def create(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        made = {"id": "resp_" + uuid.uuid4().hex, "object": "response",
                "model": body["model"], "instructions": f'"model": "{TARGET}"'}
        held[(request.headers.get(TENANT, ""), made["id"])] = made
        return await events(request, made) if body.get("stream") else web.json_response(made)

    async def read(request: web.Request) -> web.StreamResponse:
        if (made := stored(request)) is None:
            return web.json_response({"error": {"message": "no such response", "type":
                                                "invalid_request_error", "param": None,
                                                "code": "not_found"}}, status=404)
        if request.query.get("stream") == "true":
            return await events(request, made)
        return web.json_response({**made, "status": "cancelled"} if request.method == "POST"
                                 else made)

    async def health(_: web.Request) -> web.Response:
        return web.Response(body=OK_HEALTH, content_type="application/json")

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_post("/v1/responses", create)
    app.router.add_get("/v1/responses/{rid}", read)
    app.router.add_post("/v1/responses/{rid}/cancel", read)
    return app


async def events(request: web.Request, made: dict) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"content-type": "text/event-stream"})
    await resp.prepare(request)
    for kind in ("response.created", "response.completed"):
        await resp.write(f"data: {json.dumps({'type': kind, 'response': made})}\n\n".encode())
    await resp.write_eof()
    return resp


@contextlib.asynccontextmanager
async def gateway(workdir):
    """The replica behind the picker (RULES, tenants by TENANT) and Envoy; yields (Envoy's
    URL, the replica's URL, the picker)."""
    async with contextlib.AsyncExitStack() as stack:
        (url,) = await stack.enter_async_context(apps_served(replica()))
        picker = Picker(Router(ReplicaSet([url], interval=3600), lookup_timeout=LOOKUP_TIMEOUT,
                               affinity=ResponseAffinity(tenant_header=TENANT)),
                        parse_rewrites(RULES))
        port = await stack.enter_async_context(picking(picker, "127.0.0.1", 0))
        envoy = Envoy(port, workdir)
        await asyncio.to_thread(envoy.start)
        stack.push_async_callback(asyncio.to_thread, envoy.stop)
        yield envoy.url, url, picker


async def read_back(s, url: str, rid: str, tenant: str = "a", how: str = "get"
                    ) -> tuple[int, dict]:
    """(status, the response) of a GET of ``rid`` (``how``: "stream": its events' responses
    must agree; "cancel": POST .../cancel)."""
    call = s.post(f"{url}/v1/responses/{rid}/cancel", headers={TENANT: tenant}) \
        if how == "cancel" else s.get(f"{url}/v1/responses/{rid}", headers={TENANT: tenant},
                                      params={"stream": "true"} if how == "stream" else None)
    async with call as r:
        if r.content_type != "text/event-stream":
            return r.status, await r.json()
        got = [json.loads(line[6:])["response"] for line in (await r.text()).splitlines()
               if line.startswith("data: ")]
        assert len(got) == 2 and got[0] == got[1], got
        return r.status, got[0]


@pytest.mark.parametrize("stream", [False, True], ids=["json", "sse"])
async def test_a_stored_response_names_the_clients_model(tmp_path, stream):
    async with gateway(tmp_path) as (url, direct, picker), aiohttp.ClientSession() as s:
        status, made = await respond(s, url, "a", model=ASKED, stream=stream)
        assert status == 200 and made["model"] == ASKED, made  # the POST's answer
        for how in ("get", "stream", "cancel"):
            status, out = await read_back(s, url, made["id"], how=how)
            assert status == 200 and out["model"] == ASKED, (how, out)
            assert out["instructions"] == f'"model": "{TARGET}"', out  # nothing else touched
        status, _ = await read_back(s, url, made["id"], tenant="b")
        assert status == 404 and len(picker.names) == 1  # the replica's, for another tenant
        # a model no rule matches, and a response made past the picker: as stored
        status, other = await respond(s, url, "a", model="other", stream=stream)
        assert (await read_back(s, url, other["id"]))[1]["model"] == "other"
        status, past = await respond(s, direct, "a", model=TARGET)
        assert (await read_back(s, url, past["id"]))[1]["model"] == TARGET
        assert len(picker.names) == 1
