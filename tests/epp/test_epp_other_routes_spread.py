"""The picker places the other routes (GET /v1/models, /tokenize, ...) by load as the router's
``passthrough`` does (``Router.by_load``; kvpool/epp/picker.py NOTE(responses)): round robin
over equally loaded replicas, NOTE(fallbacks)'s list following in the router's order. Before,
every such pick named the first healthy replica while the router spread them.

Real aiohttp replicas on 127.0.0.1 (tests/router/test_router_passthrough_spread.py)."""

from __future__ import annotations

from collections import Counter

from kvpool.epp.picker import Picker, endpoint_of
from kvpool.router.proxy import Router
from kvpool.router.replicas import ReplicaSet
from tests.router.helpers import apps_served
from tests.router.test_router_passthrough_spread import replica


async def picks(urls: list[str], fallbacks: int, path: str, method: str) -> list[str]:
    picker = Picker(Router(ReplicaSet(urls, interval=3600)), fallbacks=fallbacks)
    await picker.start()
    try:
        return [(await picker.pick_body(path, b"", [], method)).endpoint for _ in range(6)]
    finally:
        await picker.close()


async def test_models_picks_are_spread_over_equally_loaded_replicas():
    async with apps_served(*(replica(f"r{i}") for i in range(3))) as urls:
        got = await picks(urls, 0, "/v1/models", "GET")
        assert Counter(got) == {endpoint_of(u): 2 for u in urls}, got
        got = await picks(urls, 0, "/tokenize", "POST")
        assert Counter(got) == {endpoint_of(u): 2 for u in urls}, got


async def test_fallbacks_list_every_replica_with_the_first_spread():
    async with apps_served(*(replica(f"r{i}") for i in range(3))) as urls:
        lists = [p.split(",") for p in await picks(urls, 2, "/v1/models", "GET")]
        assert all(sorted(ls) == sorted(endpoint_of(u) for u in urls) for ls in lists), lists
        assert Counter(ls[0] for ls in lists) == {endpoint_of(u): 2 for u in urls}, lists
