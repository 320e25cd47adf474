"""``kvpool router --upstream-keepalive SECONDS``: how long an idle connection to a replica is
reused (wire.py NOTE(idle), proxy.py UPSTREAM_KEEPALIVE). Its default stays below vLLM's
uvicorn keep-alive (5 s); a connection idle longer than the flag is not reused, one idle less
is; the flag takes only a finite number of seconds > 0. A real aiohttp replica on 127.0.0.1
tells the connections apart by their client port."""

from __future__ import annotations

import argparse
import asyncio
import contextlib

import aiohttp
import pytest
from aiohttp import web

from kvpool.router.cli import add_arguments, build_router, main
from tests.router.helpers import served

REPLICA_KEEPALIVE = 2.0  # the replica's own idle close: longer than IDLE, shorter than 5 s
IDLE = 0.5  # seconds between the two requests: past a 0.2 s flag, well inside the replica's 2 s


@contextlib.asynccontextmanager
async def replica():
    """A replica closing idle connections after REPLICA_KEEPALIVE; yields its URL and the
    client port of each completion request it answered."""
    ports: list[int] = []

    async def health(_: web.Request) -> web.Response:
        return web.json_response({"status": "ok"})

    async def completions(request: web.Request) -> web.Response:
        ports.append(request.transport.get_extra_info("peername")[1])
        return web.json_response({"object": "text_completion", "choices": []})

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_post("/v1/completions", completions)
    runner = web.AppRunner(app, keepalive_timeout=REPLICA_KEEPALIVE)
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        yield f"http://127.0.0.1:{runner.addresses[0][1]}", ports
    finally:
        await runner.cleanup()


def parse(*flags: str) -> argparse.Namespace:
    return add_arguments(argparse.ArgumentParser()).parse_args(list(flags))


async def connections_for_two_requests(keepalive: str | None) -> int:
    """Replica connections two requests IDLE seconds apart came on, through a router run with
    ``--upstream-keepalive keepalive`` (None: the default)."""
    flag = [] if keepalive is None else ["--upstream-keepalive", keepalive]
    async with replica() as (rep, ports):
        router = build_router(parse("--replica", rep, "--policy", "round_robin", *flag))
        async with served(router) as url, aiohttp.ClientSession() as s:
            for i in range(2):
                if i:
                    await asyncio.sleep(IDLE)  # orders the idle time before the second request
                async with s.post(url + "/v1/completions", json={"prompt": "x"}) as resp:
                    assert resp.status == 200, await resp.text()
        assert len(ports) == 2
        return len(set(ports))


async def test_a_connection_idle_past_the_flag_is_not_reused():
    assert await connections_for_two_requests("0.2") == 2


async def test_a_connection_idle_within_the_flag_is_reused():
    assert await connections_for_two_requests("1") == 1
    assert await connections_for_two_requests(None) == 1  # the default, 4 s


def test_the_default_stays_below_vllms_keepalive():
    assert 0 < parse("--replica", "http://127.0.0.1:9").upstream_keepalive < 5.0


@pytest.mark.parametrize("bad", ["0", "-1", "nan", "inf"])
def test_the_flag_takes_only_seconds_above_zero(bad, capsys):
    assert main(["--replica", "http://127.0.0.1:9", "--upstream-keepalive", bad]) == 2
    assert "--upstream-keepalive" in capsys.readouterr().err
