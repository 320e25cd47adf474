"""The picker's own answers and what it passes on (kvpool/epp/refusals.py, picker.py
NOTE(methods); docs/epp.md): a generation path asked with another method than POST goes to a
replica, which answers 405 as vLLM's does; the picker's own error answers carry the CORS
headers of the router's flags (NOTE(epp-cors)); a subset hint naming no replica the picker
knows is told apart from replicas down, in its answer, its log line and its metric
(NOTE(no-endpoint)). Before, the first was the picker's 400 invalid_json, the flags were taken
and ignored, and the hint's fault was one more ``no_replica`` with nothing logged.

Real aiohttp replicas on 127.0.0.1 (tests/router/test_router_hostile_replica.py
``fake_replica``), the picker over its real transport driven by grpcio's client as Envoy drives
it, and once a real Envoy (bench/envoy_proc.py, the shipped deploy/envoy/envoy.yaml) in front,
stopped by pid.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging

import aiohttp
import grpc
from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc
from google.protobuf import struct_pb2

from bench.envoy_proc import Envoy
from kvpool.epp import cli as epp_cli
from kvpool.epp.cli import picking
from kvpool.epp.metrics import MetricsPort
from kvpool.epp.picker import Picker, endpoint_of
from kvpool.epp.subset import SUBSET_KEY, SUBSET_NAMESPACE
from kvpool.router import cli as router_cli
from kvpool.router.proxy import Router
from kvpool.router.replicas import ReplicaSet
from kvpool.router.scored_body import GENERATE_PATHS
from kvpool.server.cors import CorsPolicy
from tests.epp.test_epp_subset import COLD, DUPLEX, HOT
from tests.router.helpers import LOOKUP_TIMEOUT
from tests.router.test_router_hostile_replica import fake_replica
from tests.server.helpers import parse_metrics

PAGE = "http://a.example"
DOWN = [503, b'{"status": "unavailable"}']


def message(path: str, method: str = "POST", *, origin: str | None = None,
            hint: object = None) -> pb.ProcessingRequest:
    """A request's headers as Envoy sends them in full duplex, a body to follow."""
    given = [(":method", method), (":path", path), *([("origin", origin)] if origin else [])]
    req = pb.ProcessingRequest(
        request_headers=pb.HttpHeaders(headers=base_pb2.HeaderMap(headers=[
            base_pb2.HeaderValue(key=k, raw_value=v.encode()) for k, v in given])),
        protocol_config=pb.ProtocolConfiguration(request_body_mode=DUPLEX))
    if hint is not None:
        meta = struct_pb2.Struct()
        meta.update({SUBSET_KEY: hint})
        req.metadata_context.filter_metadata[SUBSET_NAMESPACE].CopyFrom(meta)
    return req


