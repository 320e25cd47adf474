"""The picker's Prometheus port (kvpool/epp/metrics.py, docs/epp.md "Metrics"), all on 127.0.0.1:
``kvpool epp``'s /metrics moves with picks made over the real gRPC path and with connections
refused at the cap, /health follows the replicas' health, the held-bytes gauge and the cut
counter follow the budget, hostile requests to the metrics port leave picking alone, and a
generation pick counts as the router's decision."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys

import aiohttp
import grpc
from aiohttp import web
from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as pb
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as pb_grpc

from kvpool.epp.calls import (DATA, END_HEADERS, END_STREAM, ENHANCE_YOUR_CALM, HEADERS,
                             PREFACE, RESOURCE_EXHAUSTED, RST_STREAM, SETTINGS, frame)
from kvpool.epp.cli import picking
from kvpool.epp.listener import Server
from kvpool.epp.metrics import MetricsPort
from kvpool.epp.picker import Picker, endpoint_of
from kvpool.epp.service import DESTINATION_HEADER, METADATA_NAMESPACE, EndpointPicker
from kvpool.router.lookups import LOOKUP_PATH
from kvpool.router.proxy import Router
from kvpool.router.replicas import ReplicaSet
from stress.http.servers import ROOT
from tests.epp.test_epp_buffers import until
from tests.epp.test_epp_envoy import spawn_epp
from tests.epp.test_epp_limits import CAP, PART, goaway_code, holding, holds
from tests.epp.test_epp_modes import BODY, MODE, headers
from tests.router.helpers import LOOKUP_TIMEOUT
from tests.router.test_router_responses_hostile import Fake, fakes
from tests.server.helpers import parse_metrics

TRANSPORT = ("kvpool_epp_picks_total", "kvpool_epp_full_duplex_bodies_total",
             "kvpool_epp_connections", "kvpool_epp_connections_refused_total",
             "kvpool_epp_connections_cut_total", "kvpool_epp_held_bytes")


async def scrape(s: aiohttp.ClientSession, base: str) -> dict[str, float]:
    """The samples of ``base``/metrics, by name: a labelled family's summed (the refused
    connections' reasons)."""
    async with s.get(base + "/metrics") as r:
        assert r.status == 200 and r.headers["Content-Type"].startswith("text/plain")
        return {name: by[()] if () in by else sum(by.values())
                for name, by in parse_metrics(await r.text()).items()}


def figures(samples: dict[str, float]) -> dict[str, float]:
    return {name: samples[name] for name in TRANSPORT}


async def health(s: aiohttp.ClientSession, base: str) -> tuple[int, dict]:
    async with s.get(base + "/health") as r:
        return r.status, await r.json()


async def pick(port: int, *messages: pb.ProcessingRequest) -> str:
    """One ext_proc call over grpcio on a connection of its own: the endpoint it was given."""
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        return await pick_on(channel, *messages)


async def pick_on(channel: grpc.aio.Channel, *messages: pb.ProcessingRequest) -> str:
    call = pb_grpc.ExternalProcessorStub(channel).Process(iter(messages))
    answers = await asyncio.wait_for(_drain(call), 20)
    meta = answers[0].dynamic_metadata.fields[METADATA_NAMESPACE].struct_value
    return meta.fields[DESTINATION_HEADER].string_value


async def _drain(call) -> list[pb.ProcessingResponse]:
    return [m async for m in call]


def models() -> pb.ProcessingRequest:
    """GET /v1/models as Envoy sends a request without a body: its headers alone."""
    hs = [base_pb2.HeaderValue(key=k, raw_value=v)
          for k, v in ((":method", b"GET"), (":path", b"/v1/models"))]
    return pb.ProcessingRequest(request_headers=pb.HttpHeaders(
        headers=base_pb2.HeaderMap(headers=hs), end_of_stream=True))


