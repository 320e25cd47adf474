"""A Responses API follow-up whose holder is down, through the router
(kvpool/router/affinity.py NOTE(holder-down); docs/architecture.md, Router): three real
aiohttp replicas on 127.0.0.1, only ``holder`` storing RID (the others answer 404 for it, as a
kvpool serve does for a response it does not hold), the holder stopped by its runner's
cleanup.

Before, a known holder was tried first and the other replicas followed as retries: with the
holder gone the next one's 404 told the client its response did not exist. Now the holder is
tried alone and the client gets the router's 503 ``response_unavailable`` naming the
response, with Retry-After; no other replica is asked. An id no replica holds is placed as
before and gets a replica's 404. The last test does the same on two real ``kvpool serve``
replicas, the holder stopped by pid.
"""

from __future__ import annotations

import asyncio
import contextlib

import aiohttp
import pytest
from aiohttp import web

from tests.router.helpers import apps_served, router, spawn_many
from tests.router.test_router_hostile_replica import OK_HEALTH

RID = "resp_" + "1" * 32
FOLLOW_UP = {"model": "m", "input": "and then?", "previous_response_id": RID}


def missing(rid: str) -> web.Response:
    """What a replica not holding ``rid`` answers."""
    return web.json_response({"error": {"message": f"no response {rid}", "type":
                                        "invalid_request_error", "param": None,
                                        "code": "not_found"}}, status=404)


async def dropped(request: web.Request) -> web.Response:
    """``request`` read whole and its connection closed unanswered (a replica that took it
    and crashed)."""
    await request.read()
    assert request.transport is not None
    request.transport.close()
    return web.Response(status=500)  # never sent: the connection is gone


def replica(name: str, holds: bool, asked: list[str], hung: asyncio.Event | None = None,
            drop: asyncio.Event | None = None) -> web.Application:
    """Holds RID or not; each follow-up it gets (a POST naming a response, a GET of one) is
    appended to ``asked`` as "name POST" / "name GET". While ``hung`` is set, it answers
    nothing (/health included) until ``hung`` is cleared; while ``drop`` is set, it reads a
    follow-up whole and closes the connection without an answer."""
    hung = hung or asyncio.Event()

    @web.middleware
    async def silent(request: web.Request, handler):
        if request.path.startswith("/v1/responses"):
            asked.append(f"{name} {request.method}")
            if drop is not None and drop.is_set():
                return await dropped(request)
        if not hung.is_set():
            return await handler(request)
        while hung.is_set():
            await asyncio.sleep(0.05)
        return web.Response(status=500)  # its caller left long ago

    async def create(request: web.Request) -> web.Response:
        named = (await request.json()).get("previous_response_id")
        if named is not None and not (holds and named == RID):
            return missing(named)
        return web.json_response({"id": "resp_" + name, "object": "response"})

    async def stored(request: web.Request) -> web.Response:
        rid = request.match_info["rid"]
        return web.json_response({"id": RID, "object": "response"}) \
            if holds and rid == RID else missing(rid)

    async def health(_: web.Request) -> web.Response:
        return web.Response(body=OK_HEALTH, content_type="application/json")

    app = web.Application(middlewares=[silent])
    app.router.add_get("/health", health)
    app.router.add_post("/v1/responses", create)
    app.router.add_get("/v1/responses/{rid}", stored)
    return app


@contextlib.asynccontextmanager
async def fleet(hung: asyncio.Event | None = None, drop: asyncio.Event | None = None,
                **beats):
    """Two replicas, then the holder (``hung``: its silence; ``drop``: its dropping the
    follow-ups), behind a router (``beats``: its ReplicaSet's) that has learnt RID's holder
    (a search); yields (the router, its URL, a client session, the holder's stop, the
    follow-ups the replicas got since)."""
    asked: list[str] = []
    async with contextlib.AsyncExitStack() as stack:
        held = contextlib.AsyncExitStack()
        (holder,) = await held.enter_async_context(apps_served(
            replica("holder", True, asked, hung, drop)))
        stack.push_async_callback(held.aclose)
        if hung is not None:
            stack.callback(hung.clear)  # its handlers end before its runner's cleanup
        others = await stack.enter_async_context(apps_served(
            replica("a", False, asked), replica("b", False, asked)))
        r, url = await stack.enter_async_context(router([*others, holder],
                                                        **(beats or {"interval": 3600})))
        s = await stack.enter_async_context(aiohttp.ClientSession())
        assert (await follow(s, url, get=False))[0] == 200  # found by a search, learnt
        assert r.affinity.owner_url(RID) == holder
        asked.clear()
        yield r, url, s, held.aclose, asked


