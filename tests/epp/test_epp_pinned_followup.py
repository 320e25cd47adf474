"""A Responses API follow-up whose holder is down (kvpool/epp/picker.py NOTE(pinned);
docs/epp.md, "Responses API follow-ups") through a real Envoy running the shipped
deploy/envoy/envoy-fallback.yaml, the real picker with --fallbacks 2 and real aiohttp replicas
on 127.0.0.1 (Envoy stopped by pid). Only ``holder`` stores resp_1; the others answer 404 for
it, as a kvpool serve does for a response it does not hold.

Before, the pick listed the holder and two fallbacks: with the holder gone Envoy went on to the
next, whose 404 told the client its response did not exist. Now the holder is listed alone and
the client gets a 503 ``response_unavailable`` naming it, with Retry-After; no other replica is
asked to run the follow-up.
"""

from __future__ import annotations

import asyncio
import contextlib

import aiohttp
import pytest
from aiohttp import web

from bench.envoy_proc import Envoy
from kvpool.epp.cli import picking
from kvpool.epp.picker import Picker
from kvpool.router.proxy import Router
from kvpool.router.replicas import ReplicaSet
from tests.epp.test_epp_envoy_fallback import CONFIG, cluster
from tests.epp.test_epp_envoy_gateway_error import IDLE_TIMEOUT
from tests.router.helpers import LOOKUP_TIMEOUT, apps_served
from tests.router.test_router_hostile_replica import OK_HEALTH
from tests.router.test_router_pinned_followup import FOLLOW_UP, RID, cancel, dropped, follow

ROUTE_TIMEOUT = ("                  timeout: 0s\n", "                  timeout: 1s\n")
PER_TRY_TIMEOUT = ("                    num_retries: 2\n",
                   "                    num_retries: 2\n                    per_try_timeout: 1s\n")


def failing(name: str, asked: list[str], drop: asyncio.Event | None,
            hang: asyncio.Event | None):
    """``replica``'s middleware: while ``drop`` (``hang``) is set, a request under
    /v1/responses is read whole, "name METHOD" appended to ``asked``, and the connection
    closed without an answer (nothing answered while it is set)."""
    @web.middleware
    async def dropping(request, handler):
        on = [e for e in (drop, hang) if e is not None and e.is_set()]
        if not on or not request.path.startswith("/v1/responses"):
            return await handler(request)
        asked.append(f"{name} {request.method}")
        if on[0] is drop:
            return await dropped(request)
        await request.read()
        while on[0].is_set():
            await asyncio.sleep(0.05)
        return web.Response(status=500)  # its caller left long ago

    return dropping


def replica(name: str, holds: bool, asked: list[str], drop: asyncio.Event | None = None,
            hang: asyncio.Event | None = None) -> web.Application:
    """Holds RID or not; each follow-up POST it gets is appended to ``asked``; ``drop`` and
    ``hang``: ``failing``."""
    def missing():
        return web.json_response({"error": {"message": f"no response {RID}", "type":
                                            "invalid_request_error", "param": None,
                                            "code": "not_found"}}, status=404)

    async def create(request):
        body = await request.json()
        asked.append(name)
        named = body.get("previous_response_id")
        if named is not None and not (holds and named == RID):
            return missing()
        return web.json_response({"id": "resp_" + "2" * 32, "object": "response"})

    async def stored(request):
        if holds and request.match_info["rid"] == RID:
            return web.json_response({"id": RID, "object": "response"})
        return missing()

    async def health(_):
        return web.Response(body=OK_HEALTH, content_type="application/json")

    app = web.Application(middlewares=[failing(name, asked, drop, hang)])
    app.router.add_get("/health", health)
    app.router.add_post("/v1/responses", create)
    app.router.add_get("/v1/responses/{rid}", stored)
    return app


@contextlib.asynccontextmanager
async def gateway(workdir, drop: asyncio.Event | None = None,
                  hang: asyncio.Event | None = None, edits=()):
    """holder (``drop``: its dropping requests; ``hang``: its silence) and two others behind
    the picker (--fallbacks 2) and Envoy (``edits`` to its config); yields (Envoy's URL, the
    picker, the holder's URL, its stop, the follow-ups each replica got)."""
    asked: list[str] = []
    async with contextlib.AsyncExitStack() as stack:
        others = await stack.enter_async_context(apps_served(
            replica("a", False, asked), replica("b", False, asked)))
        held = contextlib.AsyncExitStack()
        (holder,) = await held.enter_async_context(apps_served(
            replica("holder", True, asked, drop, hang)))
        stack.push_async_callback(held.aclose)
        if hang is not None:
            stack.callback(hang.clear)  # its handlers end before its runner's cleanup
        urls = [holder, *others]
        picker = Picker(Router(ReplicaSet(urls, interval=3600), lookup_timeout=LOOKUP_TIMEOUT),
                        fallbacks=2)
        port = await stack.enter_async_context(picking(picker, "127.0.0.1", 0))
        envoy = Envoy(port, workdir, (cluster(urls), *edits), config=CONFIG)
        await asyncio.to_thread(envoy.start)
        stack.push_async_callback(asyncio.to_thread, envoy.stop)
        yield envoy.url, picker, holder, held.aclose, asked


