"""The picker reads a request's path as the router and the replicas (aiohttp) route it: percent-
escapes decoded but %2F and %25 (picker.py NOTE(path-as-routed)). Before, it compared the
raw ``:path`` Envoy sent: ``/v1/%63ompletions``, a completion to every replica, was no
generation to the picker and went to the first healthy replica unscored, so any client could
skip the prefix choice and the load guard and pile its requests onto one replica.

Real aiohttp replicas on 127.0.0.1 answering the lookup (tests/router/
test_router_hostile_replica.py ``fake_replica``); only the second one reports a hit.
"""

from __future__ import annotations

import contextlib
import json

import pytest

from kvpool.epp.picker import Picker, endpoint_of
from kvpool.router.proxy import Router
from kvpool.router.replicas import ReplicaSet
from tests.router.helpers import LOOKUP_TIMEOUT
from tests.router.test_router_hostile_replica import GOOD, fake_replica

COLD = json.dumps({**GOOD, "device_hit_tokens": 0}).encode()
HOT = json.dumps(GOOD).encode()
BODY = json.dumps({"prompt": list(range(40)), "max_tokens": 1}).encode()


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions?x=1",
                                  "/v1/%63ompletions", "/%761/chat/completions?x=1",
                                  "/v1/chat/%63%6Fmpletions"])
async def test_an_escaped_generation_path_is_scored_as_the_replicas_serve_it(path):
    async with contextlib.AsyncExitStack() as stack:
        cold = await stack.enter_async_context(fake_replica("cold", COLD))
        hot = await stack.enter_async_context(fake_replica("hot", HOT))
        router = Router(ReplicaSet([cold, hot], interval=3600), lookup_timeout=LOOKUP_TIMEOUT)
        picker = Picker(router)
        await picker.start()
        stack.push_async_callback(picker.close)
        assert (await picker.pick_body(path, BODY, [], "POST")).endpoint == endpoint_of(hot)
        assert router.metrics.registry.get_sample_value(
            "kvpool_router_decisions_total", {"reason": "prefix"}) == 1


async def test_an_escaped_slash_is_no_generation_path():
    """``%2F`` stays escaped when aiohttp routes: no replica serves /v1%2Fcompletions as a
    completion, so neither does the picker score it (the first healthy replica takes it)."""
    async with contextlib.AsyncExitStack() as stack:
        cold = await stack.enter_async_context(fake_replica("cold", COLD))
        hot = await stack.enter_async_context(fake_replica("hot", HOT))
        picker = Picker(Router(ReplicaSet([cold, hot], interval=3600),
                               lookup_timeout=LOOKUP_TIMEOUT))
        await picker.start()
        stack.push_async_callback(picker.close)
        assert (await picker.pick_body("/v1%2Fcompletions", BODY, [], "POST")).endpoint == endpoint_of(cold)