async def follow(s: aiohttp.ClientSession, url: str, get: bool, rid: str = RID
                 ) -> tuple[int, dict, dict]:
    """(status, headers, the answer's error object or {}) of a follow-up naming ``rid``."""
    call = s.get(f"{url}/v1/responses/{rid}") if get else \
        s.post(url + "/v1/responses", json={**FOLLOW_UP, "previous_response_id": rid})
    async with call as resp:
        return await answered(resp)


async def cancel(s: aiohttp.ClientSession, url: str, rid: str = RID) -> tuple[int, dict, dict]:
    """``follow``'s triple for ``POST /v1/responses/{rid}/cancel``: a POST naming the
    response in its path, which is no body field (its error's param is null)."""
    async with s.post(f"{url}/v1/responses/{rid}/cancel") as resp:
        return await answered(resp)


async def answered(resp: aiohttp.ClientResponse) -> tuple[int, dict, dict]:
    out = await resp.json()
    if "error" in out:
        assert set(out["error"]) == {"message", "type", "param", "code"}, out
    return resp.status, dict(resp.headers), out.get("error", {})


@pytest.mark.parametrize("seen_down", [False, True], ids=["refused", "beat_failed"])
async def test_a_follow_up_to_a_stopped_holder_is_a_503_naming_it(seen_down):
    """refused: the holder stops after the router's last beat (the request's connection is
    refused); beat_failed: a beat found it down first (the router answers without trying)."""
    async with fleet() as (r, url, s, stop, asked):
        await stop()
        if seen_down:
            await r.replicas.poll_once(r.session)
            assert [x.url for x in r.replicas.healthy()] == [x.url for x in
                                                             r.replicas.replicas[:2]]
        for get in (False, True, False, True):  # each time, not only the first
            status, headers, err = await follow(s, url, get)
            assert status == 503 and headers["Retry-After"] == "1", (status, err)
            assert err["code"] == "response_unavailable" and err["type"] == "server_error"
            assert RID in err["message"] and "retry later" in err["message"], err
            assert err["param"] == (None if get else "previous_response_id"), err
        status, _, err = await cancel(s, url)  # the path names it: param null
        assert (status, err["code"], err["param"]) == (503, "response_unavailable", None), err
        assert asked == []  # no other replica was asked, and nothing searched


@pytest.mark.parametrize("get", [False, True], ids=["post", "get"])
async def test_a_follow_up_its_holder_goes_silent_on_is_504_for_a_post_503_for_a_get(get):
    """The holder stops answering anything: the router's beats take it for silent and end
    the follow-up it was sent (replicas.py NOTE(liveness)); none goes elsewhere. A GET may be
    sent again: the 503 naming the response, with Retry-After. A POST may have run there:
    504 ``replica_unresponsive``, no Retry-After, as Envoy answers the picker's clients with
    its own 504 (before: the 503, inviting a blind second run). The next follow-up finds the
    holder failing its beats: the 503, the holder not tried."""
    hung = asyncio.Event()
    async with fleet(hung, interval=0.1, down_after=0.3) as (_r, url, s, _stop, asked):
        hung.set()
        status, headers, err = await follow(s, url, get)
        if get:
            assert status == 503 and headers["Retry-After"] == "1", (status, err)
            assert err["code"] == "response_unavailable" and RID in err["message"], err
        else:
            assert status == 504 and "Retry-After" not in headers, (status, err)
            assert (err["code"], err["type"], err["param"]) == (
                "replica_unresponsive", "server_error", None), err
            assert RID in err["message"] and "may have run" in err["message"], err
        status, headers, err = await follow(s, url, not get)
        assert (status, headers["Retry-After"], err["code"]) == (
            503, "1", "response_unavailable"), err
        # the one it was sent, and no other replica
        assert asked == ["holder GET" if get else "holder POST"]


