"""The KV event endpoints a replica names are dialled only on its own host (kvpool/router/
kv_endpoints.py NOTE(own-host)). The replica is a real aiohttp server on 127.0.0.1 answering
GET /v1/kvpool/kv_events; the "internal host" it points the router at is a TCP listener on
127.0.0.2 (another loopback address: another host by the rule) counting who connects."""

from __future__ import annotations

import asyncio
import contextlib
import logging

import aiohttp
import zmq.asyncio
from aiohttp import web

from kvpool.router.kv_feed import ReplicaFeed
from kvpool.router.replicas import Replica
from tests.router.helpers import apps_served

INFO = {"enabled": True, "replica_id": "r", "topic": "", "block_size": 16,
        "hash": {"spec": "kvpool/prefix/v1", "algo": "sha256", "model_id": "m"},
        "tokenizer": None, "chat_template": None, "max_model_len": 256,
        "tenant_namespaced": False, "tenant_header": None, "model_names": ["m"]}
CONNECT_WAIT = 10.0  # seconds a connection the router should make may take (bound, not timing)


@contextlib.asynccontextmanager
async def internal_host():
    """A listener on 127.0.0.2; yields (its port, the list of connections it accepted)."""
    accepted: list[int] = []

    def on_connect(_reader, writer):
        accepted.append(1)
        writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.2", 0)
    try:
        yield server.sockets[0].getsockname()[1], accepted
    finally:
        server.close()
        await server.wait_closed()


@contextlib.asynccontextmanager
async def replica_naming(info: dict):
    async def kv_events(_):
        return web.json_response(info)

    app = web.Application()
    app.router.add_get("/v1/kvpool/kv_events", kv_events)
    async with apps_served(app) as (url,):
        yield url


@contextlib.asynccontextmanager
async def feed_of(url: str, **kw):
    ctx = zmq.asyncio.Context()
    feed = ReplicaFeed(Replica(url), ctx, **kw)
    try:
        async with aiohttp.ClientSession() as s:
            yield feed, s
    finally:
        feed.close()
        ctx.term()


async def test_an_endpoint_on_another_host_is_refused_said_once_and_never_dialled(caplog):
    """Before: the router's SUB dialled 127.0.0.2 (any host the replica named)."""
    caplog.set_level(logging.WARNING, logger="kvpool.router")
    async with internal_host() as (port, accepted):
        info = {**INFO, "endpoint": f"tcp://127.0.0.2:{port}", "replay_endpoint": None}
        async with replica_naming(info) as url, feed_of(url) as (feed, s):
            for _ in range(3):  # refreshes ask again: said once
                await feed.refresh(s)
            assert not feed.live
            await asyncio.sleep(0.3)  # a dial, had there been one, would be in by now
    assert feed.unusable is not None and "127.0.0.2" in feed.unusable
    said = [r.getMessage() for r in caplog.records if "off its own host" in r.getMessage()]
    assert len(said) == 1 and "--kv-events-any-host" in said[0], said
    assert accepted == []


async def test_a_replay_endpoint_on_another_host_is_refused_too():
    async with internal_host() as (port, accepted):
        info = {**INFO, "endpoint": "tcp://*:9", "replay_endpoint": f"tcp://127.0.0.2:{port}"}
        async with replica_naming(info) as url, feed_of(url) as (feed, s):
            await feed.refresh(s)
    assert feed.unusable is not None and "replay_endpoint" in feed.unusable
    assert accepted == []


async def test_wildcard_and_own_host_endpoints_are_followed():
    info = {**INFO, "endpoint": "tcp://*:9", "replay_endpoint": "tcp://127.0.0.1:10"}
    async with replica_naming(info) as url, feed_of(url) as (feed, s):
        await feed.refresh(s)
        assert feed.unusable is None


async def test_any_host_follows_an_endpoint_on_another_host():
    async with internal_host() as (port, accepted):
        info = {**INFO, "endpoint": f"tcp://127.0.0.2:{port}", "replay_endpoint": None}
        async with replica_naming(info) as url, feed_of(url, any_host=True) as (feed, s):
            await feed.refresh(s)
            assert feed.unusable is None
            async with asyncio.timeout(CONNECT_WAIT):
                while not accepted:
                    await asyncio.sleep(0.02)
