"""Which failures the router retries on another replica (kvpool/router/upstream.py
NOTE(retry)): only those where the replica cannot have started the request, at most
``max_retries`` times. Replicas are real aiohttp servers on 127.0.0.1 (in-process, or
processes stopped by pid for the one that dies)."""

from __future__ import annotations

import contextlib
import subprocess
import sys

import aiohttp
from aiohttp import web

from tests.router.helpers import apps_served, router

OK_HEALTH = b'{"status": "ok", "num_running": 0, "num_waiting": 0}'
# a replica whose generation route kills its own process once it has read the request
DYING_REPLICA = """
import asyncio, os
from aiohttp import web
OK = b'{"status": "ok", "num_running": 0, "num_waiting": 0}'
async def health(_):
    return web.Response(body=OK, content_type="application/json")
async def die(request):
    await request.read()
    os._exit(3)
async def main():
    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_post("/v1/completions", die)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    print(runner.addresses[0][1], flush=True)
    await asyncio.Event().wait()
asyncio.run(main())
"""


def replica(hits: list, status: int, headers: dict | None = None,
            code: str | None = None) -> web.Application:
    """A replica whose every completion is ``status`` with an OpenAI error body (``code``,
    else ``replica_<status>``), counted."""
    async def health(_):
        return web.Response(body=OK_HEALTH, content_type="application/json")

    async def answer(request):
        await request.read()
        hits.append(status)
        body = {"error": {"message": "boom", "type": "server_error", "param": None,
                          "code": code or f"replica_{status}"}}
        return web.json_response(body, status=status, headers=headers)

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_post("/v1/completions", answer)
    return app


async def post(url: str) -> tuple[int, dict]:
    async with aiohttp.ClientSession() as s, \
            s.post(url + "/v1/completions", json={"prompt": "x"}) as resp:
        return resp.status, await resp.json()


async def test_a_deterministic_500_runs_once_and_is_the_clients_answer():
    """Before: retried on every replica in turn (3 hits), then the router's own 502."""
    hits: list[int] = []
    apps = [replica(hits, 500) for _ in range(3)]
    async with apps_served(*apps) as urls, router(urls, policy="round_robin") as (_, url):
        status, body = await post(url)
    assert hits == [500]
    assert status == 500 and body["error"]["code"] == "replica_500"


async def test_a_refusing_replica_is_skipped_to_the_next_but_a_500_is_not():
    """The first replica refuses connections (stopped after its first health beat): the next
    is tried; it answers 500, which is not retried on the third. Before: the 500 was retried
    and the third's 200 came back."""
    hits: list[int] = []
    async with apps_served(replica(hits, 500), replica(hits, 200)) as urls, \
            contextlib.AsyncExitStack() as stack:
        gone = await stack.enter_async_context(apps_served(replica(hits, 200)))
        async with router([*gone, *urls], policy="round_robin", interval=3600) as (r, url):
            assert len(r.replicas.healthy()) == 3
            await stack.aclose()  # nothing listens on its port now: connections refused
            status, body = await post(url)
            assert not r.replicas.replicas[0].healthy
    assert hits == [500]
    assert status == 500 and body["error"]["code"] == "replica_500"


async def test_full_replicas_are_retried_at_most_max_retries_times():
    """Four replicas answering 503 + Retry-After with a code that says nothing ran (a full
    queue: NOTE(refusal-code) in kvpool/router/refusals.py): 1 + max_retries tries, then the
    last one's own 503. Before: every replica was tried."""
    hits: list[int] = []
    apps = [replica(hits, 503, {"Retry-After": "1"}, "queue_full") for _ in range(4)]
    async with apps_served(*apps) as urls, \
            router(urls, policy="round_robin", max_retries=2) as (_, url):
        status, body = await post(url)
    assert hits == [503, 503, 503]
    assert status == 503 and body["error"]["code"] == "queue_full"


@contextlib.contextmanager
def dying_replicas(n: int):
    procs = [subprocess.Popen([sys.executable, "-c", DYING_REPLICA], stdout=subprocess.PIPE,
                              text=True) for _ in range(n)]
    try:
        yield procs, [f"http://127.0.0.1:{int(p.stdout.readline())}" for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
            p.wait(timeout=10)
            p.stdout.close()


async def test_a_request_that_kills_its_replica_is_not_replayed_on_the_others():
    """Before: the connection lost before the answer was retried on each replica, and the
    request killed all three."""
    with dying_replicas(3) as (procs, urls):
        async with router(urls, policy="round_robin", interval=3600) as (_, url):
            status, body = await post(url)
        procs[0].wait(timeout=10)  # round robin's first took it and died
        alive = [p.poll() is None for p in procs]
    assert status == 502 and body["error"]["code"] == "replica_failed"
    assert alive == [False, True, True]
    # its words tell of the one replica, not of all three (upstream.py NOTE(one-replica))
    assert body["error"]["message"] == (
        "the replica the request went to failed before it answered; the request was not "
        "retried, as it may have run there: send it again only if running it twice is safe")

