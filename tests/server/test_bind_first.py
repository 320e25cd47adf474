"""``kvpool serve`` takes its HTTP port before the model loads (kvpool/server/bind_first.py
NOTE(bind-first)): a port in use was found only after the weights were read and the KV cache
allocated. A model directory whose config.json is broken tells the two orders apart without a
clock: the first error ``serve`` meets is the one it prints. Real sockets on 127.0.0.1."""

from __future__ import annotations

import socket

import aiohttp
import pytest
from aiohttp import web

from kvpool.server import serve
from kvpool.server.bind_first import Listeners, bind_first, stop_listening
from kvpool.server.connections import ConnectionLimiter, start_listener

from tests.server.test_port_in_use import SMALL


@pytest.fixture
def broken_model(tmp_path):
    """A model directory the loader refuses (config.json is not JSON)."""
    (tmp_path / "config.json").write_text("{")
    return str(tmp_path)


def test_a_port_in_use_is_said_before_the_model_is_read(busy_port, broken_model, capsys):
    assert serve.main([*SMALL, "--port", str(busy_port), "--model", broken_model]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert err[0].startswith(f"kvpool serve: --port {busy_port}: cannot listen on "), err


def test_a_start_that_fails_after_the_bind_lets_the_port_go(broken_model, capsys):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    assert serve.main([*SMALL, "--port", str(port), "--model", broken_model]) == 2
    assert "config.json" in capsys.readouterr().err  # the model's error, after the bind
    with socket.socket() as s:  # no SO_REUSEADDR: any socket still bound there refuses it
        s.bind(("127.0.0.1", port))


async def test_a_host_with_several_addresses_is_served_on_each():
    """As a host resolving to several addresses (0.0.0.0 and ::) is bound: one socket each,
    served as one Listeners. Two loopback sockets stand for them (tests bind no other
    address)."""
    socks = bind_first("127.0.0.1", 0) + bind_first("127.0.0.1", 0)

    async def ok(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_get("/", ok)
    runner = web.AppRunner(app)
    await runner.setup()
    listener = await start_listener(runner, "127.0.0.1", 0, limiter=ConnectionLimiter(8),
                                    socks=socks)
    try:
        assert isinstance(listener, Listeners) and listener.is_serving()
        async with aiohttp.ClientSession() as session:
            assert len(listener.sockets) == 2
            for sock in listener.sockets:
                url = f"http://127.0.0.1:{sock.getsockname()[1]}/"
                async with session.get(url) as resp:
                    assert await resp.text() == "ok"
    finally:
        stop_listening(listener, socks)
        await runner.cleanup()
