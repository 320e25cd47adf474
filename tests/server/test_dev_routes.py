"""vLLM's development cache routes on the real server (kvpool/server/dev_routes.py): absent
(404) unless ``dev_routes``; POST /reset_prefix_cache drops the prefix cache (a repeat no longer
hits), answers success false while a stream holds blocks (nothing dropped) and, with
reset_running_requests=true, preempts the stream for recompute, which still finishes as it would
have; bad query values are 400s; /reset_mm_cache and /reset_encoder_cache answer 200, empty.

Steps of a held request wait for permits (a FaultPlan), so the stream is in flight when the
reset runs, whatever the machine's speed."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from kvpool.errors import ConfigError
from kvpool.runtime.faults import FaultPlan
from kvpool.server.app import build_app
from kvpool.server.dev_routes import DEV_ROUTES, dev_mode
from kvpool.server.serve import add_serve_args
from kvpool.server.serve_options import ServeOptions
from tests.configs import SERVE_LIMITS, engine_config
from tests.server.helpers import Running, scrape, wait_free, wait_until

PROMPT = "the quick brown fox jumps over the lazy dog, " * 3  # ~135 byte tokens: 8 blocks
HELD = "a stream the reset finds running " * 2
DEV = {"dev_routes": True}


class Permits(FaultPlan):
    """Each engine step of a request takes one permit, until ``open`` (bounded: a test that
    grants none fails in seconds, it never hangs)."""

    def __init__(self) -> None:
        self.sem = threading.Semaphore(0)
        self.opened = threading.Event()
        self.opened.set()

    def on_step(self, request_id: str) -> None:
        if not self.opened.is_set():
            self.sem.acquire(timeout=10)


@contextlib.asynccontextmanager
async def server(faults: FaultPlan | None = None, **app_options):
    """A real server on 127.0.0.1; every block is back in the pool at the end."""
    from kvpool.runtime.engine.async_engine import AsyncEngine

    engine = AsyncEngine(engine_config("serve", **SERVE_LIMITS, max_tokens_limit=256),
                         faults=faults)
    srv_ = TestServer(build_app(engine, engine_shutdown_timeout=5.0, **app_options),
                      host="127.0.0.1", port=0)
    await srv_.start_server(shutdown_timeout=5.0)
    run = Running(f"http://127.0.0.1:{srv_.port}", engine, srv_.app, srv_)
    baseline = run.free()
    try:
        yield run
        await wait_free(run, baseline)
        assert run.free() == baseline, "device blocks still in use after the test"
        assert engine.core.check_invariants()
    finally:
        await srv_.close()


async def post(url: str, body: dict | None = None) -> tuple[int, str]:
    async with aiohttp.ClientSession() as s, s.post(url, json=body) as r:
        return r.status, await r.text()


async def reset(srv: Running, query: str = "") -> bool:
    status, text = await post(srv.url + "/reset_prefix_cache" + query)
    assert status == 200, text
    out = json.loads(text)
    assert set(out) == {"success"}
    return out["success"]


async def cached(srv: Running, prompt=PROMPT) -> int:
    status, text = await post(srv.v1 + "/completions",
                              {"prompt": prompt, "max_tokens": 1, "temperature": 0})
    assert status == 200, text
    return json.loads(text)["usage"]["prompt_tokens_details"]["cached_tokens"]


async def lookup(srv: Running, prompt=PROMPT) -> int:
    status, text = await post(srv.v1 + "/kvpool/lookup", {"prompt": prompt})
    assert status == 200, text
    return json.loads(text)["device_hit_tokens"]


async def test_the_routes_are_404_without_dev_routes():
    async with server() as srv:
        for path in DEV_ROUTES:
            status, text = await post(srv.url + path)
            assert status == 404 and json.loads(text)["error"]["code"], (path, text)


def test_vllm_server_dev_mode_turns_them_on(monkeypatch):
    args = add_serve_args(__import__("argparse").ArgumentParser()).parse_args([])
    monkeypatch.delenv("VLLM_SERVER_DEV_MODE", raising=False)
    assert ServeOptions.from_args(args).dev_routes is False
    monkeypatch.setenv("VLLM_SERVER_DEV_MODE", "1")
    assert ServeOptions.from_args(args).dev_routes is True
    flag = add_serve_args(__import__("argparse").ArgumentParser()).parse_args(["--dev-routes"])
    monkeypatch.setenv("VLLM_SERVER_DEV_MODE", "0")
    assert ServeOptions.from_args(flag).dev_routes is True
    with pytest.raises(ConfigError, match="VLLM_SERVER_DEV_MODE"):
        dev_mode({"VLLM_SERVER_DEV_MODE": "yes"})


async def test_a_reset_drops_what_the_prefix_cache_holds(caplog):
    caplog.set_level("WARNING", logger="kvpool.server.dev_routes")
    async with server(**DEV) as srv:
        warned = [r.getMessage() for r in caplog.records if "SECURITY" in r.getMessage()]
        assert len(warned) == 1 and all(p in warned[0] for p in DEV_ROUTES)
        assert await cached(srv) == 0
        assert await cached(srv) > 0  # the repeat hits
        assert srv.engine.core.manager.stats().device.num_cached > 0
        assert await reset(srv) is True
        assert srv.engine.core.manager.stats().device.num_cached == 0
        assert await lookup(srv) == 0 and await cached(srv) == 0  # nothing left to hit
        assert await cached(srv) > 0  # cached again from here on
        assert await reset(srv, "?reset_running_requests=false&reset_external=true") is True
        assert await cached(srv) == 0
        for path in ("/reset_mm_cache", "/reset_encoder_cache"):
            assert await post(srv.url + path) == (200, "")


async def test_an_empty_answer_has_the_headers_vllms_has():
    """/reset_mm_cache and /reset_encoder_cache answer as vLLM's ``Response(status_code=200)``
    (Starlette: no body, so ``content-length: 0`` and no content type), not with a
    Content-Type of application/octet-stream for a body that is not there."""
    async with server(**DEV) as srv, aiohttp.ClientSession() as s:
        for path in ("/reset_mm_cache", "/reset_encoder_cache"):
            async with s.post(srv.url + path) as r:
                names = {k.decode().lower(): v.decode() for k, v in r.raw_headers}
                assert (r.status, await r.read()) == (200, b"")
            assert names["content-length"] == "0" and "content-type" not in names, names


@pytest.mark.parametrize("query, param", [
    ("?reset_running_requests=maybe", "query.reset_running_requests"),
    ("?reset_external=", "query.reset_external"),
    ("?reset_external=true&reset_running_requests=2", "query.reset_running_requests"),
])
async def test_a_bad_query_value_is_a_400_naming_it(query, param):
    async with server(**DEV) as srv:
        assert await cached(srv) == 0 and await lookup(srv) > 0
        status, text = await post(srv.url + "/reset_prefix_cache" + query)
        assert status == 400, text
        err = json.loads(text)["error"]
        assert err["param"] == param and err["type"] == "invalid_request_error"
        assert await lookup(srv) > 0  # nothing was reset


async def stream(srv: Running, body: dict) -> tuple[str, str | None, int]:
    """A streamed completion's text, finish_reason and chunk count."""
    text, finish, chunks = "", None, 0
    async with aiohttp.ClientSession() as s, s.post(srv.v1 + "/completions",
                                                    json={**body, "stream": True}) as r:
        assert r.status == 200, await r.text()
        async for line in r.content:
            if line.startswith(b"data: {"):
                choice = json.loads(line[6:])["choices"][0]
                text += choice["text"]
                finish = choice["finish_reason"] or finish
                chunks += 1
    return text, finish, chunks


