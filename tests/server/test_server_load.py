"""vLLM's ``GET /load`` (kvpool/server/server_load.py NOTE(server-load)): always served; with
``--enable-server-load-tracking`` it counts the requests inside the generation routes, else 0.
A request is held inside the engine's step (a FaultPlan that waits) while /load is read."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp.test_utils import TestServer

from kvpool.runtime.faults import FaultPlan
from kvpool.server.app import build_app
from kvpool.server.serve_options import ServeOptions
from tests.configs import SERVE_LIMITS, engine_config

CHAT = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2, "stream": True}


class Hold(FaultPlan):
    """Every step waits until released; ``entered`` is set once a request is being stepped."""

    def __init__(self) -> None:
        self.entered, self.go = threading.Event(), threading.Event()

    def on_step(self, request_id: str) -> None:
        self.entered.set()
        self.go.wait(timeout=10)


async def load(s: aiohttp.ClientSession, url: str) -> dict:
    async with s.get(url + "/load") as r:
        assert r.status == 200 and r.content_type == "application/json"
        return await r.json()


@contextlib.asynccontextmanager
async def held_server(tracking: bool = True) -> AsyncIterator[tuple[Hold, str]]:
    """(hold, base URL) of a real server whose engine steps wait until ``hold.go``; /load
    tracks with ``tracking``. The server is closed, and any held step let go, at the end."""
    from kvpool.runtime.engine.async_engine import AsyncEngine

    hold = Hold()
    engine = AsyncEngine(engine_config("serve", **SERVE_LIMITS), faults=hold)
    app = build_app(engine, server_load_tracking=tracking, engine_shutdown_timeout=5)
    server = TestServer(app, host="127.0.0.1", port=0)
    await server.start_server()
    try:
        yield hold, f"http://127.0.0.1:{server.port}"
    finally:
        hold.go.set()
        await server.close()


@pytest.mark.parametrize("tracking", [True, False])
async def test_load_counts_generation_requests_only_with_tracking_on(tracking):
    async with held_server(tracking) as (hold, url):
        async with aiohttp.ClientSession() as s:
            assert await load(s, url) == {"server_load": 0}

            async def chat() -> str:
                async with s.post(url + "/v1/chat/completions", json=CHAT) as r:
                    assert r.status == 200
                    return await r.text()

            task = asyncio.create_task(chat())
            assert await asyncio.to_thread(hold.entered.wait, 10)
            # other routes do not count; the held chat does where tracking is on
            async with s.post(url + "/tokenize", json={"prompt": "hi"}) as r:
                assert r.status == 200
            assert await load(s, url) == {"server_load": 1 if tracking else 0}
            hold.go.set()
            assert (await task).endswith("data: [DONE]\n\n")
            assert await load(s, url) == {"server_load": 0}
            async with s.post(url + "/v1/completions", json={"prompt": ""}) as r:
                assert r.status == 400  # a request that fails is taken off too
            assert await load(s, url) == {"server_load": 0}


async def test_batch_chat_and_invocations_count_as_vllm_counts_them():
    """vLLM's load_aware_call wraps its batch chat route and the chat and completion handlers
    /invocations calls: a request held inside either counts 1."""
    bodies = {"/invocations": CHAT, "/v1/chat/completions/batch": {
        "messages": [CHAT["messages"]] * 2, "max_tokens": 2}}
    async with held_server() as (hold, url), aiohttp.ClientSession() as s:
        for route, body in bodies.items():
            hold.go.clear()
            hold.entered.clear()
            task = asyncio.create_task(s.post(url + route, json=body))
            assert await asyncio.to_thread(hold.entered.wait, 10)
            assert await load(s, url) == {"server_load": 1}, route
            hold.go.set()
            async with await task as r:
                assert r.status == 200, route
                await r.read()
            assert await load(s, url) == {"server_load": 0}


def test_the_flag_is_vllms_and_off_by_default():
    from kvpool.server.serve import add_serve_args

    parser = add_serve_args(argparse.ArgumentParser())
    on = ServeOptions.from_args(parser.parse_args(["--enable-server-load-tracking"]))
    assert on.enable_server_load_tracking is True
    assert ServeOptions.from_args(parser.parse_args([])).enable_server_load_tracking is False
