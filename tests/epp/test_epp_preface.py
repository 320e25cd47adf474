"""Connections to the picker's gRPC port that do not speak plaintext HTTP/2 (NOTE(plaintext-h2c)
in kvpool/epp/preface.py), on 127.0.0.1: a real TLS client (Python's ssl), an HTTP/1.1 request,
other bytes and silence are each closed, counted by reason and said in one throttled WARNING
naming the fix, while an h2c connection is served; /metrics has the counts."""

from __future__ import annotations

import asyncio
import logging
import ssl

import aiohttp

from kvpool.epp.calls import PING, frame
from kvpool.epp.cli import picking
from kvpool.epp.listener import Server
from kvpool.epp.metrics import MetricsPort
from kvpool.epp.picker import Picker
from kvpool.router.proxy import Router
from kvpool.router.replicas import ReplicaSet
from tests.epp.test_epp_buffers import read_frame, said, tally, until
from tests.epp.test_epp_connections import connect, wait_for
from tests.router.helpers import LOOKUP_TIMEOUT
from tests.server.helpers import parse_metrics


async def tls_hello(port: int) -> None:
    """A TLS handshake to ``port`` (no verification, ALPN h2, as a gateway's): it fails."""
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    ctx.set_alpn_protocols(["h2"])
    try:
        _, writer = await asyncio.wait_for(
            asyncio.open_connection("127.0.0.1", port, ssl=ctx), 10)
    except (ssl.SSLError, ConnectionError, OSError):
        return
    writer.close()
    raise AssertionError("a TLS handshake succeeded on the plaintext port")


async def sent(port: int, data: bytes) -> None:
    """``data`` on a new connection, read until the server closes it."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(data)
    try:
        while await read_frame(reader) is not None:
            pass
    finally:
        writer.close()


async def test_non_h2c_clients_are_said_counted_and_closed_and_h2c_is_served(caplog):
    """Three TLS ClientHellos, an HTTP/1.1 GET, 12 other bytes and a silent connection (preface
    timeout 0.3 s): each closed and counted by reason; one WARNING per reason (the server's
    clock stands still), the TLS one saying the port is plaintext h2c and to drop TLS on the
    gateway's cluster, the HTTP/1 one that this is the gRPC ext_proc port, and the stop's for
    the other two TLS ones (NOTE(said-counts) in kvpool/throttle.py); an h2c connection still
    answers a PING. Before, each got GOAWAY PROTOCOL_ERROR (or an abort) with nothing logged or
    counted; before the stop said the rest, the two were never said."""
    caplog.set_level(logging.WARNING, logger="kvpool.epp")
    server = Server(tally, 1 << 20, preface_timeout=0.3, clock=lambda: 0.0)
    port = await server.start("127.0.0.1", 0)
    try:
        for _ in range(3):
            await tls_hello(port)
        await sent(port, b"GET /metrics HTTP/1.1\r\nHost: epp\r\n\r\n")
        await sent(port, b"hello world!")
        await sent(port, b"")  # silent: closed at the preface timeout
        await wait_for(lambda: sum(server.not_h2c.values()) == 6)
        assert server.not_h2c == {"tls": 3, "http1": 1, "not_h2c": 1, "preface_timeout": 1}
        warned = [r.getMessage() for r in caplog.records if r.name == "kvpool.epp"]
        assert len(warned) == 4, warned
        tls = [m for m in warned if "TLS ClientHello" in m]
        assert len(tls) == 1 and "plaintext h2c" in tls[0] and "without TLS" in tls[0], warned
        assert any("HTTP/1.x" in m and "gRPC ext_proc port" in m for m in warned), warned
        reader, writer = await connect(port)
        writer.write(frame(PING, 0, 0, b"h2cok!!!"))
        assert (await until(reader, PING))[1] == b"h2cok!!!"
        writer.close()
    finally:
        await server.stop(grace=0)
    assert said(caplog, "TLS ClientHello") == [1, 2] and said(caplog, "HTTP/1.x") == [1]


async def test_the_reasons_are_on_the_metrics_port():
    """A TLS ClientHello and an HTTP/1.1 request to the picker's gRPC port show on /metrics as
    kvpool_epp_connections_refused_total{reason="tls"} and {reason="http1"}, the cap's own
    reason at 0. Before, the family had no reason and neither moved."""
    picker = Picker(Router(ReplicaSet(["http://127.0.0.1:9"], interval=0.5),
                           lookup_timeout=LOOKUP_TIMEOUT))
    metrics = MetricsPort("127.0.0.1", 0)
    async with picking(picker, "127.0.0.1", 0, metrics=metrics) as port:
        await tls_hello(port)
        await sent(port, b"POST /v1/completions HTTP/1.1\r\nHost: epp\r\n\r\n")
        async with aiohttp.ClientSession() as s:
            for _ in range(100):  # bounded: 5 s for the ClientHello to be read
                async with s.get(metrics.url + "/metrics") as r:
                    samples = parse_metrics(await r.text())
                refused = {dict(k)["reason"]: v for k, v in samples.get(
                    "kvpool_epp_connections_refused_total", {}).items() if k}
                if refused.get("tls"):
                    break
                await asyncio.sleep(0.05)
    assert refused == {"max_connections": 0, "tls": 1, "http1": 1, "not_h2c": 0,
                       "preface_timeout": 0}, refused