async def reset_while_held(srv: Running, permits: Permits, query: str) -> bool:
    """The reset, granting the held stream's steps one at a time until it has run (between
    two of them: the step thread runs it between steps)."""
    task = asyncio.create_task(reset(srv, query))
    while not task.done():
        permits.sem.release()
        await asyncio.sleep(0.02)
    return await task


async def test_a_running_request_holds_the_cache_unless_it_is_preempted():
    body = {"prompt": HELD, "max_tokens": 150, "ignore_eos": True, "temperature": 0}
    permits = Permits()
    async with server(permits, **DEV) as srv:
        expected = await stream(srv, body)  # the run without any reset
        assert expected[1] == "length"
        await cached(srv)
        before = (await scrape(srv))["kvpool_preemptions_total"][(("mode", "recompute"),)]
        permits.opened.clear()
        held = asyncio.create_task(stream(srv, body))
        sched = srv.engine.core.scheduler
        assert await wait_until(lambda: sched.num_requests()["running"] == 1)  # blocks held
        assert await reset_while_held(srv, permits, "") is False
        assert await lookup(srv) > 0  # nothing dropped
        assert await reset_while_held(srv, permits, "?reset_running_requests=true") is True
        assert await lookup(srv) == 0 and not held.done()
        permits.opened.set()
        permits.sem.release(1000)
        assert (await held)[:2] == expected[:2]  # recomputed, it finishes as it would have
        after = (await scrape(srv))["kvpool_preemptions_total"][(("mode", "recompute"),)]
        assert after == before + 1