async def immediate(port: int, first: pb.ProcessingRequest, body: bytes = b"{}"
                    ) -> tuple[int, dict[str, str], dict]:
    """(status, headers, error JSON) of the picker's ImmediateResponse to one request."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        answers = [m async for m in pb_grpc.ExternalProcessorStub(channel).Process(iter([
            first, pb.ProcessingRequest(request_body=pb.HttpBody(body=body,
                                                                 end_of_stream=True))]))]
    out = answers[0].immediate_response
    headers = {h.header.key.lower(): h.header.raw_value.decode() for h in out.headers.set_headers}
    return out.status.code, headers, json.loads(out.body)["error"]


async def test_a_generation_path_asked_with_another_method_goes_to_a_replica_unscored():
    """NOTE(methods): GET, PUT, DELETE, HEAD and a preflight on every generation path get an
    endpoint, placed by load (no decision counted), body or none; POST is still checked."""
    async with contextlib.AsyncExitStack() as stack:
        urls = [await stack.enter_async_context(fake_replica(n, COLD)) for n in ("a", "b")]
        router = Router(ReplicaSet(urls, interval=3600), lookup_timeout=LOOKUP_TIMEOUT)
        picker = Picker(router)
        await picker.start()
        stack.push_async_callback(picker.close)
        preflight = [("origin", PAGE), ("access-control-request-method", "POST")]
        for path in GENERATE_PATHS:
            for method, body, headers in (("GET", b"", []), ("PUT", b"not json", []),
                                          ("DELETE", b"", []), ("HEAD", b"", []),
                                          ("OPTIONS", b"", preflight)):
                pick = await picker.pick_body(path, body, headers, method)
                assert pick.endpoint in {endpoint_of(u) for u in urls}, (path, method)
        assert router.metrics.registry.get_sample_value(
            "kvpool_router_decisions_total", {"reason": "round_robin"}) == 0
        assert picker.picks == 5 * len(GENERATE_PATHS)


async def test_the_pickers_own_answers_carry_the_cors_flags_headers():
    """NOTE(epp-cors): an allowed Origin gets Access-Control-Allow-Origin (and Vary) on the
    picker's 400, 413 and 503, as the router's own answers do; another Origin, or none, gets
    none; the flags of ``kvpool epp`` build that policy."""
    args = epp_cli.add_arguments(argparse.ArgumentParser()).parse_args(
        ["--replica", "http://127.0.0.1:9", "--allowed-origins", json.dumps([PAGE]),
         "--allow-credentials", "--max-body-bytes", "1024"])
    picker = Picker(router_cli.build_router(args))
    async with picking(picker, "127.0.0.1", 0) as port:
        for body, status in ((b"[1]", 400), (bytes(2048), 413), (b"{}", 503)):
            got, headers, _ = await immediate(port, message("/v1/completions", origin=PAGE),
                                              body)
            assert got == status and headers["access-control-allow-origin"] == PAGE, headers
            assert headers["vary"] == "Origin"
            assert headers["access-control-allow-credentials"] == "true"
        _, headers, _ = await immediate(port, message("/v1/completions", origin="http://b.c"))
        assert "access-control-allow-origin" not in headers and headers["vary"] == "Origin"
        _, headers, _ = await immediate(port, message("/v1/messages"), b"[1]")
        assert "access-control-allow-origin" not in headers


async def test_a_subset_hint_naming_no_known_replica_is_told_apart(caplog):
    """NOTE(no-endpoint): a hint naming only unknown endpoints is answered 503
    ``subset_unknown``, counted under its reason and said in a WARNING naming the entries, the
    picker's replicas and the fix (one at once, the next at the stop: NOTE(said-counts)); a
    hint naming a known replica that is down keeps ``no_replica``, counted as subset_down."""
    caplog.set_level(logging.WARNING, "kvpool.epp")
    async with contextlib.AsyncExitStack() as stack:
        up = await stack.enter_async_context(fake_replica("up", HOT))
        down = await stack.enter_async_context(fake_replica("down", COLD, DOWN))
        picker = Picker(Router(ReplicaSet([up, down], interval=3600),
                               lookup_timeout=LOOKUP_TIMEOUT))
        metrics = MetricsPort("127.0.0.1", 0)
        async with picking(picker, "127.0.0.1", 0, metrics=metrics) as port:
            for _ in range(2):
                status, headers, error = await immediate(port, message(
                    "/v1/completions", hint="10.1.2.3:8000,10.1.2.4:8000"))
                assert status == 503 and error["code"] == "subset_unknown", error
            status, _, error = await immediate(port, message(
                "/v1/models", "GET", hint=[endpoint_of(down)]))
            assert status == 503 and error["code"] == "no_replica", error
            async with aiohttp.ClientSession() as s, s.get(metrics.url + "/metrics") as r:
                samples = parse_metrics(await r.text())
    assert {dict(k)["reason"]: v for k, v in
            samples["kvpool_epp_no_endpoint_answers_total"].items()} == {
        "no_replica": 0, "subset_down": 1, "subset_unknown": 2}
    assert samples["kvpool_epp_error_answers_total"][(("status", "503"),)] == 3
    lines = [r.getMessage() for r in caplog.records if "subset hint naming no" in r.getMessage()]
    assert [line.split(" request(s)")[0] for line in lines] == ["kvpool epp: 1"] * 2, lines
    assert "'10.1.2.3:8000', '10.1.2.4:8000'" in lines[0] and endpoint_of(down) in lines[0]
    assert "pod addresses" in lines[0]


async def test_through_envoy_methods_pass_and_errors_carry_cors(tmp_path):
    """Through the shipped Envoy config: GET and a preflight on /v1/completions reach the
    replica (aiohttp's 405 with Allow: POST, as vLLM's Starlette answers), not the picker's
    400; the picker's own 400 reaches the page with its CORS headers."""
    async with contextlib.AsyncExitStack() as stack:
        url = await stack.enter_async_context(fake_replica("hot", HOT))
        picker = Picker(Router(ReplicaSet([url], interval=3600), lookup_timeout=LOOKUP_TIMEOUT,
                               cors=CorsPolicy([PAGE])))
        port = await stack.enter_async_context(picking(picker, "127.0.0.1", 0))
        envoy = Envoy(port, tmp_path)
        await asyncio.to_thread(envoy.start)
        stack.push_async_callback(asyncio.to_thread, envoy.stop)
        s = await stack.enter_async_context(aiohttp.ClientSession())
        for method, headers in (("GET", {}), ("OPTIONS", {
                "Origin": PAGE, "Access-Control-Request-Method": "POST"})):
            async with s.request(method, envoy.url + "/v1/completions", headers=headers) as r:
                assert r.status == 405 and "POST" in r.headers["Allow"], (method, r.status)
        async with s.post(envoy.url + "/v1/completions", data=b"[1]",
                          headers={"Origin": PAGE, "Content-Type": "application/json"}) as r:
            assert r.status == 400 and r.headers["Access-Control-Allow-Origin"] == PAGE
            assert (await r.json())["error"]["code"] == "invalid_json"
    assert picker.errors[400] == 1 and picker.picks == 2
