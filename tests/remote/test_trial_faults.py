"""What the tier's health check meets is said (real redis-server, real sockets on loopback):
a Redis that comes back from an outage wanting a password, or something that is no Redis on
its port, is said once with its fix and counted while the breaker stays open (redis_tier.py
NOTE(trial-fault)); a warm-up that met an outage says it in one line, the startup line with
the fix (diagnose.py NOTE(one-startup-line))."""

from __future__ import annotations

import asyncio
import logging

import pytest
import redis

from kvpool.remote import BreakerState, CircuitBreaker, RedisTier, ValueCodec
from kvpool.remote import startup
from bench.redis_ports import dead_port, reserve_port
from bench.redis_servers import RedisServer
from tests.remote.chains import chain
from tests.remote.conftest import NS

FIX = {"password": "Redis rejected the password", "http": "does not speak Redis"}
COUNTED = {"password": {"connection": 1, "auth": 1}, "http": {"connection": 2}}


def _warnings(caplog, text: str = "") -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "kvpool.remote"
            and r.levelno == logging.WARNING and text in r.getMessage()]


async def _not_redis(sock) -> asyncio.Server:
    """An HTTP-ish server listening on the held socket ``sock``: a connection's first bytes
    are answered a 400, as an HTTP server answers a Redis command; it is closed once the
    client closes it (a close of ours could race the client's reading: "closed", an outage)."""
    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1024)
        writer.write(b"HTTP/1.0 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        await reader.read()  # until the client closes
        writer.close()

    sock.listen()
    return await asyncio.start_server(answer, sock=sock)


async def _trials_after(tier: RedisTier, text: str, caplog, more: int) -> None:
    """Wait (bounded) until a warning has ``text``, then for ``more`` failed trials."""
    for _ in range(250):  # 5 s
        if _warnings(caplog, text):
            break
        await asyncio.sleep(0.02)
    n = tier.stats().health_failed
    for _ in range(250):
        if tier.stats().health_failed >= n + more:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{text!r} not said, or no more trials: {tier.stats()}")


@pytest.mark.parametrize("back", ["password", "http"])
async def test_a_misconfiguration_met_while_the_breaker_is_open_is_said(caplog, back):
    """The probe's F1: killed, then back with --requirepass (or HTTP on the port): the trials
    failed 22 times in 20 s with nothing said or counted, the log keeping "start Redis"."""
    port, held = reserve_port()  # refuses connections: bound, not listening (NOTE(port-hold))
    tier = RedisTier(f"redis://127.0.0.1:{port}/0", ValueCodec(NS), connect_timeout=2.0,
                     op_timeout=2.0, breaker=CircuitBreaker(threshold=3, reset_s=0.05))
    srv = http = None
    try:
        assert await tier.probe([NS.key(chain(1)[0])]) == 0  # refused: the breaker opens
        assert len(_warnings(caplog, "nothing accepts connections there")) == 1
        if back == "password":
            srv = RedisServer(port, password="pw", held=held)
            srv.start()
        else:
            http = await _not_redis(held[0])
        await _trials_after(tier, FIX[back], caplog, more=3)
        assert len(_warnings(caplog, FIX[back])) == 1, caplog.text
        assert len(_warnings(caplog)) == 2, caplog.text  # the outage's, then the fault's
        st = tier.stats()
        assert st.errors == COUNTED[back] and st.breaker_opens == 1, st
        assert tier.breaker.state is not BreakerState.CLOSED
    finally:
        await tier.aclose()
        if srv is not None:
            srv.stop()
        if http is not None:
            http.close()
            await http.wait_closed()
        for s in held:
            s.close()


async def test_a_warm_up_redis_does_not_answer_is_said_in_one_line(make_tier, redis_server,
                                                                 monkeypatch, caplog):
    """The probe's F5a: a replica started while Redis hung logged two WARNINGs for one fault,
    the deadline's line and the startup line."""
    monkeypatch.setattr(startup, "SETUP_S", 0.3)  # the setup bound, short for the test
    tier = make_tier(breaker=CircuitBreaker(threshold=3, reset_s=0.2))
    admin = redis.Redis(port=redis_server.port, single_connection_client=True)
    try:
        admin.execute_command("CLIENT", "PAUSE", 600, "ALL")  # hung for the warm-up's bound
        assert not await tier.warm_up(2)
    finally:
        admin.close()
    said = _warnings(caplog)
    assert len(said) == 1, said
    assert "did not answer in time at startup (timeout)" in said[0], said
    assert "it retries" in said[0] and "is it hung, overloaded or far away?" in said[0]
    assert tier.stats().errors == {"timeout": 1}


async def test_a_closed_port_at_warm_up_is_said_in_one_line(caplog):
    with dead_port() as port:  # nothing listens there (bench/redis_ports.py NOTE(dead-port))
        tier = RedisTier(f"redis://127.0.0.1:{port}/0", ValueCodec(NS),
                         breaker=CircuitBreaker(threshold=3, reset_s=30.0))
        try:
            assert not await tier.warm_up()
            assert await tier.probe([NS.key(chain(1)[0])]) == 0  # refused at once: no line
        finally:
            await tier.aclose()
    said = _warnings(caplog)
    assert len(said) == 1, said
    assert "not reachable at startup (refused)" in said[0], said
    assert said[0].endswith("start Redis or fix --remote-url"), said


async def test_a_service_that_drops_what_it_cannot_parse_is_named_in_the_fix(caplog):
    """Probe P5's F2: Python's http.server on the port answers a Redis command with no status
    line and closes, which redis-py reads as the server closing the connection; the fix said
    named TLS only, not the other service that listens there."""
    async def drop(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1024)
        writer.close()

    port, held = reserve_port()
    held[0].listen()
    srv = await asyncio.start_server(drop, sock=held[0])
    tier = RedisTier(f"redis://127.0.0.1:{port}/0", ValueCodec(NS),
                     breaker=CircuitBreaker(threshold=3, reset_s=30.0))
    try:
        assert not await tier.warm_up()
    finally:
        await tier.aclose()
        srv.close()
        await srv.wait_closed()
    said = _warnings(caplog, "dropped the connection")
    assert len(said) == 1, caplog.text
    assert "rediss://host:port" in said[0] and "another service listens there" in said[0]
