"""Response affinity through the router, on two real ``kvpool serve --tenant-header X-Tenant``
replicas (stopped by pid): each keeps its stored responses in its own process, so a follow-up
(``previous_response_id``, ``GET /v1/responses/{id}``) must reach the replica that made the
response. Before, the router sent both to its first healthy replica: once that was not the
one a response was made on (a replica that refused one connection and came back, a router
restarted), the client got a 404 for its own response."""

from __future__ import annotations

import json
import uuid

import aiohttp
import pytest

from tests.router.helpers import metrics, read_events, router, spawn_many

TENANT = "X-Tenant"
LEARNT = "kvpool_router_response_ids_learnt_total"


@pytest.fixture(scope="module")
def replicas():
    started = spawn_many({rid: ("--tenant-header", TENANT) for rid in ("resp-a", "resp-b")})
    try:
        yield [started["resp-a"].url, started["resp-b"].url]
    finally:
        for srv in started.values():
            srv.stop(timeout=20)


async def create(s, url, tenant="a", stream=False, **body) -> dict:
    """A stored response made through ``url``; its final object (streamed: the completed
    event's)."""
    async with s.post(url + "/v1/responses", headers={TENANT: tenant},
                      json={"input": "hello there", "max_output_tokens": 2, "temperature": 0,
                            "stream": stream, **body}) as r:
        assert r.status == 200, await r.text()
        if not stream:
            return await r.json()
        events = [e for e in await read_events(r) if e != "[DONE]"]
    assert events[0]["type"] == "response.created"
    assert events[-1]["type"] in ("response.completed", "response.incomplete")
    return events[-1]["response"]


async def answer(s, url, rid, tenant="a") -> tuple[int, dict]:
    async with s.get(f"{url}/v1/responses/{rid}", headers={TENANT: tenant}) as r:
        return r.status, await r.json()


async def made_on_the_second(r, url, s, stream=False) -> dict:
    """A response the router placed on its second replica: the first refused a connection
    (out of the healthy list), then passed a beat (first in it again)."""
    first = r.replicas.replicas[0]
    r.replicas.mark_down(first)
    made = await create(s, url, stream=stream)
    await r.replicas.poll_once(r.session)
    assert r.replicas.healthy()[0] is first
    return made


@pytest.mark.parametrize("stream", [False, True])
async def test_follow_ups_reach_the_replica_that_made_the_response(replicas, stream):
    async with router(replicas, interval=3600) as (r, url), aiohttp.ClientSession() as s:
        made = await made_on_the_second(r, url, s, stream)
        rid = made["id"]
        assert (await answer(s, replicas[1], rid))[0] == 200  # it lives there only
        assert (await answer(s, replicas[0], rid))[0] == 404
        status, got = await answer(s, url, rid)
        assert status == 200, got
        assert got["id"] == rid
        after = await create(s, url, previous_response_id=rid, stream=stream)
        assert after["previous_response_id"] == rid
        assert (await answer(s, url, after["id"]))[0] == 200  # learnt from the follow-up


async def test_a_router_that_never_saw_the_response_finds_its_replica(replicas):
    """What a restarted router meets: the response was made before it ran (here: straight
    on the second replica); its first follow-up asks the replicas, the next ones know."""
    async with aiohttp.ClientSession() as s:
        rid = (await create(s, replicas[1]))["id"]
        async with router(replicas, interval=3600) as (r, url):
            status, got = await answer(s, url, rid)
            assert status == 200, got
            assert (await metrics(s, url))[LEARNT][(("source", "search"),)] == 1
            assert r.affinity.owner_url(rid) == replicas[1]
            after = await create(s, url, previous_response_id=rid)
            assert after["previous_response_id"] == rid
            assert (await metrics(s, url))[LEARNT][(("source", "search"),)] == 1  # known now


def _without(body: dict, rid: str) -> str:
    return json.dumps(body).replace(rid, "ID")


async def test_another_tenant_gets_the_owners_404_and_the_router_shows_nothing(replicas):
    """Tenant b holding tenant a's id: the router sends it to the owner (its map is keyed by
    id alone) and the owner answers b its own 404, the same answer (but the id) as for an id
    never issued, with the router's /metrics unchanged by either."""
    async with router(replicas, interval=3600) as (r, url), aiohttp.ClientSession() as s:
        rid = (await made_on_the_second(r, url, s))["id"]
        assert r.affinity.owner_url(rid) == replicas[1]
        before = await metrics(s, url)
        searches = r.affinity.searches
        status, known = await answer(s, url, rid, tenant="b")
        assert r.affinity.searches == searches  # straight to the owner, which said 404
        assert status == 404, known
        assert (await answer(s, replicas[1], rid, tenant="b")) == (404, known)
        never = "resp_" + uuid.uuid4().hex
        status, unknown = await answer(s, url, never, tenant="b")
        assert status == 404 and _without(unknown, never) == _without(known, rid)
        for prev in (rid, never):
            async with s.post(url + "/v1/responses", headers={TENANT: "b"},
                              json={"input": "x", "previous_response_id": prev}) as resp:
                assert resp.status == 404
                assert (await resp.json())["error"]["code"] == "previous_response_not_found"
        after = await metrics(s, url)
        for name in (LEARNT, "kvpool_router_response_ids"):
            assert after[name] == before[name], name
        assert (await answer(s, url, rid))[0] == 200  # tenant a still reads it


async def test_a_store_false_creation_teaches_the_router_nothing(replicas):
    """NOTE(unstored) in kvpool/router/affinity.py: no replica keeps that response, so its id
    takes no place in the map; a stored one's does. Before, both were learnt."""
    async with router(replicas, interval=3600) as (r, url), aiohttp.ClientSession() as s:
        made = await create(s, url, store=False)
        assert (await answer(s, url, made["id"]))[0] == 404  # kept nowhere
        assert len(r.affinity) == 0 and r.affinity.learnt["answer"] == 0
        kept = await create(s, url)
        assert r.affinity.owner_url(kept["id"]) is not None
        assert len(r.affinity) == 1
