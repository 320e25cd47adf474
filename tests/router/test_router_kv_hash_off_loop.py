"""``kvpool router --kv-events`` hashes a large body's prompt off the event loop
(kv_routing.py NOTE(hash-off-loop)). Before, every prompt was tokenized (a text prompt), its
chat template rendered (messages) and hashed on the loop: one client's large prompt stalled
every stream and /health the router served for as long as that took.

A real EventPublisher (its replay socket answering the router's first replay) behind a real
aiohttp server playing a replica (/health, the kv_events info, /v1/completions), and a real
router; the prompts are token ids, so no tokenizer is loaded.
"""

from __future__ import annotations

import aiohttp
from aiohttp import web

from kvpool.router.kv_routing import HASH_INLINE_BYTES, EventRouting
from kvpool.router.proxy import Router
from kvpool.router.replicas import ReplicaSet
from tests.events.helpers import publisher
from tests.router.helpers import LOOKUP_TIMEOUT, apps_served, served


def replica(info: dict) -> web.Application:
    async def health(_):
        return web.json_response({"status": "ok", "num_running": 0, "num_waiting": 0})

    async def kv_events(_):
        return web.json_response(info)

    async def complete(request):
        return web.json_response({"id": "x", "bytes": len(await request.read())})

    app = web.Application(client_max_size=1 << 24)
    app.router.add_get("/health", health)
    app.router.add_get("/v1/kvpool/kv_events", kv_events)
    app.router.add_post("/v1/completions", complete)
    return app


async def test_a_large_prompt_is_hashed_off_the_event_loop():
    pub = publisher()
    info = {"enabled": True, "instance": "one", "endpoint": pub.endpoint,
            "replay_endpoint": pub.replay_endpoint, "topic": "kv", "block_size": 16,
            "hash": {"algo": "sha256", "model_id": "m"}, "max_model_len": 1 << 20}
    try:
        async with apps_served(replica(info)) as (rep,):
            rs = ReplicaSet([rep], interval=0.2)
            events = EventRouting(rs, refresh_interval=0.1)
            async with served(Router(rs, lookup_timeout=LOOKUP_TIMEOUT, kv_events=events)
                              ) as url, aiohttp.ClientSession() as s:
                small = {"prompt": list(range(100)), "max_tokens": 1}
                large = {"prompt": list(range(10 ** 6, 10 ** 6 + 2000)), "max_tokens": 1}
                for body, hashed_off in ((small, 0), (large, 1), (small, 1)):
                    async with s.post(url + "/v1/completions", json=body) as r:
                        assert r.status == 200, await r.text()
                        sent = (await r.json())["bytes"]
                    assert (sent > HASH_INLINE_BYTES) == (body is large)
                    assert events.off_loop == hashed_off
                assert events.fallbacks == 0  # every one placed by the events, none by lookups
    finally:
        pub.close()