async def test_a_holder_dropping_a_follow_up_it_took_is_503_for_a_get_502_for_a_post():
    """NOTE(holder-down) in kvpool/router/affinity.py: the holder reads the follow-up and
    closes the connection without an answer. A GET may be sent again: the 503 naming the
    response, with Retry-After (before: the 502); a POST may have run there: the 502
    ``replica_failed``, no Retry-After. Neither goes to another replica or is retried."""
    drop = asyncio.Event()
    async with fleet(drop=drop) as (r, url, s, _stop, asked):
        drop.set()
        status, headers, err = await follow(s, url, get=True)
        assert status == 503 and headers["Retry-After"] == "1", (status, err)
        assert err["code"] == "response_unavailable" and RID in err["message"], err
        assert err["param"] is None, err
        status, headers, err = await follow(s, url, get=False)
        assert status == 502 and "Retry-After" not in headers, (status, err)
        assert (err["code"], err["type"]) == ("replica_failed", "server_error"), err
        assert err["message"].startswith(f"the replica holding response '{RID}' failed "
                                         "before it answered; the request was not retried"), err
        assert asked == ["holder GET", "holder POST"]  # once each, on the holder alone
        assert r.replicas.find(r.affinity.owner_url(RID)).healthy  # took them: not down


async def test_a_follow_up_to_a_live_holder_is_served_by_it_alone():
    async with fleet() as (_r, url, s, _stop, asked):
        for get in (False, True):
            status, _, err = await follow(s, url, get)
            assert status == 200, err
        assert asked == ["holder POST", "holder GET"]


@pytest.mark.parametrize("holder_up", [True, False], ids=["holder_up", "holder_stopped"])
async def test_an_id_no_replica_holds_gets_a_replicas_404(holder_up):
    async with fleet() as (r, url, s, stop, asked):
        if not holder_up:
            await stop()
            await r.replicas.poll_once(r.session)
        for get in (False, True):
            status, _, err = await follow(s, url, get, rid="resp_unknown")
            assert status == 404 and err["code"] == "not_found", err
            assert err["message"] == "no response resp_unknown", err  # the replica's own
        searched = 2 * len(r.replicas.healthy())  # a GET to each healthy replica, twice
        assert sum(a.endswith("GET") for a in asked) == searched + 1, asked
        assert sum(a.endswith("POST") for a in asked) == 1, asked  # placed on one replica


@pytest.fixture
def served_pair():
    """Two real ``kvpool serve`` replicas, stopped by pid at the end (a fixture, as
    test_router_responses.py's: their start is setup)."""
    started = spawn_many({name: () for name in ("pin-a", "pin-b")})
    try:
        yield started
    finally:
        for srv in started.values():
            srv.stop(timeout=20)


async def test_real_replicas_a_stopped_holders_follow_ups_get_503_others_404(served_pair):
    """A response made through the router, its replica stopped by pid: its follow-ups get the
    router's 503; an id never issued still gets the live replica's own 404."""
    urls = [srv.url for srv in served_pair.values()]
    async with router(urls, interval=3600) as (r, url), aiohttp.ClientSession() as s:
        async with s.post(url + "/v1/responses", json={
                "input": "hello", "max_output_tokens": 2, "temperature": 0}) as resp:
            assert resp.status == 200, await resp.text()
            rid = (await resp.json())["id"]
        holder = r.affinity.owner_url(rid)
        next(srv for srv in served_pair.values() if srv.url == holder).stop(timeout=20)
        for get in (False, True):
            status, headers, err = await follow(s, url, get, rid)
            assert status == 503 and headers["Retry-After"] == "1", (status, err)
            assert err["code"] == "response_unavailable" and rid in err["message"], err
        status, _, err = await follow(s, url, False, "resp_" + "0" * 32)
        assert status == 404 and err["code"] == "previous_response_not_found", err
