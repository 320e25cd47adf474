"""The router's shutdown and a replica's drain behind it.

``kvpool router --shutdown-timeout`` (drain.py NOTE(router-drain)): on SIGTERM a real router
process refuses new requests with 503 shutting_down, lets those in flight run until the
deadline, then ends a stream with an error event and ``data: [DONE]`` and a non-stream with
503 request_aborted JSON, and exits 0; a second signal exits at once. Before: every connection
was cut after about 20 s, no ``[DONE]``, no status, and a second signal was ignored.

A replica's 503 ``request_aborted`` (it ran the request, then its drain aborted it) is passed
on, not resent to another replica (refusals.py NOTE(refusal-code)); a ``queue_full`` refusal
still is. Replicas here are real aiohttp servers on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
import time

import aiohttp
import pytest
from aiohttp import web

from kvpool.router.cli import READY_PREFIX
from kvpool.router.drain import FORCED_EXIT_LINE, FORCED_EXIT_STATUS
from tests.router.helpers import read_events, router

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HEALTH = {"status": "ok", "num_running": 0, "num_waiting": 0}


def endless_replica(got: list[str]) -> web.Application:
    """Answers /health; a completion never finishes (a stream sends an event every 50 ms)."""
    async def health(_request):
        return web.json_response(HEALTH)

    async def complete(request):
        body = await request.json()
        got.append("stream" if body.get("stream") else "plain")
        if not body.get("stream"):
            await asyncio.sleep(60)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        while True:
            await resp.write(b'data: {"choices":[{"text":"a","finish_reason":null}]}\n\n')
            await asyncio.sleep(0.05)

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_post("/v1/completions", complete)
    app.router.add_post("/v1/messages", complete)  # streams chunks as endlessly
    return app


@contextlib.asynccontextmanager
async def replica_served(app: web.Application):
    runner = web.AppRunner(app, handler_cancellation=True, shutdown_timeout=0.2)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


@contextlib.asynccontextmanager
async def router_process(replica: str, timeout: float):
    """A real ``kvpool router`` over ``replica``; yields (process, its URL); killed by pid."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "kvpool.cli", "router", "--port", "0", "--replica", replica,
         "--policy", "round_robin", "--health-interval", "0.1",
         "--shutdown-timeout", str(timeout)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 30)
        assert line.startswith(READY_PREFIX), line
        yield proc, "http://" + line[len(READY_PREFIX):].split()[0]
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


async def until_routed(s: aiohttp.ClientSession, url: str) -> None:
    for _ in range(100):  # the router's first beats
        async with s.get(url + "/health") as r:
            if r.status == 200:
                return
        await asyncio.sleep(0.05)
    raise AssertionError("the router never saw its replica healthy")


async def post(s, url, stream):
    body = {"model": "m", "prompt": "x", "max_tokens": 8000, "stream": stream}
    async with s.post(url + "/v1/completions", json=body) as r:
        return r.status, (await read_events(r) if stream else await r.json())


async def test_sigterm_drains_then_ends_streams_with_done_and_others_with_503():
    got: list[str] = []
    async with replica_served(endless_replica(got)) as rep, \
            router_process(rep, 1.0) as (proc, url), aiohttp.ClientSession() as s, \
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as kept:
        await until_routed(s, url)
        stream = asyncio.create_task(post(s, url, True))
        plain = asyncio.create_task(post(s, url, False))
        async with kept.get(url + "/metrics") as r:  # a keep-alive connection, open
            assert r.status == 200
        while len(got) < 2:
            await asyncio.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        t0 = time.monotonic()
        await asyncio.sleep(0.2)
        async with kept.post(url + "/v1/completions", json={"prompt": "x"}) as r:
            assert (r.status, r.headers.get("Retry-After"), (await r.json())["error"]["code"]) \
                == (503, "1", "shutting_down")
        async with kept.get(url + "/metrics/") as r:  # a scrape path of vLLM's, to the end
            assert r.status == 200 and b"kvpool_router" in await r.read()
        (status, events), (pstatus, pbody) = await asyncio.wait_for(
            asyncio.gather(stream, plain), 6)
        took = time.monotonic() - t0
        rc = await asyncio.to_thread(proc.wait, 5)
    assert status == 200 and events[-1] == "[DONE]", events[-3:]
    assert events[-2]["error"]["code"] == "request_aborted"
    assert (pstatus, pbody["error"]["code"]) == (503, "request_aborted")
    assert 0.9 < took < 3.0
    assert rc == 0
    assert "ending 2 request(s)" in proc.stderr.read()


