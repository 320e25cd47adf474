"""Envoy's own 502/503/504 when the endpoint the picker chose fails (docs/epp.md, "Envoy's own
answers": the ``gateway_error`` and ``replica_unresponsive`` mappers of deploy/envoy/envoy.yaml's
``local_reply_config``): a replica killed after the picker saw it healthy (connect refused:
503), one that closes the connection on the request (503), one that answers no HTTP (502), one
silent past the route timeout or the stream idle timeout (504, code ``replica_unresponsive`` as
the router answers it). The client gets OpenAI error JSON with Envoy's status and nothing else,
and the next request, to a healthy replica, is served through the same Envoy.

A real Envoy (bench/envoy_proc.py) with the shipped config (the subset hint wired as
tests/epp/test_epp_envoy_protocol.py wires it, so the test names the failing replica; the
timeouts shortened where a case needs them), the real picker, a real aiohttp replica
(tests/router/test_router_hostile_replica.py ``fake_replica``) and a raw asyncio replica that
answers the picker's /health and lookup and fails the completion, all on 127.0.0.1, each
stopped by pid or context.
"""

from __future__ import annotations

import asyncio
import contextlib

import aiohttp
import pytest

from bench.envoy_proc import Envoy
from kvpool.epp.cli import picking
from kvpool.epp.picker import Picker, endpoint_of
from kvpool.router.proxy import Router
from kvpool.router.replicas import ReplicaSet
from tests.epp.test_epp_envoy_local_reply import error_of
from tests.epp.test_epp_envoy_protocol import BODY, FORWARD_HINT, SUBSET_FILTER
from tests.epp.test_epp_subset import HOT
from tests.router.helpers import LOOKUP_TIMEOUT
from tests.router.test_router_hostile_replica import OK_HEALTH, fake_replica

ROUTE_TIMEOUT = ("route: {cluster: replicas, timeout: 0s}",
                 "route: {cluster: replicas, timeout: 1s}")
# what a failing replica fails (the rest, its /health and lookups, it answers)
GENERATION = (b"/v1/completions", b"/v1/chat/completions", b"/v1/messages")
IDLE_TIMEOUT = ("          stat_prefix: inference\n",
                "          stat_prefix: inference\n          stream_idle_timeout: 1s\n")


async def failing(mode: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """One connection: /health and the lookup answered (the picker's), a completion failed as
    ``mode`` says: ``close`` the connection, ``garbage`` (no HTTP), ``silent`` (until Envoy
    gives up and closes)."""
    try:
        while True:
            head = await reader.readuntil(b"\r\n\r\n")
            path = head.split()[1]
            if path in GENERATION:
                if mode == "garbage":
                    writer.write(b"NOT HTTP\r\n\r\n")
                elif mode == "silent":
                    await reader.read()  # the body, then nothing until Envoy's EOF
                return
            length = [int(line.split(b":")[1]) for line in head.lower().split(b"\r\n")
                      if line.startswith(b"content-length:")]
            await reader.readexactly(length[0] if length else 0)
            body = OK_HEALTH if path == b"/health" else HOT
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                         b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


@contextlib.asynccontextmanager
async def failing_replica(mode: str):
    """A replica failing completions as ``mode`` says (``failing``); yields its base URL."""
    tasks: set[asyncio.Task] = set()

    async def serve(reader, writer) -> None:
        tasks.add(asyncio.current_task())  # type: ignore[arg-type]
        await failing(mode, reader, writer)

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await server.wait_closed()


@contextlib.asynccontextmanager
async def gateway(stack: contextlib.AsyncExitStack, urls: list[str], workdir, edits=()):
    """The picker over ``urls`` (healthy at its first poll, no beat after) and Envoy in front;
    yields (the picker, Envoy's URL)."""
    picker = Picker(Router(ReplicaSet(urls, interval=3600), lookup_timeout=LOOKUP_TIMEOUT))
    port = await stack.enter_async_context(picking(picker, "127.0.0.1", 0))
    envoy = Envoy(port, workdir, (SUBSET_FILTER, FORWARD_HINT, *edits))
    await asyncio.to_thread(envoy.start)
    try:
        yield picker, envoy.url
    finally:
        await asyncio.to_thread(envoy.stop)


async def failed_then_served(s: aiohttp.ClientSession, url: str, bad: str, good: str,
                             status: int) -> dict:
    """The request the picker sends to ``bad`` gets Envoy's ``status`` as OpenAI JSON (its
    error returned); the next, to ``good``, is served."""
    timeout = aiohttp.ClientTimeout(total=30)
    async with s.post(url + "/v1/completions", json=BODY, timeout=timeout,
                      headers={"x-subset": endpoint_of(bad)}) as r:
        err = await error_of(r, status)
        assert r.headers["x-kvpool-picked"] == endpoint_of(bad)
        assert "Retry-After" not in r.headers  # the picker's own answer's, not this
    async with s.post(url + "/v1/completions", json=BODY, timeout=timeout,
                      headers={"x-subset": endpoint_of(good)}) as r:
        assert r.status == 200 and (await r.json())["served_by"] == "hot"
    return err


@pytest.mark.parametrize("mode, edits, status, message, code", [
    ("close", (), 503, "reset reason: connection termination", "gateway_error"),
    ("garbage", (), 502, "reset reason: protocol error", "gateway_error"),
    ("silent", (ROUTE_TIMEOUT,), 504, "upstream request timeout", "replica_unresponsive"),
    # the shipped route has no timeout
    ("silent", (IDLE_TIMEOUT,), 504, "stream timeout", "replica_unresponsive"),
])
async def test_a_failing_replica_is_answered_gateway_error_json(tmp_path, mode, edits, status,
                                                                message, code):
    async with contextlib.AsyncExitStack() as stack, aiohttp.ClientSession() as s:
        good = await stack.enter_async_context(fake_replica("hot", HOT))
        bad = await stack.enter_async_context(failing_replica(mode))
        picker, url = await stack.enter_async_context(
            gateway(stack, [good, bad], tmp_path, edits))
        err = await failed_then_served(s, url, bad, good, status)
        assert (err["type"], err["param"], err["code"]) == ("server_error", None, code), err
        assert message in err["message"], err
        assert picker.picks == 2 and sum(picker.errors.values()) == 0


async def test_a_replica_killed_after_the_pickers_poll_is_answered_503_json(tmp_path):
    async with contextlib.AsyncExitStack() as stack, aiohttp.ClientSession() as s:
        good = await stack.enter_async_context(fake_replica("hot", HOT))
        doomed = contextlib.AsyncExitStack()
        bad = await doomed.enter_async_context(fake_replica("doomed", HOT))
        picker, url = await stack.enter_async_context(gateway(stack, [good, bad], tmp_path))
        await doomed.aclose()  # its port refuses now; the picker still holds it healthy
        err = await failed_then_served(s, url, bad, good, 503)
        assert err["code"] == "gateway_error" and err["type"] == "server_error", err
        assert "connection failure" in err["message"], err
        assert picker.picks == 2
