"""The picker places a new Responses API request (no ``previous_response_id``) by load, as
the router does (kvpool/epp/picker.py NOTE(responses), ``Router.response_order``), and a
follow-up on the replica holding its response. Real aiohttp replicas on 127.0.0.1 playing
kvpool serve's Responses routes (tests/router/test_router_responses_hostile.py)."""

from __future__ import annotations

import json
from collections import Counter

from kvpool.epp.picker import Picker, endpoint_of
from kvpool.router.proxy import Router
from kvpool.router.replicas import ReplicaSet
from tests.router.test_router_responses_hostile import Fake, fakes

NEW = json.dumps({"input": "hello"}).encode()


async def test_new_responses_are_spread_and_a_follow_up_goes_to_its_owner():
    owner = Fake(held={"resp_1"})
    async with fakes(Fake(), owner) as urls:
        picker = Picker(Router(ReplicaSet(urls, interval=3600)))
        await picker.start()
        try:
            picks = Counter([(await picker.pick_body("/v1/responses", NEW, [], "POST")).endpoint
                             for _ in range(6)])
            assert picks == {endpoint_of(u): 3 for u in urls}, picks  # round robin
            follow = json.dumps({"input": "more", "previous_response_id": "resp_1"}).encode()
            for _ in range(3):
                assert (await picker.pick_body("/v1/responses", follow, [], "POST")).endpoint == \
                    endpoint_of(urls[1])
            assert owner.gets == ["resp_1"]  # searched once, then known
        finally:
            await picker.close()