async def test_a_second_signal_exits_at_once():
    got: list[str] = []
    async with replica_served(endless_replica(got)) as rep, \
            router_process(rep, 30.0) as (proc, url), aiohttp.ClientSession() as s:
        await until_routed(s, url)
        stream = asyncio.create_task(post(s, url, True))
        while not got:
            await asyncio.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        await asyncio.sleep(0.3)
        assert proc.poll() is None  # draining: the stream may run 30 s
        proc.send_signal(signal.SIGTERM)
        rc = await asyncio.to_thread(proc.wait, 5)
        stream.cancel()
        with contextlib.suppress(asyncio.CancelledError, aiohttp.ClientError):
            await stream
    assert rc == FORCED_EXIT_STATUS
    assert FORCED_EXIT_LINE in proc.stdout.read()


def refusing_replica(name: str, code: str | None, hits: list[str]) -> web.Application:
    """A replica answering every completion 503 + Retry-After with ``code`` (None: 200)."""
    async def health(_request):
        return web.json_response(HEALTH)

    async def complete(request):
        await request.read()
        hits.append(name)
        if code is None:
            return web.json_response({"served_by": name})
        err = {"error": {"message": "m", "type": "server_error", "param": None, "code": code}}
        return web.json_response(err, status=503, headers={"Retry-After": "1"})

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_post("/v1/completions", complete)
    app.router.add_post("/v1/messages", complete)  # streams chunks as endlessly
    return app


@pytest.mark.parametrize("code, resent", [("request_aborted", False), ("queue_full", True)])
async def test_only_a_refusal_before_any_work_is_resent(code, resent, caplog):
    hits: list[str] = []
    apps = (refusing_replica("a", code, hits), refusing_replica("b", None, hits))
    caplog.set_level(logging.INFO, logger="kvpool.router")
    async with replica_served(apps[0]) as a, replica_served(apps[1]) as b, \
            router([a, b], policy="round_robin", interval=0.1) as (_, url), \
            aiohttp.ClientSession() as s:
        await until_routed(s, url)
        answers = []
        for _ in range(2):  # round robin: one of them goes to "a" first
            async with s.post(url + "/v1/completions", json={"prompt": "x"}) as r:
                answers.append((r.status, r.headers.get("Retry-After"), await r.json()))
    if resent:
        assert [st for st, _, _ in answers] == [200, 200] and hits.count("b") == 2
        assert "refused the request before starting it (503 queue_full)" in caplog.text
    else:
        assert sorted(st for st, _, _ in answers) == [200, 503] and hits.count("b") == 1
        _, after, body = next(a for a in answers if a[0] == 503)
        assert (after, body["error"]["code"]) == ("1", "request_aborted")
        assert "may have run there" in caplog.text


async def test_a_drained_messages_stream_ends_as_anthropic_streams_end():
    """A /v1/messages stream the drain ends gets Anthropic's ``event: error``, no [DONE]
    (kvpool/router/stream_end.py NOTE(stream-end)); it got OpenAI's chunk and [DONE]."""
    got: list[str] = []
    async with replica_served(endless_replica(got)) as rep, \
            router_process(rep, 0.3) as (proc, url), aiohttp.ClientSession() as s:
        await until_routed(s, url)
        body = {"model": "m", "max_tokens": 8000, "stream": True,
                "messages": [{"role": "user", "content": "x"}]}
        async with s.post(url + "/v1/messages", json=body) as r:
            while not got:
                await asyncio.sleep(0.02)
            proc.send_signal(signal.SIGTERM)
            text = (await asyncio.wait_for(r.read(), 10)).decode()
        await asyncio.to_thread(proc.wait, 5)
    tail = text.rstrip().rsplit("\n\n", 1)[-1]
    assert tail.startswith("event: error\n"), text[-300:]
    assert '"type":"error"' in tail.replace(" ", "") and "[DONE]" not in text
