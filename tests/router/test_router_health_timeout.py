"""``kvpool router --health-timeout SECONDS``: a /health answer slower than this takes the
replica out of new choices (replicas.py NOTE(liveness)). SGLang's /health runs a generation, so
a busy SGLang replica answers it late by design; with the flag raised past that, the replica
keeps taking requests, where the default 0.5 s leaves it out and the router answers 503. A real
aiohttp replica on 127.0.0.1 answers /health after LATE seconds."""

from __future__ import annotations

import argparse
import asyncio

import aiohttp
import pytest
from aiohttp import web

from kvpool.router.cli import add_arguments, build_router
from tests.router.helpers import apps_served, served

LATE = 0.8  # seconds the replica's /health takes: past the default 0.5, well inside 4


def slow_health_replica() -> web.Application:
    async def health(_request):
        await asyncio.sleep(LATE)
        return web.json_response({"status": "ok", "num_running": 0, "num_waiting": 0})

    async def complete(_request):
        return web.json_response({"object": "text_completion", "choices": []})

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_post("/v1/completions", complete)
    return app


async def status_through_router(*flags: str) -> int:
    """The status of one completion through a router over the slow replica, after its first
    beats (each waits LATE)."""
    async with apps_served(slow_health_replica()) as (url,):
        args = add_arguments(argparse.ArgumentParser()).parse_args(
            ["--replica", url, "--policy", "round_robin", *flags])
        router = build_router(args)
        async with served(router) as rurl, aiohttp.ClientSession() as s:
            await asyncio.sleep(3 * LATE)  # beats answered (late or in time)
            async with s.post(rurl + "/v1/completions",
                              json={"model": "m", "prompt": "hi"}) as r:
                return r.status


@pytest.mark.parametrize("flags, want", [((), 503), (("--health-timeout", "4"), 200)])
async def test_a_slow_health_is_late_only_past_the_flag(flags, want):
    assert await status_through_router(*flags) == want


def test_the_flag_takes_only_seconds_above_zero():
    args = add_arguments(argparse.ArgumentParser()).parse_args(
        ["--replica", "http://127.0.0.1:1", "--health-timeout", "0"])
    with pytest.raises(ValueError, match="timeout"):
        build_router(args)