FULL_DUPLEX = (headers(MODE.FULL_DUPLEX_STREAMED),
               pb.ProcessingRequest(request_body=pb.HttpBody(body=BODY, end_of_stream=True)))


async def refused(port: int) -> int | None:
    """A new connection's GOAWAY code (the server speaks first, and past its cap closes it;
    nothing is sent, so the close is no reset that could lose the GOAWAY)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        return await goaway_code(reader)
    finally:
        writer.close()


@contextlib.asynccontextmanager
async def cli_picker(*argv: str):
    """``kvpool epp ARGV`` in a process of its own, started off the loop (the replicas it
    polls may be served by this loop); yields (gRPC port, metrics base URL); SIGTERM at the
    end, and it must exit 0."""
    proc, port, mport = await asyncio.to_thread(spawn_epp, *argv)
    try:
        yield port, f"http://127.0.0.1:{mport}"
    finally:
        os.kill(proc.pid, signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 20) == 0


async def test_the_cli_pickers_metrics_follow_its_picks_its_refusals_and_health():
    """``kvpool epp --max-connections 1 --metrics-port 0`` over one healthy replica: /health
    200 naming it; a headers-only pick and a full-duplex one on one gRPC connection raise
    picks to 2 and full-duplex bodies to 1; a raw connection holding a call open takes the
    one slot from the channel's idle connection (an idle close) and a third is refused (GOAWAY
    ENHANCE_YOUR_CALM), both counted; the router's own series are there too;
    once the replica is gone /health is 503. Without kvpool/epp/metrics.py there was no
    --metrics-port and no /metrics."""
    async with contextlib.AsyncExitStack() as replica, aiohttp.ClientSession() as s:
        (url,) = await replica.enter_async_context(fakes(Fake()))
        async with cli_picker("--replica", url, "--max-connections", "1",
                              "--health-interval", "0.2") as (port, base):
            first = await scrape(s, base)
            assert figures(first) == dict.fromkeys(TRANSPORT, 0)
            assert first["kvpool_epp_max_connections"] == 1
            assert first["kvpool_router_healthy_replicas"] == 1
            assert await health(s, base) == (200, {"status": "ok", "healthy": [url]})
            async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
                assert await pick_on(channel, models()) == endpoint_of(url)
                assert await pick_on(channel, *FULL_DUPLEX) == endpoint_of(url)
                # a call held open takes the slot: the channel's connection, with no call
                # open, makes room (NOTE(make-room) in kvpool/epp/listener.py)
                _, busy = await holding(port, 1)
                try:
                    assert await refused(port) == ENHANCE_YOUR_CALM  # every slot has a call
                    now = await settled(s, base)
                finally:
                    busy.close()
            assert figures(now) == {**dict.fromkeys(TRANSPORT, 0),
                                    "kvpool_epp_picks_total": 2,
                                    "kvpool_epp_full_duplex_bodies_total": 1,
                                    "kvpool_epp_connections": 1,
                                    "kvpool_epp_connections_refused_total": 1,
                                    "kvpool_epp_held_bytes": PART}
            assert now["kvpool_epp_connections_idle_closed_total"] == 1
            assert now["kvpool_router_response_ids"] == 0
            await replica.aclose()  # the replica stops: its beats fail
            await unhealthy(s, base)


async def settled(s: aiohttp.ClientSession, base: str) -> dict[str, float]:
    """The samples once one connection is left open (5 s at most)."""
    for _ in range(100):
        now = await scrape(s, base)
        if now["kvpool_epp_connections"] == 1:
            return now
        await asyncio.sleep(0.05)
    raise AssertionError(f"{now['kvpool_epp_connections']} connections stayed open")


async def unhealthy(s: aiohttp.ClientSession, base: str) -> None:
    """Wait (10 s at most) for /health to be 503 once no replica answers."""
    for _ in range(100):
        status, body = await health(s, base)
        if status == 503:
            assert body == {"status": "unavailable", "healthy": []}
            return
        await asyncio.sleep(0.1)
    raise AssertionError("/health stayed 200 though its one replica was down")


async def test_the_metrics_port_flags():
    """9090 by default, on --host's address unless --metrics-host; -1 serves none (no
    metrics in the ready line); outside -1..65535 exits 2; a port already taken exits 1 with
    the reason (no traceback)."""
    from kvpool.epp.cli import add_arguments, main, metrics_port
    import argparse
    parse = add_arguments(argparse.ArgumentParser()).parse_args
    replica = ["--replica", "http://127.0.0.1:9"]
    assert metrics_port(parse(replica)).url == "http://127.0.0.1:9090"
    assert metrics_port(parse([*replica, "--host", "0.0.0.0"])).url == "http://0.0.0.0:9090"
    assert metrics_port(parse([*replica, "--host", "0.0.0.0", "--metrics-host", "::1"])).url \
        == "http://[::1]:9090"
    assert metrics_port(parse([*replica, "--metrics-port", "-1"])) is None
    assert main([*replica, "--metrics-port", "-2"]) == 2
    assert main([*replica, "--metrics-port", "65536"]) == 2
    proc, _, mport = await asyncio.to_thread(spawn_epp, *replica, "--metrics-port", "-1")
    os.kill(proc.pid, signal.SIGTERM)
    assert await asyncio.to_thread(proc.wait, 20) == 0 and mport is None
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        out = await asyncio.to_thread(subprocess.run, [
            sys.executable, "-m", "kvpool", "epp", "--port", "0", *replica,
            "--metrics-port", str(taken.getsockname()[1]), "--grpc-health-port", "-1"],
            cwd=ROOT, capture_output=True, text=True, timeout=60,
            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert out.returncode == 1, out.stderr
    assert "kvpool epp:" in out.stderr and "Traceback" not in out.stderr, out.stderr


@contextlib.asynccontextmanager
async def in_process(urls: list[str]):
    """The picker over ``urls`` served in this loop with its metrics port; yields (picker,
    gRPC port, MetricsPort)."""
    picker = Picker(Router(ReplicaSet(urls, interval=0.5), lookup_timeout=LOOKUP_TIMEOUT))
    metrics = MetricsPort("127.0.0.1", 0)
    async with picking(picker, "127.0.0.1", 0, metrics=metrics) as port:
        yield picker, port, metrics


async def test_hostile_requests_to_the_metrics_port_leave_picking_alone(caplog):
    """On the metrics port: an unknown path is a 404 and a POST a 405 (OpenAI error JSON), a
    64 KiB header a 400 with one INFO line and no traceback (NOTE(metrics-edge)), and past
    its connection cap a new connection gets 503 at once; meanwhile gRPC picks are answered,
    and once the hostile connections are gone /metrics counts the picks. Without
    kvpool/epp/metrics.py the picker had no metrics port to ask."""
    caplog.set_level("INFO")
    async with fakes(Fake()) as (url,), in_process([url]) as (picker, port, metrics), \
            aiohttp.ClientSession() as s:
        async with s.get(metrics.url + "/nope") as r:
            assert r.status == 404 and (await r.json())["error"]["code"]
        async with s.post(metrics.url + "/metrics", data=b"x" * 100_000) as r:
            assert r.status == 405
        async with s.get(metrics.url + "/metrics", headers={"X-Big": "a" * (64 << 10)}) as r:
            assert r.status == 400 and (await r.json())["error"]["message"]
        assert await pick(port, models()) == endpoint_of(url)
        held = [await asyncio.open_connection("127.0.0.1", metrics.port)
                for _ in range(metrics.limiter.max_connections + 1)]
        try:
            reader, writer = held[-1]
            writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
            assert (await asyncio.wait_for(reader.read(), 5)).startswith(b"HTTP/1.1 503")
            assert await pick(port, *FULL_DUPLEX) == endpoint_of(url)
        finally:
            for _, writer in held:
                writer.close()
        await session_fits(metrics)
        assert figures(await scrape(s, metrics.url))["kvpool_epp_picks_total"] == 2
    assert metrics.limiter.rejected["max_connections"] >= 1
    assert not [r for r in caplog.records if r.exc_info], "a traceback was logged"
    assert picker.picks == 2


async def session_fits(metrics: MetricsPort) -> None:
    """Wait (5 s at most) until the metrics port has room for a new connection."""
    for _ in range(100):
        if metrics.limiter.open < metrics.limiter.max_connections:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{metrics.limiter.open} connections still open")


async def test_held_bytes_and_the_connections_cut_at_the_budget_are_scraped():
    """The budget test of test_epp_limits (budget 6 MiB, windows 4 MiB: A holds 3 MiB, B 2 MiB,
    C 1.5 MiB cuts A) read from /metrics: the held bytes follow the server's own count, the
    cut is counted once, the budget is exported."""
    picker = Picker(Router(ReplicaSet(["http://127.0.0.1:9"], interval=0.5),
                           lookup_timeout=LOOKUP_TIMEOUT))
    server = Server(EndpointPicker(picker).process, 1 << 20, max_connection_bytes=CAP,
                    max_held_bytes=6 << 20)
    metrics, peers = MetricsPort("127.0.0.1", 0), []
    await picker.start()
    try:
        port = await server.start("127.0.0.1", 0)
        await metrics.start(picker, server)
        async with aiohttp.ClientSession() as s:
            peers.append(await holding(port, 6))
            await holds(server, 3 << 20)
            assert (await scrape(s, metrics.url))["kvpool_epp_held_bytes"] == 3 << 20
            peers.append(await holding(port, 4))
            await holds(server, 5 << 20)
            peers.append(await holding(port, 3))
            assert await goaway_code(peers[0][0]) == ENHANCE_YOUR_CALM
            await holds(server, (2 << 20) + 3 * PART)
            now = await scrape(s, metrics.url)
        assert now["kvpool_epp_held_bytes"] == (2 << 20) + 3 * PART
        assert now["kvpool_epp_connections_cut_total"] == 1
        assert now["kvpool_epp_max_held_bytes"] == 6 << 20
    finally:
        for _, writer in peers:
            writer.close()
        await metrics.stop()
        await server.stop(grace=1)
        await picker.close()


@contextlib.asynccontextmanager
async def hitting(hit: int):
    """A replica on 127.0.0.1 that passes /health and answers every prefix lookup with ``hit``
    device tokens and no load; yields its URL."""
    async def lookup(request: web.Request) -> web.Response:
        await request.read()
        return web.json_response({"device_hit_tokens": hit, "host_hit_tokens": 0,
                                  "num_running": 0, "num_waiting": 0})

    async def health(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_post(LOOKUP_PATH, lookup)
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


async def test_generation_picks_are_counted_as_the_routers_decisions():
    """Two completions picked over gRPC on a replica reporting a 7-token hit: the router's
    kvpool_router_decisions_total{reason="only"} is 2 and its predicted hit tokens 14 on the
    picker's /metrics; a GET /v1/models pick is a pick but no decision. Without
    NOTE(decisions) in kvpool/epp/picker.py both stayed 0: the router counts them only as it
    relays a request, and the picker relays none."""
    async with hitting(7) as url, in_process([url]) as (picker, port, metrics), \
            aiohttp.ClientSession() as s:
        for _ in range(2):
            assert await pick(port, *FULL_DUPLEX) == endpoint_of(url)
        assert await pick(port, models()) == endpoint_of(url)
        async with s.get(metrics.url + "/metrics") as r:
            samples = parse_metrics(await r.text())
    decisions = {dict(k)["reason"]: v for k, v in
                 samples["kvpool_router_decisions_total"].items()}
    assert decisions == {"prefix": 0, "load": 0, "round_robin": 0, "only": 2, "retry": 0}
    assert samples["kvpool_router_predicted_hit_tokens_total"][()] == 14
    assert samples["kvpool_epp_picks_total"][()] == 3 == picker.picks


async def status_of(port: int, *messages: pb.ProcessingRequest) -> int:
    """One ext_proc call over grpcio (by default a body-less request): its ImmediateResponse's
    HTTP status."""
    messages = messages or (pb.ProcessingRequest(request_headers=pb.HttpHeaders(
        end_of_stream=True)),)
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = pb_grpc.ExternalProcessorStub(channel).Process(iter(messages))
        answers = await asyncio.wait_for(_drain(call), 20)
    return answers[0].immediate_response.status.code


async def too_large(port: int) -> bytes:
    """A raw call announcing a message past the server's largest: its trailers' block."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(PREFACE + frame(SETTINGS, 0, 0) + frame(HEADERS, END_HEADERS, 1, b"\x88")
                     + frame(DATA, 0, 1, (1 << 30).to_bytes(5, "big")))
        while True:
            flags, block = await until(reader, HEADERS, 1)
            if flags & END_STREAM:
                return block
    finally:
        writer.close()


