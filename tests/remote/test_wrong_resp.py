"""A server that answers well-formed RESP of the wrong shape (``+OK``, ``:7`` or an array to
every command: a port taken by another service, a proxy) is "not Redis", as bytes that are no
RESP are (NOTE(handshake-reply)): the warm-up fails with the one fix line and the replica
serves without the tier, and the health check keeps running until a real Redis answers on
that port (NOTE(trial-raised)). Real sockets on 127.0.0.1: a small asyncio server stopped by
each test, and a real redis-server."""

from __future__ import annotations

import asyncio
import logging

import pytest

from bench.redis_ports import reserve_port
from bench.redis_servers import RedisServer
from redis.exceptions import RedisClusterException, RedisError

from kvpool.remote import BreakerState, CircuitBreaker, RedisTier, ValueCodec
from kvpool.remote.clients import client_from_url
from kvpool.remote.health import node_trial
from kvpool.remote.node_breakers import HealthChecks
from kvpool.remote.tier import RemoteStats
from tests.remote.breakers import wait_closed
from tests.remote.conftest import NS
from tests.remote.engines import PROMPT, engine, run, stop
from tests.remote.test_diagnose import items, lines

REPLIES = {"ok": b"+OK\r\n", "int": b":7\r\n", "array": b"*2\r\n:1\r\n+x\r\n"}
NOT_REDIS = "does not speak Redis"


@pytest.fixture
async def wrong_resp():
    """``start(mode, port=None)`` -> the port of a server answering each command it reads
    with ``REPLIES[mode]``; ``stop()`` closes it and its connections (also at the end)."""
    servers: list[asyncio.Server] = []
    writers: list[asyncio.StreamWriter] = []

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, reply: bytes
                     ) -> None:
        writers.append(writer)
        try:
            while data := await reader.read(65536):
                # one reply per command: each is a RESP array, "*N" at a line's start
                writer.write(reply * max(1, data.count(b"\r\n*") + data.startswith(b"*")))
        except ConnectionError:  # the client reset it: its end
            pass
        writer.close()

    async def start(mode: str, port: int | None = None) -> int:
        srv = await asyncio.start_server(lambda r, w: answer(r, w, REPLIES[mode]), "127.0.0.1",
                                         port or 0)
        servers.append(srv)
        return srv.sockets[0].getsockname()[1]

    async def stop_all() -> None:
        for srv in servers:
            srv.close()
            await srv.wait_closed()
        for w in writers:
            w.close()
        servers.clear()
        writers.clear()

    start.stop = stop_all
    yield start
    await stop_all()


def tier_at(port: int, reset_s: float = 0.1) -> RedisTier:
    return RedisTier(f"redis://127.0.0.1:{port}/0", ValueCodec(NS), connect_timeout=3.0,
                     op_timeout=3.0, breaker=CircuitBreaker(threshold=1, reset_s=reset_s))


@pytest.mark.parametrize("mode", sorted(REPLIES))
async def test_a_wrong_typed_reply_at_warm_up_is_not_redis_said_once(wrong_resp, caplog, mode):
    tier = tier_at(await wrong_resp(mode))
    try:
        assert not await tier.warm_up()  # it raised AttributeError: kvpool serve exited 1
        keys = [k for k, _ in items(tier.codec, 2)]
        assert await tier.probe(keys) == 0 and await tier.get_many(keys) == [None, None]
        said = lines(caplog, NOT_REDIS)
        assert len(said) == 1 and "check --remote-url's host and port" in said[0], caplog.text
        assert len(lines(caplog, "cannot serve the tier (protocol")) == 1
        assert tier.stats().errors.get("connection") == 1  # then its breaker refuses at once
    finally:
        await tier.aclose()


# NOTE(reply-shape): no HELLO under ?protocol=2, so the wrong reply reaches INFO (it raised
# AttributeError, or +OK was "reachable: Redis ?"); a sentinel's own connections are plain
# redis-py ones (they raised AttributeError at their handshake); NOTE(cluster-seed): a cluster
# seed's "cannot be connected" was "Redis answered an error", its breaker closed (CLUSTER
# SLOTS' parser raised TypeError under ?protocol=2)
FORMS = ["redis://127.0.0.1:{}/0?protocol=2", "redis+sentinel://127.0.0.1:{}/mymaster",
         "redis+cluster://127.0.0.1:{}", "redis+cluster://127.0.0.1:{}?protocol=2"]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("mode", sorted(REPLIES))
async def test_a_wrong_typed_reply_past_the_handshake_is_not_redis(wrong_resp, caplog, mode,
                                                                   form):
    tier = RedisTier(form.format(await wrong_resp(mode)), ValueCodec(NS), connect_timeout=3.0,
                     op_timeout=3.0, breaker=CircuitBreaker(threshold=1, reset_s=0.05))
    try:
        assert not await tier.warm_up()
        its = items(tier.codec, 2)
        assert await tier.put_many(its) == 0 and await tier.probe([k for k, _ in its]) == 0
        said = lines(caplog, NOT_REDIS)
        assert len(said) == 1 and "check --remote-url's host and port" in said[0], caplog.text
        assert len(lines(caplog, "cannot serve the tier (protocol")) == 1
        assert not lines(caplog, "is reachable") and not lines(caplog, "answered an error")
        for _ in range(250):  # bounded: the trial (PING's reply no PONG) fails every reset_s
            if tier.stats().health_failed >= 2:
                break
            await asyncio.sleep(0.02)
        assert tier.breaker.state is not BreakerState.CLOSED, tier.stats()
        assert tier.stats().health_failed >= 2 and tier.stats().puts == 0
    finally:
        await tier.aclose()