@pytest.mark.parametrize("seen_down", [False, True], ids=["unreachable", "known_down"])
async def test_a_follow_up_to_a_down_holder_is_a_503_naming_it(tmp_path, seen_down):
    """unreachable: the holder stops after the picker's last beat (Envoy cannot connect);
    known_down: its beat failed too (the picker answers without Envoy trying it)."""
    async with gateway(tmp_path) as (url, picker, holder, stop, asked), \
            aiohttp.ClientSession() as s:
        assert (await follow(s, url, get=False))[0] == 200  # found by search, learnt
        assert asked == ["holder"]
        await stop()
        if seen_down:
            replicas = picker.router.replicas
            replicas.mark_down(replicas.find(holder))
        for get in (False, True, True):  # the picker answers every time, not only once
            status, headers, err = await follow(s, url, get)
            assert status == 503 and headers["Retry-After"] == "1", (status, err)
            assert err["code"] == "response_unavailable" and RID in err["message"], err
            assert err["param"] == (None if get else "previous_response_id"), err
        # a POST naming it in its path: param null, as the router says (the path is no field)
        status, _, err = await cancel(s, url)
        assert (status, err["code"], err["param"]) == (503, "response_unavailable", None), err
        assert asked == ["holder"]  # no other replica was asked to run it


async def test_a_holder_dropping_a_follow_up_it_took_is_503_for_a_get_502_for_a_post(tmp_path):
    """kvpool/router/affinity.py NOTE(holder-down), as the router answers it: the holder reads
    the follow-up and closes the connection (Envoy: connection termination, not retried). A
    GET may be sent again: the 503 naming the response; a POST may have run there: the 502
    ``replica_failed``, no Retry-After (before: the 503, inviting a second run)."""
    drop = asyncio.Event()
    async with gateway(tmp_path, drop) as (url, picker, _holder, _stop, asked), \
            aiohttp.ClientSession() as s:
        assert (await follow(s, url, get=False))[0] == 200  # found by search, learnt
        drop.set()
        status, headers, err = await follow(s, url, get=True)
        assert status == 503 and headers["Retry-After"] == "1", (status, err)
        assert err["code"] == "response_unavailable" and err["param"] is None, err
        assert "connection_termination" in err["message"], err
        status, headers, err = await follow(s, url, get=False)
        assert status == 502 and "Retry-After" not in headers, (status, err)
        assert (err["code"], err["type"]) == ("replica_failed", "server_error"), err
        assert f"the replica holding response '{RID}' failed" in err["message"], err
        assert asked == ["holder", "holder GET", "holder POST"]  # once each, the holder alone
        assert picker.errors[502] == 1 and picker.errors[503] == 1


@pytest.mark.parametrize("edit, details", [(IDLE_TIMEOUT, "stream_idle_timeout"),
                                           (ROUTE_TIMEOUT, "response_timeout"),
                                           (PER_TRY_TIMEOUT, "upstream_per_try_timeout")])
async def test_a_holder_going_silent_on_a_follow_up_is_503_for_a_get_504_for_a_post(
        tmp_path, edit, details):
    """The holder reads the follow-up and answers nothing; Envoy gives up after its stream
    idle timeout (1 s here; the shipped 5 minutes), a route or a per-try timeout (1 s; none
    shipped; the route retries no timeout), and the picker answers as the router does
    (kvpool/router/affinity.py NOTE(holder-down)): a GET, which may be sent again, the 503
    naming the response with Retry-After; a POST, which may have run there, the 504
    ``replica_unresponsive`` naming it, no Retry-After. Before: Envoy's own 504 for both
    (``gateway_error``). Neither went to another replica or was sent twice."""
    hang = asyncio.Event()
    async with gateway(tmp_path, hang=hang, edits=(edit,)) as (
            url, picker, _holder, _stop, asked), aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=20)) as s:
        assert (await follow(s, url, get=False))[0] == 200  # found by search, learnt
        hang.set()
        status, headers, err = await follow(s, url, get=True)
        assert status == 503 and headers["Retry-After"] == "1", (status, err)
        assert err["code"] == "response_unavailable" and err["param"] is None, err
        assert RID in err["message"] and details in err["message"], err
        status, headers, err = await follow(s, url, get=False)
        assert status == 504 and "Retry-After" not in headers, (status, err)
        assert (err["code"], err["type"], err["param"]) == (
            "replica_unresponsive", "server_error", None), err
        assert RID in err["message"] and "may have run" in err["message"], err
        assert asked == ["holder", "holder GET", "holder POST"]  # once each, the holder alone
        assert picker.errors[504] == 1 and picker.errors[503] == 1


async def test_a_follow_up_no_replica_holds_keeps_its_fallbacks(tmp_path):
    async with gateway(tmp_path) as (url, _, _holder, _stop, asked), \
            aiohttp.ClientSession() as s:
        async with s.post(url + "/v1/responses", json={**FOLLOW_UP, "previous_response_id":
                                                       "resp_unknown"}) as r:
            assert r.status == 404  # no replica holds it: a replica's own 404, as before
            assert len(r.headers["x-kvpool-picked"].split(",")) == 3
        assert len(asked) == 1
