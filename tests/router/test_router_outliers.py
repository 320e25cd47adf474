"""Passive outlier ejection (kvpool/router/outliers.py NOTE(outlier)) and the cap on a lookup's
hit claim (kvpool/router/scoring.py NOTE(hit-cap)).

A replica whose /health is fine, whose lookup claims 10**9 hit tokens for every prompt and whose
generation answers a 500 at once drew every request and failed each (the outside probe's
``lookup_liar.sh liar500``). Now a run of failures ejects it for a while, its claim counts at
most the prompt's bound, and after its ejection it is back with its run reset, as Envoy resets
it (before, one failure ejected it again: one failing client request per ejection kept a healthy
replica out). The replicas are real aiohttp servers on 127.0.0.1; the readmission's timing is
the detector's alone (a bounded wait, no router)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging

import aiohttp
import pytest
from aiohttp import web

from kvpool.router.outliers import OutlierDetection, failure_of
from kvpool.router.proxy import Router
from kvpool.router.replica import Replica
from kvpool.router.replicas import ReplicaSet
from kvpool.router.scoring import prompt_bound
from kvpool.router.upstream import Failure
from tests.router.helpers import LOOKUP_TIMEOUT, apps_served, metrics, served

HEALTH = b'{"status": "ok", "num_running": 0, "num_waiting": 0}'
BODY = json.dumps({"prompt": "hi", "max_tokens": 1}).encode()
RUN = 3  # failures in a row that eject


def replica(name: str, hits: int, status: int, got: list[str],
            answer=None) -> web.Application:
    """/health fine; its lookup claims ``hits``; /v1/completions answers ``status`` at once,
    recording ``name`` in ``got`` (or ``answer`` answers it)."""
    async def health(_):
        return web.Response(body=HEALTH, content_type="application/json")

    async def lookup(_):
        return web.json_response({"replica_id": name, "block_size": 16, "device_hit_tokens":
                                  hits, "host_hit_tokens": 0, "num_running": 0,
                                  "num_waiting": 0, "free_device_blocks": 10})

    async def complete(_):
        got.append(name)
        return web.json_response({"error": {"message": "engine broken"}} if status >= 500
                                 else {"id": "x", "choices": []}, status=status)

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_post("/v1/kvpool/lookup", lookup)
    app.router.add_post("/v1/completions", answer or complete)
    return app


async def post(s, url) -> int:
    async with s.post(url + "/v1/completions", data=BODY,
                      headers={"Content-Type": "application/json"}) as r:
        await r.read()
        return r.status


def ejections(m, name: str) -> float:
    return m["kvpool_router_replica_ejections_total"][(("replica", name),)]


async def test_a_replica_failing_fast_is_ejected(caplog):
    caplog.set_level(logging.INFO, "kvpool.router")
    got: list[str] = []
    apps = replica("liar", 10 ** 9, 500, got), replica("good", 0, 200, got)
    async with apps_served(*apps) as urls:
        r = Router(ReplicaSet(urls, names=dict(zip(urls, ("liar", "good")))),
                   lookup_timeout=LOOKUP_TIMEOUT,
                   outliers=OutlierDetection(consecutive=RUN, base=60.0, longest=600.0))
        async with served(r) as url, aiohttp.ClientSession() as s:
            assert [await post(s, url) for _ in range(RUN)] == [500] * RUN
            assert [await post(s, url) for _ in range(5)] == [200] * 5  # ejected
            m = await metrics(s, url)
            assert ejections(m, "liar") == 1 and ejections(m, "good") == 0
            # NOTE(hit-cap): counted at most at the body's bound, never 10**9
            assert m["kvpool_router_predicted_hit_tokens_total"][()] == \
                RUN * prompt_bound(len(BODY))
    assert got == ["liar"] * RUN + ["good"] * 5
    assert sum(1 for rec in caplog.records if "ejected for 60 s" in rec.message
               and urls[0] in rec.message and "the last 500" in rec.message) == 1


def breaker(got: list[str], large: bool) -> web.Application:
    """The liar's lookup; /v1/completions starts a 200 (an SSE event, or the first 9 MiB of a
    JSON answer: passed on as it comes) and then breaks its connection."""
    async def complete(request):
        got.append("breaker")
        resp = web.StreamResponse(headers={"Content-Type": "application/json" if large
                                           else "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b'{"x": "' + b"y" * (9 << 20) if large else b'data: {"id": "c"}\n\n')
        request.transport.abort()
        return resp

    return replica("breaker", 10 ** 9, 500, got, complete)


@pytest.mark.parametrize("large", [False, True], ids=["stream", "large-answer"])
async def test_answers_broken_after_their_200_eject_the_replica(large):
    """Before, an answer that broke off after its status line counted as a success: a replica
    that started every answer and broke it kept drawing the traffic its lookup claimed."""
    got: list[str] = []
    apps = breaker(got, large), replica("good", 0, 200, got)
    async with apps_served(*apps) as urls:
        r = Router(ReplicaSet(urls, names=dict(zip(urls, ("breaker", "good")))),
                   lookup_timeout=LOOKUP_TIMEOUT,
                   outliers=OutlierDetection(consecutive=RUN, base=60.0, longest=600.0))
        async with served(r) as url, aiohttp.ClientSession() as s:
            for _ in range(RUN):
                with contextlib.suppress(aiohttp.ClientPayloadError):
                    await post(s, url)
            assert [await post(s, url) for _ in range(2)] == [200] * 2
            assert ejections(await metrics(s, url), "breaker") == 1
    assert got == ["breaker"] * RUN + ["good"] * 2


async def _readmitted(det: OutlierDetection, a: Replica, b: Replica) -> None:
    for _ in range(400):  # bounded: the 0.05 s ejection ends
        if a in det.picks([a, b]):
            return
        await asyncio.sleep(0.01)
    raise AssertionError("never readmitted")


async def test_a_readmitted_replica_needs_a_new_run_and_is_out_again_for_longer(caplog):
    caplog.set_level(logging.WARNING, "kvpool.router")
    a, b = Replica("http://a:1"), Replica("http://b:1")
    det = OutlierDetection(consecutive=2, base=0.05, longest=1.0)
    for _ in range(2):
        det.observe(a, web.Response(status=502), lambda: [a, b])
    assert det.picks([a, b]) == [b] and a.outlier.total == 1
    for _ in range(3):  # b's run passes the bound while a is out: at most half, not ejected
        det.observe(b, web.Response(status=500), lambda: [a, b])
    await _readmitted(det, a, b)
    assert det.picks([a, b]) == [a, b] and a.outlier.failures == 0  # Envoy's reset
    det.observe(a, Failure("failed"), lambda: [a, b])  # one failure: still in the picks
    assert det.picks([a, b]) == [a, b] and a.outlier.total == 1
    det.observe(a, Failure("failed"), lambda: [a, b])  # a new run of 2: out, for longer
    assert det.picks([a, b]) == [b] and (a.outlier.total, a.outlier.count) == (2, 2)
    await _readmitted(det, a, b)
    det.observe(b, web.Response(status=503), lambda: [a, b])  # b's 4th in a row ejects it
    assert det.picks([a, b]) == [a]
    said = [m.split(": ", 1)[1].split(",")[0] for m in caplog.messages if "ejected for" in m]
    assert said == ["2 failed requests in a row"] * 2 + ["4 failed requests in a row"], said
    det.observe(a, web.Response(status=200), lambda: [a, b])
    assert a.outlier.failures == 0


async def test_the_last_healthy_replica_is_never_ejected():
    got: list[str] = []
    async with apps_served(replica("only", 0, 500, got)) as urls:
        r = Router(ReplicaSet(urls, names={urls[0]: "only"}), lookup_timeout=LOOKUP_TIMEOUT,
                   outliers=OutlierDetection(consecutive=1))
        async with served(r) as url, aiohttp.ClientSession() as s:
            assert [await post(s, url) for _ in range(3)] == [500] * 3
            assert ejections(await metrics(s, url), "only") == 0
    assert got == ["only"] * 3


def test_what_counts_as_a_failure():
    assert [failure_of(web.Response(status=c)) for c in (200, 404, 500, 503)] == \
        [None, None, "500", "503"]
    assert [failure_of(Failure(k)) for k in ("down", "failed", "silent", "full")] == \
        ["no connection", "connection lost", "went silent", ""]


def test_picks_keep_ejected_replicas_when_no_other_is_left():
    a, b = Replica("http://a:1"), Replica("http://b:1")
    det = OutlierDetection(consecutive=1, base=60.0, longest=60.0)
    det.observe(a, web.Response(status=500), lambda: [a, b])
    assert det.picks([a, b]) == [b]  # a ejected
    assert det.picks([a]) == [a]  # b went unhealthy since: a is picked rather than none
    det.observe(b, web.Response(status=500), lambda: [a, b])
    assert det.picks([a, b]) == [b]  # never both: b stays in
