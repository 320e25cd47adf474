"""A replica's chat template never runs on the router's event loop unbounded (kvpool/router/
kv_render.py NOTE(render-budget)). Before, the router rendered the template a replica names in
its kv_events info inline for every chat it scored: a template with nested ``range()`` loops
froze every stream and /health the router served, for good.

A real EventPublisher behind a real aiohttp server playing a replica whose info carries an
endless template, and a real router in this process (its tokenizer is the built-in one).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os

import aiohttp
import pytest
from aiohttp import web

from kvpool.router.kv_prompt import PromptKeys
from kvpool.router.kv_routing import EventRouting
from kvpool.router.proxy import Router
from kvpool.router.replicas import ReplicaSet
from tests.events.helpers import publisher
from tests.router.helpers import LOOKUP_TIMEOUT, apps_served, served
from tests.router.kv_events import until

ENDLESS = ("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
           "{% for m in messages %}{{ m['content'] }}{% endfor %}")
BUDGET = 0.5  # seconds: /health is asked well within it while the render is stuck
CHAT = {"messages": [{"role": "user", "content": "hello " * 20}], "max_tokens": 1}


def replica(info: dict) -> web.Application:
    async def health(_):
        return web.json_response({"status": "ok", "num_running": 0, "num_waiting": 0})

    async def kv_events(_):
        return web.json_response(info)

    async def chat(_):
        return web.json_response({"id": "x", "choices": []})

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_get("/v1/kvpool/kv_events", kv_events)
    app.router.add_post("/v1/chat/completions", chat)
    return app


async def _post(s: aiohttp.ClientSession, url: str) -> int:
    async with s.post(url + "/v1/chat/completions", json=CHAT) as r:
        return r.status


def replica_info(pub, template: str) -> dict:
    """A replica's /v1/kvpool/kv_events info naming ``pub`` and serving ``template``."""
    return {"enabled": True, "instance": "one", "endpoint": pub.endpoint,
            "replay_endpoint": pub.replay_endpoint, "topic": "kv", "block_size": 16,
            "hash": {"algo": "sha256", "model_id": "m"}, "max_model_len": 4096,
            "model_names": ["m"], "chat_template": template}


@contextlib.asynccontextmanager
async def router_on(template: str, budget: float, memory: int | None = None):
    """A router on KV events over one replica serving ``template``, its first chat (placed by
    lookup) sent and the parser it started loaded: yields (router URL, a session, its
    EventRouting, the replica's URL, the replica's publisher)."""
    pub = publisher()
    try:
        async with apps_served(replica(replica_info(pub, template))) as (rep,):
            rs = ReplicaSet([rep], interval=0.2)
            events = EventRouting(rs, refresh_interval=0.1, render_budget=budget)
            if memory is not None:
                events.renders.memory = memory  # RLIMIT_AS above the process's own
            async with served(Router(rs, lookup_timeout=LOOKUP_TIMEOUT, kv_events=events)
                              ) as url, aiohttp.ClientSession() as s:
                assert await _post(s, url) == 200  # by lookup: it starts the parser's load
                await until(lambda: events.keys is not None and events.keys.parser is not None,
                            "the router's parser")
                yield url, s, events, rep, pub
    finally:
        pub.close()


@pytest.mark.timeout(90)  # before the fix the loop froze for good: this ended the test
async def test_an_endless_template_neither_freezes_the_router_nor_runs_twice(caplog):
    caplog.set_level(logging.WARNING, "kvpool.router")
    async with router_on(ENDLESS, BUDGET) as (url, s, events, rep, _):
        # warmed with the parser, before any chat waits on it (it did at the first)
        await until(lambda: events.renders.pid is not None, "the render process")
        chat = asyncio.create_task(_post(s, url))
        await until(lambda: events.renders.started == 1, "the render to start")
        async with s.get(url + "/health") as h:
            assert h.status == 200
        assert not chat.done()  # the loop answered /health while the render ran
        assert await chat == 200  # placed without the template's keys, by load
        assert events.renders.overruns == 1 and events.keys.overran
        await until(lambda: events.renders.stuck == 0, "the render to be stopped")
        assert await _post(s, url) == 200  # never rendered again: no second start
        assert events.renders.started == 1 and events.renders.skipped == 2
    said = [m for m in caplog.messages if "chat template" in m and rep in m]
    assert len(said) == 1, caplog.messages


