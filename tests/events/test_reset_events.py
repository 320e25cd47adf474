"""POST /reset_prefix_cache on a real server that publishes KV events: a subscriber hears
AllBlocksCleared after the blocks it was told about, as vLLM's BlockPool publishes on a reset
(tests/sched/test_reset_prefix_cache.py: nothing is heard while a reset fails)."""

from __future__ import annotations

import aiohttp
from aiohttp.test_utils import TestServer

from kvpool.events.recorder import KVEventRecorder
from kvpool.server.app import build_app
from tests.configs import SERVE_LIMITS, engine_config
from tests.events.helpers import Sub, plain, publisher, wait_subscribed


def kinds(msgs) -> list[str]:
    return [e["type"] for m in msgs for e in plain(m[2])[1]]


async def test_a_reset_publishes_all_blocks_cleared():
    from kvpool.runtime.engine.async_engine import AsyncEngine

    pub = publisher()
    sub = Sub(pub)
    config = engine_config("serve", **SERVE_LIMITS)
    engine = AsyncEngine(config, pool_observer=KVEventRecorder(pub, config.block_size))
    server = TestServer(build_app(engine, engine_shutdown_timeout=5.0, dev_routes=True),
                        host="127.0.0.1", port=0)
    await server.start_server()
    try:
        wait_subscribed(pub, sub)
        url = f"http://127.0.0.1:{server.port}"
        async with aiohttp.ClientSession() as s:
            async with s.post(url + "/v1/completions", json={
                    "prompt": list(range(20, 70)), "max_tokens": 1}) as r:
                assert r.status == 200, await r.text()
            assert "BlockStored" in kinds(sub.until(lambda ev: ev))
            async with s.post(url + "/reset_prefix_cache") as r:
                assert await r.json() == {"success": True}
        heard = kinds(sub.until(lambda ev: "AllBlocksCleared" in [e["type"] for e in ev]))
        assert heard[-1] == "AllBlocksCleared"
    finally:
        await server.close()
        sub.close()
        pub.close()
