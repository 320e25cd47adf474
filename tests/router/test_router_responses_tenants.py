"""Response affinity shared between tenants (affinity.py NOTE(fair-lru), NOTE(search-share)):
a real router over two replica apps on 127.0.0.1 that play ``kvpool serve --tenant-header
X-Tenant``'s Responses routes (each response stored for its tenant on the replica that made
it; any other tenant or replica answers 404). Before, one least-recently-used map and one
pool of search slots served every tenant: tenant b making responses pushed tenant a's ids
out, and b's follow-ups holding the search slots sent a's follow-up to a replica by load,
which answered 404 for a response that exists. A router told no tenants cannot keep them apart
by id (affinity.py NOTE(contested)): two tenants naming their responses alike each reach their
own."""

from __future__ import annotations

import asyncio
import itertools

import aiohttp
from aiohttp import web

from kvpool.router.affinity import ResponseAffinity
from tests.router.helpers import apps_served, router

TENANT = "X-Tenant"
_ids = itertools.count()


def replica_app(stall: dict[str, asyncio.Event]) -> web.Application:
    """A replica's Responses routes: POST stores a response for its tenant, GET answers it
    (a GET for an id in ``stall`` waits for its event first, then says 404)."""
    held: set[tuple[str, str]] = set()

    def missing(rid: str) -> web.Response:
        return web.json_response({"error": {"message": f"no response {rid}", "type":
                                  "invalid_request_error", "param": None, "code": None}},
                                 status=404)

    async def create(request: web.Request) -> web.Response:
        body = await request.json()
        prev, tenant = body.get("previous_response_id"), request.headers.get(TENANT, "")
        if prev is not None and (tenant, prev) not in held:
            return missing(prev)
        rid = body.get("request_id") or f"resp_{next(_ids):032x}"  # vLLM's: client-named
        held.add((tenant, rid))
        return web.json_response({"id": rid, "object": "response", "status": "completed",
                                  "previous_response_id": prev})

    async def get(request: web.Request) -> web.Response:
        rid = request.match_info["rid"]
        if rid in stall:
            await stall[rid].wait()
        if (request.headers.get(TENANT, ""), rid) not in held:
            return missing(rid)
        return web.json_response({"id": rid, "object": "response", "status": "completed"})

    app = web.Application()
    app.router.add_post("/v1/responses", create)
    app.router.add_get("/v1/responses/{rid}", get)
    async def health(request: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    app.router.add_get("/health", health)
    return app


async def post(s, url, tenant, **body) -> tuple[int, dict]:
    async with s.post(url + "/v1/responses", headers={TENANT: tenant},
                      json={"input": "hi", **body}) as r:
        return r.status, await r.json()


async def get(s, url, rid, tenant) -> tuple[int, dict]:
    async with s.get(f"{url}/v1/responses/{rid}", headers={TENANT: tenant}) as r:
        return r.status, await r.json()


def owner(aff: ResponseAffinity, rid: str, tenant: str) -> str | None:
    return aff.owner_url(rid, aff.tenant([(TENANT, tenant)]))  # type: ignore[arg-type]


async def made_on_the_second(r, url, s, tenant="a") -> str:
    """A response of ``tenant``'s that lives on the router's second replica only (new ones
    are placed by load: round robin here)."""
    second = r.replicas.replicas[1].url
    for _ in range(4):
        status, made = await post(s, url, tenant)
        assert status == 200, made
        if owner(r.affinity, made["id"], tenant) == second:
            return made["id"]
    raise AssertionError("no response landed on the second replica")


async def test_a_tenants_flood_of_responses_leaves_anothers_follow_ups_their_replica():
    """max_lookups 0: what the map forgets is not searched for, so a forgotten id is placed
    by load, on the first replica, which does not hold it."""
    aff = ResponseAffinity(max_ids=8, max_lookups=0, tenant_header=TENANT)
    async with apps_served(replica_app({}), replica_app({})) as urls, \
            router(urls, interval=3600, affinity=aff) as (r, url), \
            aiohttp.ClientSession() as s:
        rid = await made_on_the_second(r, url, s)
        assert (await get(s, urls[0], rid, "a"))[0] == 404  # it lives on the second only
        for _ in range(40):
            assert (await post(s, url, "b"))[0] == 200
        assert len(aff) == 8  # b made room from its own ids (told no tenants: from a's)
        status, got = await get(s, url, rid, "a")
        assert status == 200 and got["id"] == rid, got  # before the fix: 404 from the first
        status, after = await post(s, url, "a", previous_response_id=rid)
        assert status == 200 and after["previous_response_id"] == rid, after


async def _until(cond, what: str) -> None:
    for _ in range(2000):
        if cond():
            return
        await asyncio.sleep(0.005)
    raise AssertionError(f"never: {what}")


async def test_a_tenant_holding_every_search_slot_leaves_another_one():
    """b's follow-ups for ids no replica answers yet hold both search slots and wait for a
    third; a's follow-up waits, and the first slot freed goes to a (b is over its share),
    whose search finds its replica. Before: a was placed by load at once (404)."""
    b_ids = [f"resp_b{i}" for i in range(3)]
    stall = {rid: asyncio.Event() for rid in b_ids}
    aff = ResponseAffinity(max_lookups=2, timeout=20, tenant_header=TENANT)
    async with apps_served(replica_app(stall), replica_app(stall)) as urls, \
            router(urls, interval=3600, affinity=aff) as (r, url), \
            aiohttp.ClientSession() as s:
        status, made = await post(s, urls[1], "a")  # made before this router ran
        assert status == 200 and owner(aff, made["id"], "a") is None
        b = [asyncio.ensure_future(get(s, url, x, "b")) for x in b_ids]
        try:
            await _until(lambda: aff.searching == 2 and aff.waiting == 1,
                         "b holds both slots and its third follow-up waits (before: placed)")
            a = asyncio.ensure_future(get(s, url, made["id"], "a"))
            await _until(lambda: aff.waiting == 2 or a.done(), "a waits")
            stall[b_ids[0]].set()  # one of b's searches ends (404 everywhere)
            status, got = await a
        finally:
            for e in stall.values():
                e.set()
        assert [x[0] for x in await asyncio.gather(*b)] == [404] * 3
        assert status == 200 and got["id"] == made["id"], got  # before the fix: 404
        assert owner(aff, made["id"], "a") == urls[1]


async def test_two_tenants_naming_their_responses_alike_each_reach_their_own():
    """A router told no tenants, over replicas that keep tenants apart: tenant b names its
    response as tenant a did (``request_id``, vLLM's). Before NOTE(contested) the id was the
    latest claimant's, b's replica, and a's GET and follow-up drew its 404."""
    async with apps_served(replica_app({}), replica_app({})) as urls, \
            router(urls, interval=3600) as (r, url), aiohttp.ClientSession() as s:
        assert (await post(s, url, "a", request_id="conv-77"))[0] == 200  # round robin: first
        assert (await post(s, url, "b", request_id="conv-77"))[0] == 200  # second
        assert [(await get(s, u, "conv-77", "a"))[0] for u in urls] == [200, 404]
        for tenant in ("a", "b", "a"):
            status, got = await get(s, url, "conv-77", tenant)
            assert status == 200 and got["id"] == "conv-77", (tenant, got)
            status, after = await post(s, url, tenant, previous_response_id="conv-77")
            assert status == 200 and after["previous_response_id"] == "conv-77", (tenant, after)
        assert r.affinity.owner_url("conv-77") is None  # contested: searched each time


async def test_one_tenant_naming_two_responses_alike_gets_its_latest():
    """Told no tenants, one tenant's two responses named alike on two replicas: the search
    finds both and the follow-up goes to the latest claimant (the second replica)."""
    async with apps_served(replica_app({}), replica_app({})) as urls, \
            router(urls, interval=3600) as (r, url), aiohttp.ClientSession() as s:
        for _ in range(2):
            assert (await post(s, url, "a", request_id="conv-9"))[0] == 200
        assert [(await get(s, u, "conv-9", "a"))[0] for u in urls] == [200, 200]
        for _ in range(2):
            status, after = await post(s, url, "a", previous_response_id="conv-9")
            assert status == 200 and owner(r.affinity, after["id"], "a") == urls[1], after
        assert r.affinity.searches == 2 and r.affinity.owner_url("conv-9") is None
