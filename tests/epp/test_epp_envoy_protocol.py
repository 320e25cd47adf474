"""The GIE endpoint picker protocol through a real Envoy (bench/envoy_proc.py) with variants of
the shipped deploy/envoy/envoy.yaml, in front of real aiohttp replicas on 127.0.0.1
(tests/router/test_router_hostile_replica.py ``fake_replica``; only ``hot`` reports a prefix
hit). Envoy is started and stopped by pid.

* The subset hint (docs/epp.md, "The subset hint"): a header_to_metadata filter writes the
  request's ``x-subset`` header into ``envoy.lb.subset_hint`` and the ext_proc filter forwards
  that namespace, as a gateway does; the picker picks only among what it names, 503 when none.
* Response phases sent in full duplex (as the Inference Extension's gateways send them; the
  shipped config sends them STREAMED): the picker's early end of the call (service.py
  NOTE(early-end)) lets the answer through untouched, so Envoy never stalls waiting for it.
"""

from __future__ import annotations

import asyncio
import contextlib

import aiohttp
import pytest

from bench.envoy_proc import Envoy
from kvpool.epp.picker import endpoint_of
from tests.epp.test_epp_subset import cold_and_hot

BODY = {"model": "m", "prompt": list(range(40)), "max_tokens": 1}
SUBSET_FILTER = (
    "          http_filters:\n",
    "          http_filters:\n"
    "          - name: envoy.filters.http.header_to_metadata\n"
    "            typed_config:\n"
    '              "@type": type.googleapis.com/envoy.extensions.filters.http.'
    "header_to_metadata.v3.Config\n"
    "              request_rules:\n"
    "              - header: x-subset\n"
    "                on_header_present:\n"
    "                  metadata_namespace: envoy.lb.subset_hint\n"
    "                  key: x-gateway-destination-endpoint-subset\n"
    "                  type: STRING\n"
    "                remove: true\n")
FORWARD_HINT = ('                  untyped: ["envoy.lb"]\n',
                '                  untyped: ["envoy.lb"]\n'
                "                forwarding_namespaces:\n"
                '                  untyped: ["envoy.lb.subset_hint"]\n')
ROUTE_ANSWERS = ("                        response_header_mode: SEND\n"
                 "                        response_body_mode: STREAMED\n"
                 "                        response_trailer_mode: SKIP\n")
RESPONSE_PHASES = (ROUTE_ANSWERS, ROUTE_ANSWERS.replace("STREAMED", "FULL_DUPLEX_STREAMED")
                   .replace("trailer_mode: SKIP", "trailer_mode: SEND"))


@contextlib.asynccontextmanager
async def gateway(workdir, edits):
    """Cold and hot replicas, the picker and Envoy (``edits`` to its config); yields
    (Envoy URL, {name: endpoint})."""
    async with contextlib.AsyncExitStack() as stack:
        cold, hot, port = await cold_and_hot(stack)
        envoy = Envoy(port, workdir, edits)
        await asyncio.to_thread(envoy.start)
        stack.push_async_callback(asyncio.to_thread, envoy.stop)
        yield envoy.url, {"cold": endpoint_of(cold), "hot": endpoint_of(hot)}


async def test_envoys_subset_hint_keeps_the_pick_to_it(tmp_path):
    async with gateway(tmp_path, (SUBSET_FILTER, FORWARD_HINT)) as (url, names), \
            aiohttp.ClientSession() as s:
        async def served_by(**headers) -> tuple[int, dict]:
            async with s.post(url + "/v1/completions", json=BODY, headers=headers) as r:
                return r.status, await r.json()
        assert (await served_by())[1]["served_by"] == "hot"  # the prefix hit, unhinted
        for hint in (names["cold"], f"10.0.0.9:80, {names['cold']}"):
            status, out = await served_by(**{"x-subset": hint})
            assert status == 200 and out["served_by"] == "cold", (hint, out)
        status, out = await served_by(**{"x-subset": "10.0.0.9:80"})
        assert status == 503 and out["error"]["code"] == "subset_unknown", out


@pytest.mark.parametrize("stream", [False, True])
async def test_response_phases_sent_pass_the_answer_untouched(tmp_path, stream):
    async with gateway(tmp_path, (RESPONSE_PHASES,)) as (url, _), \
            aiohttp.ClientSession() as s:
        for _ in range(3):
            async with s.post(url + "/v1/completions", json={**BODY, "stream": stream},
                              timeout=aiohttp.ClientTimeout(total=20)) as r:
                assert r.status == 200, await r.text()
                out = await r.json()
        assert out["served_by"] == "hot" and out["body"]["stream"] is stream
