"""The router's own sockets: its connection cap leaves room for the upstream socket each proxied
client connection holds (cli.py NOTE(router-cap)), and a connect that fails for want of the
router's own descriptors is its own 503, blaming no replica (connect_errors.py
NOTE(local-exhaustion)).

Before: the default cap was the open-file limit less 64, as a replica's, so streams under the
cap ran the router out of descriptors; its connect's EMFILE was taken for a refusal, the
healthy replica marked down, and clients got 503 ``no_replica``. Real ``kvpool router``
processes under a small RLIMIT_NOFILE, over a real aiohttp replica on 127.0.0.1; each router
is stopped by its pid."""

from __future__ import annotations

import asyncio
import contextlib
import os
import resource
import subprocess
import sys
from collections import Counter

import aiohttp
from aiohttp import web

from kvpool.router.cli import READY_PREFIX
from tests.router.helpers import apps_served, read_events, replica_app

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
HEALTH = {"status": "ok", "num_running": 0, "num_waiting": 0}
LIMIT = 160  # the router's RLIMIT_NOFILE: default cap (160 - 64) // 2 = 48; it was 96
STREAMS = 85  # under the old cap, but two sockets each are more than the limit
OUTCOMES = 60.0  # seconds every client may take to get its answer's head (a loaded box)


def held_replica(release: asyncio.Event) -> web.Application:
    """/health; a stream sends one event and then holds until ``release``; a plain
    completion answers at once."""
    async def health(_request):
        return web.json_response(HEALTH)

    async def complete(request):
        if not (await request.json()).get("stream"):
            return web.json_response({"object": "text_completion", "choices": []})
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b'data: {"choices":[{"text":"a"}]}\n\n')
        await release.wait()
        await resp.write(b"data: [DONE]\n\n")
        return resp

    return replica_app(health, complete)


@contextlib.asynccontextmanager
async def replica_served(release: asyncio.Event):
    """``held_replica`` served; its held streams released before it stops."""
    async with apps_served(held_replica(release)) as (url,):
        try:
            yield url
        finally:
            release.set()


def _limit_files() -> None:  # in the router's child process, before it runs
    resource.setrlimit(resource.RLIMIT_NOFILE, (LIMIT, LIMIT))


@contextlib.asynccontextmanager
async def router_process(replica: str, log_path, *flags: str):
    """A real ``kvpool router`` under RLIMIT_NOFILE LIMIT; yields its URL; killed by pid."""
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "kvpool.cli", "router", "--port", "0", "--replica", replica,
             "--policy", "round_robin", "--health-interval", "0.2", *flags],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=log, text=True, preexec_fn=_limit_files)
    try:
        line = await asyncio.wait_for(asyncio.to_thread(proc.stdout.readline), 60)
        assert line.startswith(READY_PREFIX), line
        yield "http://" + line[len(READY_PREFIX):].split()[0]
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


async def stream(s: aiohttp.ClientSession, url: str, heads: list) -> None:
    """One streamed completion; its outcome appended to ``heads`` once its head came."""
    body = {"model": "m", "prompt": "x", "stream": True}
    try:
        async with s.post(url + "/v1/completions", json=body) as r:
            if r.status != 200:
                heads.append((r.status, (await r.json())["error"]["code"]))
                return
            heads.append((200, None))
            assert (await read_events(r))[-1] == "[DONE]"
    except aiohttp.ClientError as exc:
        heads.append(("error", type(exc).__name__))


async def test_streams_the_default_cap_admits_are_served_and_no_replica_is_blamed(tmp_path):
    release, heads = asyncio.Event(), []
    log = tmp_path / "router.log"
    async with replica_served(release) as rep, router_process(rep, log) as url, \
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0,
                                                                 force_close=True)) as s:
        tasks = [asyncio.create_task(stream(s, url, heads)) for _ in range(STREAMS)]
        for _ in range(int(OUTCOMES / 0.05)):  # every client has its head: all held at once
            if len(heads) == STREAMS:
                break
            await asyncio.sleep(0.05)
        release.set()
        await asyncio.gather(*tasks)
    seen = Counter(heads)
    assert set(seen) == {(200, None), (503, "too_many_connections")}, seen
    assert seen[(200, None)] <= (LIMIT - 64) // 2, seen
    text = log.read_text()
    assert "skipped until" not in text and "is unhealthy" not in text, text


async def hold(port: int) -> asyncio.StreamWriter | None:
    """A client connection the router accepted and answered (then idle, kept alive), or
    None once the router accepts no more (its descriptors all in use)."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return None
    try:
        writer.write(b"GET /health HTTP/1.1\r\nHost: router\r\n\r\n")
        await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5)
    except (OSError, asyncio.IncompleteReadError, TimeoutError):
        writer.close()
        return None
    return writer


async def test_the_routers_own_shortage_is_its_503_and_the_replica_stays_up(tmp_path):
    log = tmp_path / "router.log"
    plain = {"model": "m", "prompt": "x"}
    async with replica_served(asyncio.Event()) as rep, \
            router_process(rep, log, "--max-connections", "1000") as url, \
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as kept:
        async with kept.get(url + "/health") as r:  # this connection is open before the rest
            assert r.status == 200
        held = []
        while len(held) < 2 * LIMIT and (w := await hold(int(url.rsplit(":", 1)[1]))):
            held.append(w)
        answers = []
        for _ in range(3):
            async with kept.post(url + "/v1/completions", json=plain) as r:
                answers.append((r.status, (await r.json())["error"]["code"],
                                r.headers.get("Retry-After")))
        async with kept.get(url + "/health") as r:
            assert r.status == 200 and (await r.json())["healthy"] == [rep]
        for w in held:
            w.close()
        for _ in range(200):  # the descriptors free: served again (bounded)
            async with kept.post(url + "/v1/completions", json=plain) as r:
                if r.status == 200:
                    break
            await asyncio.sleep(0.05)
        assert r.status == 200
    assert answers == [(503, "router_out_of_connections", "1")] * 3, answers
    text = log.read_text()
    assert "skipped until" not in text and "is unhealthy" not in text, text
    said = [line for line in text.splitlines() if "request(s) could not connect" in line]
    assert 1 <= len(said) < 3, said  # said, and throttled: not once per request
