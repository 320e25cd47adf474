"""A POST whose replica took it and went silent, through the endpoint picker (docs/epp.md,
"Envoy's own answers"), as the router answers it (kvpool/router/upstream.py NOTE(retry)): a
real Envoy running the shipped deploy/envoy/envoy-fallback.yaml (its replicas and ports
changed, and a stream idle timeout of 1 s for the shipped 5 minutes), the real picker with
--fallbacks 2, and real aiohttp replicas on 127.0.0.1, Envoy stopped by pid.

``silent`` reports no load, the others 20 running: the picker lists it first every time, the
others after it. It reads each POST whole and never answers. Envoy does not send the POST on
to the fallbacks (its route retries only a connect failure or a refused stream: the replica
never got the request), and its own 504 is OpenAI error JSON with the router's code
``replica_unresponsive`` (before: ``gateway_error``). Exactly one replica received the POST.
"""

from __future__ import annotations

import asyncio
import contextlib
import json

import aiohttp
import pytest
from aiohttp import web

from bench.envoy_proc import Envoy
from kvpool.epp.cli import picking
from kvpool.epp.picker import Picker, endpoint_of
from kvpool.router.proxy import Router
from kvpool.router.replicas import ReplicaSet
from tests.epp.test_epp_envoy_fallback import CONFIG, cluster
from tests.epp.test_epp_envoy_gateway_error import IDLE_TIMEOUT
from tests.epp.test_epp_envoy_local_reply import error_of
from tests.router.helpers import LOOKUP_TIMEOUT, apps_served, recording_replica
from tests.router.test_router_hostile_replica import GOOD
from tests.router.test_router_silent_post import BODIES


def replica(name: str, running: int, got: list[str],
            hang: asyncio.Event | None = None) -> web.Application:
    """Answers /health and lookups with ``running`` requests; every other request is read
    whole and appended to ``got`` as "name METHOD path", then answered, or, while ``hang``
    is set, not answered at all."""
    health = json.dumps({"status": "ok", "num_running": running, "num_waiting": 0}).encode()
    lookup = json.dumps({**GOOD, "device_hit_tokens": 0, "num_running": running}).encode()

    def probe(request: web.Request) -> web.Response | None:
        if request.path not in ("/health", "/v1/kvpool/lookup"):
            return None
        return web.Response(body=health if request.path == "/health" else lookup,
                            content_type="application/json")

    return recording_replica(name, got, hang, probe)


@contextlib.asynccontextmanager
async def gateway(workdir):
    """silent, a and b behind the picker and Envoy; yields (Envoy's URL, the picker's list
    for every pick, what the replicas got)."""
    got: list[str] = []
    hang = asyncio.Event()
    hang.set()
    async with contextlib.AsyncExitStack() as stack:
        urls = await stack.enter_async_context(apps_served(
            replica("silent", 0, got, hang), replica("a", 20, got), replica("b", 20, got)))
        stack.callback(hang.clear)  # its handlers end before its runner's cleanup
        picker = Picker(Router(ReplicaSet(urls, interval=3600), lookup_timeout=LOOKUP_TIMEOUT),
                        fallbacks=2)
        port = await stack.enter_async_context(picking(picker, "127.0.0.1", 0))
        envoy = Envoy(port, workdir, (cluster(urls), IDLE_TIMEOUT), config=CONFIG)
        await asyncio.to_thread(envoy.start)
        stack.push_async_callback(asyncio.to_thread, envoy.stop)
        yield envoy.url, ",".join(map(endpoint_of, urls)), got


@pytest.mark.parametrize("path", list(BODIES))
async def test_a_post_its_replica_goes_silent_on_is_504_and_sent_nowhere_else(tmp_path, path):
    async with gateway(tmp_path) as (url, listed, got), aiohttp.ClientSession(
            timeout=aiohttp.ClientTimeout(total=20)) as s:
        async with s.post(url + path, json=BODIES[path]) as r:
            err = await error_of(r, 504)
            assert r.headers["x-kvpool-picked"] == listed  # silent first, two fallbacks
            assert "Retry-After" not in r.headers
        assert (err["code"], err["type"], err["param"]) == (
            "replica_unresponsive", "server_error", None), err
        assert "may have run" in err["message"] and "stream timeout" in err["message"], err
        assert got == [f"silent POST {path}"]  # exactly one replica received it