async def test_failed_calls_error_answers_and_refused_streams_are_counted():
    """A picker over a replica that is never healthy, --max-open-streams 1: a headers-only
    pick (503), a body that is no JSON object (400), one over --max-body-bytes (413), a call
    announcing a message past the largest (RESOURCE_EXHAUSTED) and a second stream while one
    is open (REFUSED_STREAM) are each counted once on /metrics, by status. Without them the
    picker counted none of these (docs/epp.md said so): the families were not exported."""
    picker = Picker(Router(ReplicaSet(["http://127.0.0.1:9"], interval=0.5),
                           lookup_timeout=LOOKUP_TIMEOUT, max_body_bytes=1 << 10))
    metrics = MetricsPort("127.0.0.1", 0)
    async with picking(picker, "127.0.0.1", 0, metrics=metrics, max_open_streams=1) as port, \
            aiohttp.ClientSession() as s:
        assert await status_of(port) == 503
        assert await status_of(port, headers(MODE.FULL_DUPLEX_STREAMED), pb.ProcessingRequest(
            request_body=pb.HttpBody(body=b"[1]", end_of_stream=True))) == 400
        assert await status_of(port, headers(MODE.FULL_DUPLEX_STREAMED), pb.ProcessingRequest(
            request_body=pb.HttpBody(body=bytes(2 << 10), end_of_stream=True))) == 413
        assert b"grpc-status\x01" + str(RESOURCE_EXHAUSTED).encode() in await too_large(port)
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(PREFACE + frame(SETTINGS, 0, 0) + frame(HEADERS, END_HEADERS, 1, b"\x88")
                     + frame(HEADERS, END_HEADERS, 3, b"\x88"))
        try:
            await until(reader, RST_STREAM, 3)
            async with s.get(metrics.url + "/metrics") as r:
                samples = parse_metrics(await r.text())
        finally:
            writer.close()
    assert {dict(k)["code"]: v for k, v in samples["kvpool_epp_calls_failed_total"].items()} \
        == {"INVALID_ARGUMENT": 0, "DEADLINE_EXCEEDED": 0, "RESOURCE_EXHAUSTED": 1,
            "UNIMPLEMENTED": 0, "INTERNAL": 0}
    assert {dict(k)["status"]: v for k, v in samples["kvpool_epp_error_answers_total"].items()} \
        == {"400": 1, "413": 1, "502": 0, "503": 1, "504": 0}
    assert {dict(k)["reason"]: v for k, v in samples["kvpool_epp_streams_refused_total"].items()} \
        == {"max_open_streams": 1, "max_concurrent_streams": 0, "going_away": 0}
    assert samples["kvpool_epp_open_streams"][()] == 1
    assert samples["kvpool_epp_max_open_streams"][()] == 1
    assert picker.picks == 0