async def test_a_cluster_seed_not_redis_fails_each_call_as_one_until_its_breaker_opens(
        wrong_resp, caplog):
    """The probe's segments run at once (segments.all_at_once), which raised the seed's
    failure with its cause erased: "Redis answered an error", each call a success to the
    breaker (NOTE(cluster-seed))."""
    tier = RedisTier(f"redis+cluster://127.0.0.1:{await wrong_resp('ok')}", ValueCodec(NS),
                     connect_timeout=3.0, op_timeout=3.0,
                     breaker=CircuitBreaker(threshold=3, reset_s=30.0))
    try:
        assert not await tier.warm_up()
        keys = [k for k, _ in items(tier.codec, 2)]  # two segments
        assert await tier.probe(keys) == 0 and await tier.probe(keys) == 0
        assert tier.breaker.state is BreakerState.OPEN, tier.stats()
        assert tier.stats().errors == {"connection": 3}, tier.stats()
        assert len(lines(caplog, NOT_REDIS)) == 1 and not lines(caplog, "answered an error")
    finally:
        await tier.aclose()


@pytest.mark.parametrize("mode", sorted(REPLIES))
async def test_a_cluster_nodes_trial_fails_on_a_ping_answered_but_not_pong(wrong_resp, mode):
    """node_trial's PING went through the node's execute_command, whose False (no PONG)
    passed: a node's breaker closed on a server that is no Redis (?protocol=2: no HELLO)."""
    client = client_from_url(f"redis+cluster://127.0.0.1:{await wrong_resp(mode)}?protocol=2",
                             max_connections=2, connect_timeout=3.0)
    manager = client.redis.nodes_manager
    manager.nodes_cache.update(manager.startup_nodes)  # the node of a slot map read before
    try:
        with pytest.raises((RedisError, RedisClusterException)):  # then the seed's refresh
            await node_trial(client.redis, next(iter(manager.startup_nodes)), None, None,
                             "kvp:{x}", 3.0)
    finally:
        await client.aclose()


async def test_an_engine_starts_and_serves_with_the_tier_at_a_wrong_resp_server(wrong_resp,
                                                                                  caplog):
    eng = await engine(f"redis://127.0.0.1:{await wrong_resp('ok')}/0")  # raised before
    try:
        out = await run(eng, PROMPT)
        assert out.outputs[0].token_ids and len(lines(caplog, NOT_REDIS)) == 1, caplog.text
    finally:
        await stop(eng)


async def test_the_health_check_outlives_a_wrong_resp_server_and_closes_on_redis(wrong_resp,
                                                                                  caplog):
    """The probe's swap: Redis gone, a server answering +OK on its port, then Redis again."""
    caplog.set_level(logging.INFO, logger="kvpool.remote")
    # held from the draw until Redis answers there, across the swap: the +OK server and
    # redis-server both bind it with SO_REUSEADDR (bench/redis_ports.py NOTE(port-hold))
    port, held = reserve_port()
    await wrong_resp("ok", port)
    tier = tier_at(port)
    srv = RedisServer(port, held=held)
    try:
        assert not await tier.warm_up()
        keys = [k for k, _ in items(tier.codec, 2)]
        assert await tier.probe(keys) == 0  # open since the warm-up (threshold 1)
        for _ in range(250):  # bounded: a trial every reset_s (0.1 s)
            if tier.stats().health_failed >= 3:
                break
            await asyncio.sleep(0.02)
        assert tier.stats().health_failed >= 3, tier.stats()  # each one a failed trial
        assert tier.breaker.state is not BreakerState.CLOSED
        await wrong_resp.stop()
        srv.start()  # a real Redis on the same port
        assert await wait_closed(tier, 5.0) is not None, tier.stats()
        its = items(tier.codec, 2)
        assert await tier.put_many(its) == 2 and await tier.probe([k for k, _ in its]) == 2
        assert len(lines(caplog, NOT_REDIS)) == 1 and lines(caplog, "is reachable")
        assert not lines(caplog, "health check:")  # no trial raised
    finally:
        await tier.aclose()
        srv.stop()


async def test_a_trial_that_raises_is_a_failed_one_said_once_and_the_checks_go_on(caplog):
    """NOTE(trial-raised): whatever a trial raises, its loop goes on, and the breaker closes
    once a trial succeeds; before, the task ended and the breaker stayed half open."""
    raised = []

    async def trial(_b: CircuitBreaker) -> bool:
        if len(raised) < 3:
            raised.append(1)
            raise AttributeError("'bytes' object has no attribute 'get'")
        return True

    async def closed(_b: CircuitBreaker) -> None:
        return None

    stats = RemoteStats()
    checks = HealthChecks(trial, closed, stats)
    b = CircuitBreaker(threshold=1, reset_s=0.01)
    assert b.record_failure(b.admit(), "refused")
    checks.opened(b)
    try:
        for _ in range(250):  # bounded: a trial every reset_s
            if b.state is BreakerState.CLOSED:
                break
            await asyncio.sleep(0.02)
        assert b.state is BreakerState.CLOSED, (b.state, stats)
        assert stats.health_checks == 4 and stats.health_failed == 3
        said = [r for r in caplog.records if "health check: AttributeError" in r.getMessage()]
        assert len(said) == 1 and said[0].exc_info is not None  # with its traceback, once
    finally:
        await checks.aclose()