# one C call that held the GIL for ~10 s: the budget's timer could not fire nor RenderOverran
# land; the template sandbox refuses it (kvpool/server/template_sandbox.py NOTE(template-cost))
IN_C = ("{% if (messages|length + 9) ** 10000000 > 0 %}{% endif %}"
        "{% for m in messages %}{{ m['content'] }}{% endfor %}")


@pytest.mark.timeout(90)
async def test_a_template_stuck_in_one_c_call_is_refused_said_once(caplog):
    caplog.set_level(logging.WARNING, "kvpool.router")
    async with router_on(IN_C, 5.0) as (url, s, events, rep, _):
        assert await _post(s, url) == 200 and await _post(s, url) == 200
        # both rendered, both stopped by the sandbox at once: placed without keys
        assert events.renders.started == 2 and events.renders.skipped == 2
        assert events.renders.overruns == 0 and not events.keys.overran
    said = [m for m in caplog.messages if "was stopped" in m and rep in m]
    assert len(said) == 1 and "NOTE(template-cost)" in said[0], caplog.messages


# 10^11 element compares inside one list.count call (a minute here; the probe's ×10000 froze
# the router 6.4 s): it holds the GIL, so a render thread could neither be timed nor stopped;
# the render process is killed by pid (kv_render.py NOTE(render-budget))
ONE_C_CALL = ("{% set a = [0] * 1000000 %}{% set b = [0] * 999999 + [1] %}"
              "{{ ([a] * 100000).count(b) }}{% for m in messages %}{{ m['content'] }}{% endfor %}")
# a Python-level loop holding 8 MB lists: 800 MB, past the process's address-space limit
MEMORY_BOMB = ("{% set ns = namespace(l=[]) %}{% for i in range(100) %}"
               "{% set ns.l = ns.l + [[i] * 1000000] %}{% endfor %}"
               "{% for m in messages %}{{ m['content'] }}{% endfor %}")


@pytest.mark.timeout(90)
async def test_a_template_in_one_c_call_is_killed_with_its_process(caplog):
    caplog.set_level(logging.WARNING, "kvpool.router")
    async with router_on(ONE_C_CALL, 0.2) as (url, s, events, rep, pub):
        await until(lambda: events.renders.pid is not None, "the render process")
        chat = asyncio.create_task(_post(s, url))
        await until(lambda: events.renders.started == 1, "the render to start")
        # the loop answers while the C call runs (bounded: no hang if it does not)
        async with asyncio.timeout(10), s.get(url + "/health") as h:
            assert h.status == 200
        pid = events.renders.pid
        assert await chat == 200  # placed without the template's keys, by load
        assert events.renders.overruns == 1 and events.keys.overran
        await until(lambda: events.renders.stuck == 0, "the process to be killed")
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
        fresh = PromptKeys(replica_info(pub, "{{ messages[0]['content'] }}"))
        got = await events.renders.keys(fresh, CHAT, [], 0, [rep])  # a new process
        assert isinstance(got, tuple) and events.renders.pid not in (None, pid)


@pytest.mark.timeout(90)
async def test_a_template_building_too_much_fails_at_the_memory_limit(caplog):
    caplog.set_level(logging.WARNING, "kvpool.router")
    async with router_on(MEMORY_BOMB, 10.0, memory=256 << 20) as (url, s, events, _, _):
        assert await _post(s, url) == 200  # placed without the template's keys
        assert events.renders.skipped == 1 and events.renders.overruns == 0
    said = [m for m in caplog.messages if "failed" in m]
    assert len(said) == 1 and "MemoryError" in said[0], caplog.messages
