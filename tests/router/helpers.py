"""What the router's live tests share: real ``kvpool serve`` replicas (stopped by pid), a real
router on 127.0.0.1, and small client helpers."""

from __future__ import annotations

import asyncio
import contextlib
import json
from concurrent.futures import ThreadPoolExecutor

from aiohttp import web

from kvpool.router.cli import listen
from kvpool.router.proxy import Router
from kvpool.router.replicas import ReplicaSet
from stress.http.servers import SpawnedServer
from tests.server.helpers import parse_metrics

# 160 blocks x 16 tokens: room for one HOG_TOKENS-long stream (the load guard test) next to
# the cached prompts
REPLICA_ARGS = ["--block-size", "16", "--num-device-blocks", "160", "--num-host-blocks", "16",
                "--max-model-len", "2048", "--seed", "0", "--num-threads", "1"]
HOG_TOKENS = 2000  # thousands of decode steps: still running while the router chooses
LOOKUP_TIMEOUT = 5.0  # generous on a shared 2-core box: a late lookup would score 0 by design


def spawn(rid: str, *extra: str) -> SpawnedServer:
    srv = SpawnedServer([*REPLICA_ARGS, *extra, "--replica-id", rid], startup_timeout=120)
    srv.start()
    return srv


@contextlib.asynccontextmanager
async def router(urls, **kw):
    """A Router over ``urls`` as ``kvpool router`` serves it; yields (router, its URL)."""
    beats = {k: kw.pop(k) for k in ("down_after",) if k in kw}
    r = Router(ReplicaSet(urls, interval=kw.pop("interval", 1.0), **beats),
               lookup_timeout=LOOKUP_TIMEOUT, **kw)
    async with served(r) as url:
        yield r, url


async def wait_idle(s, urls) -> int:
    """Running + waiting requests over ``urls`` once they drain (bounded: 200 polls)."""
    for _ in range(200):
        busy = 0
        for rep in urls:
            async with s.post(rep + "/v1/kvpool/lookup", json={"prompt": "x"}) as lk:
                out = await lk.json()
                busy += out["num_running"] + out["num_waiting"]
        if busy == 0:
            break
        await asyncio.sleep(0.05)
    return busy


def prompt(tag: str) -> str:
    return f"{tag} " + "a long shared system prompt about paged kv caches. " * 4  # ~200 tokens


async def complete(session, url, body, path="/v1/completions"):
    async with session.post(url + path,
                            json={"max_tokens": 2, "temperature": 0, **body}) as r:
        out = await r.json()
        assert r.status == 200, out
        return out


async def metrics(session, url):
    async with session.get(url + "/metrics") as r:
        return parse_metrics(await r.text())


def decisions(m, reason):
    return m["kvpool_router_decisions_total"][(("reason", reason),)]


def spawn_many(specs: dict[str, tuple[str, ...]]) -> dict[str, SpawnedServer]:
    """Replicas started side by side (each start waits for its ready line); on a failed
    start the ones that did start are stopped."""
    with ThreadPoolExecutor(len(specs)) as pool:
        futures = {rid: pool.submit(spawn, rid, *extra) for rid, extra in specs.items()}
    started, errors = {}, []
    for rid, fut in futures.items():
        try:
            started[rid] = fut.result()
        except Exception as exc:  # noqa: BLE001 - collected, re-raised below
            errors.append(exc)
    if errors:
        for srv in started.values():
            srv.stop(timeout=20)
        raise errors[0]
    return started


@contextlib.asynccontextmanager
async def served(r: Router):
    """``r`` as ``kvpool router`` serves it (cli.listen: the guarded listener)."""
    runner, server = await listen(r, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()
        await runner.cleanup()


def replica_app(health, complete) -> web.Application:
    """A fake replica: ``health`` on GET /health, ``complete`` on POST /v1/completions."""
    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_post("/v1/completions", complete)
    return app


@contextlib.asynccontextmanager
async def apps_served(*apps: web.Application):
    """Each of ``apps`` served on 127.0.0.1 (a port of its own, a fake replica); yields their
    base URLs, and cleans them all up at the end."""
    runners = []
    try:
        for app in apps:
            runner = web.AppRunner(app)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", 0).start()
            runners.append(runner)
        yield [f"http://127.0.0.1:{r.addresses[0][1]}" for r in runners]
    finally:
        for runner in runners:
            await runner.cleanup()


def recording_replica(name: str, got: list[str], hang: asyncio.Event | None,
                      probe) -> web.Application:
    """A fake replica for the silent-request tests: ``probe(request)`` answers the probes
    (health, lookups; None: not one it answers); any other request is read whole, recorded
    in ``got`` as "name METHOD path" (not /health) and answered, or, while ``hang`` is set,
    not answered at all."""
    async def handle(request: web.Request) -> web.Response:
        answer = probe(request)
        if answer is not None:
            return answer
        await request.read()
        if request.path != "/health":
            got.append(f"{name} {request.method} {request.path}")
        while hang is not None and hang.is_set():
            await asyncio.sleep(0.05)
        return web.json_response({"id": f"resp_{name}", "object": "response"})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    return app


async def read_events(resp) -> list:
    """Every SSE ``data:`` payload of ``resp`` until its end: JSON objects, and "[DONE]"."""
    events = []
    async for line in resp.content:
        if line.startswith(b"data: "):
            text = line[6:].strip()
            events.append("[DONE]" if text == b"[DONE]" else json.loads(text))
    return events
