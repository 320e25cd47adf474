"""A Responses API creation whose client accepts gzip (as the openai SDK's httpx does by
default) through a real Envoy (the shipped deploy/envoy/envoy.yaml), the real picker and two
aiohttp replicas on 127.0.0.1 that compress what their client accepts (Envoy stopped by pid).

The picker asks for a creation's answer uncompressed, as the router does (kvpool/epp/picker.py
NOTE(learn-answer); kvpool/router/relayed.py NOTE(identity-encoding)), so it reads the
response id and a follow-up goes to its maker with no search; the client gets the answer
uncompressed, which HTTP allows whatever it accepts. Before, the replica sent gzip and the
picker learnt nothing: each follow-up cost a search (which these replicas cannot answer) and
was placed by load, on both replicas in turn.
"""

from __future__ import annotations

import asyncio
import contextlib

import aiohttp

from bench.envoy_proc import Envoy
from kvpool.epp.cli import picking
from kvpool.epp.picker import Picker
from kvpool.router.proxy import Router
from kvpool.router.replicas import ReplicaSet
from tests.router.helpers import LOOKUP_TIMEOUT
from tests.router.test_router_responses_encoding import compressing

GZIP = {"Accept-Encoding": "gzip"}


@contextlib.asynccontextmanager
async def behind_envoy(tmp_path, seen: list):
    """(the picker's router, Envoy, a client session): Envoy over the picker over the two
    ``compressing`` replicas, which note what reaches them in ``seen``."""
    async with contextlib.AsyncExitStack() as stack:
        urls = await stack.enter_async_context(compressing(["a", "b"], seen))
        router = Router(ReplicaSet(urls, interval=3600), lookup_timeout=LOOKUP_TIMEOUT)
        port = await stack.enter_async_context(picking(Picker(router), "127.0.0.1", 0))
        envoy = Envoy(port, tmp_path)
        await asyncio.to_thread(envoy.start)
        stack.push_async_callback(asyncio.to_thread, envoy.stop)
        yield router, envoy, await stack.enter_async_context(aiohttp.ClientSession())


async def test_a_gzip_accepting_creation_is_learnt_and_its_follow_ups_not_searched(tmp_path):
    seen: list[tuple[str, str | None, object]] = []
    async with behind_envoy(tmp_path, seen) as (router, envoy, s):
        async with s.post(envoy.url + "/v1/responses", json={"input": "x"},
                          headers=GZIP) as resp:
            first = await resp.json()  # a valid answer, whatever its encoding
            assert resp.status == 200 and first["object"] == "response", first
            assert resp.headers.get("Content-Encoding", "identity") == "identity"
        owner = seen[0][0]
        assert router.affinity.learnt["answer"] == 1  # before the fix: 0, the body was gzip
        for _ in range(4):  # by load alone these would alternate between a and b
            async with s.post(envoy.url + "/v1/responses", headers=GZIP, json={
                    "input": "y", "previous_response_id": first["id"]}) as resp:
                assert resp.status == 200, await resp.text()
                assert (await resp.json())["object"] == "response"
        assert [name for name, _, prev in seen if prev] == [owner] * 4
        assert router.affinity.searches == 0
        assert {enc for _, enc, _ in seen} == {"identity"}  # not the client's gzip


async def test_a_store_false_creation_teaches_the_picker_nothing(tmp_path):
    """NOTE(unstored) in kvpool/router/affinity.py, through Envoy and the picker: a creation
    with ``"store": false`` leaves no id in the map; the next one, stored, does."""
    async with behind_envoy(tmp_path, []) as (router, envoy, s):
        for store, learnt in ((False, 0), (True, 1)):
            async with s.post(envoy.url + "/v1/responses",
                              json={"input": "x", "store": store}) as resp:
                assert resp.status == 200, await resp.text()
            assert router.affinity.learnt["answer"] == learnt
