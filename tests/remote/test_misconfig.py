"""More misconfigured tiers, each said once with its fix while the replica serves on (real
servers on loopback): a port where something other than Redis answers, ``rediss://`` to a
plain port, a cluster URL to one server, a sentinel URL naming no master, a read-only replica
addressed as the primary, a user whose ACL lacks the tier's commands."""

from __future__ import annotations

import subprocess
import time

import pytest
import redis
from aiohttp import web

from bench.redis_ports import dead_port, reserve_port
from bench.redis_servers import REDIS_SERVER, ping, terminate
from kvpool.remote import BreakerState
from tests.remote.breakers import warmed
from tests.remote.test_diagnose import items, lines, servers, tiers  # noqa: F401 (fixtures)


@pytest.fixture
async def http_port():
    """An aiohttp server on 127.0.0.1 (what a wrong port may hold); its port."""
    async def hello(request: web.Request) -> web.Response:
        return web.Response(text="hi")

    app = web.Application()
    app.router.add_get("/", hello)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield runner.addresses[0][1]
    finally:
        await runner.cleanup()


async def _misses(tier, rounds: int = 5) -> None:
    """Every call a miss (none raises), ``rounds`` times."""
    its = items(tier.codec, 4)
    keys = [k for k, _ in its]
    for _ in range(rounds):
        assert await tier.put_many(its) == 0
        assert await tier.probe(keys) == 0
        assert await tier.get_many(keys) == [None] * 4


async def test_a_port_that_speaks_http_is_named_once_and_opens_the_breaker(tiers, http_port,
                                                                           caplog):
    tier = tiers(f"redis://127.0.0.1:{http_port}/0")
    assert not await tier.warm_up()
    await _misses(tier)
    said = lines(caplog, "does not speak Redis")
    assert len(said) == 1 and "check --remote-url's host and port" in said[0], caplog.text
    assert not lines(caplog, "Redis answered an error")
    st = tier.stats()
    # a protocol error is no reply from Redis: the breaker opens, calls stop reaching the port
    assert st.breaker_state != int(BreakerState.CLOSED) and st.errors.get("breaker_open"), st
    assert "response" not in st.errors


async def test_rediss_to_a_plain_port_says_use_redis(servers, tiers, caplog):
    srv = servers()
    tier = tiers(f"rediss://127.0.0.1:{srv.port}/0", connect_timeout=0.5)
    assert not await tier.warm_up()
    await _misses(tier)
    said = lines(caplog, "got no TLS answer")
    assert len(said) == 1 and "use redis://host:port" in said[0], caplog.text
    assert not lines(caplog, "is it hung, overloaded or far away")


async def test_a_cluster_url_to_one_server_says_use_redis(servers, tiers, caplog):
    srv = servers()
    tier = tiers(f"redis+cluster://127.0.0.1:{srv.port}")
    assert not await tier.warm_up()
    await _misses(tier)
    said = lines(caplog, "are no cluster nodes")
    assert len(said) == 1 and "redis://HOST:PORT" in said[0], caplog.text
    assert not lines(caplog, "a failover in progress")
    assert tier.stats().errors.get("cluster", 0) >= 1


@pytest.fixture
def sentinel(tmp_path):
    """A bare sentinel on 127.0.0.1 monitoring nothing (no name resolves); stopped by pid."""
    port, held = reserve_port()  # until the sentinel is stopped (NOTE(port-hold))
    conf = tmp_path / "sentinel.conf"
    conf.write_text(f"port {port}\nbind 127.0.0.1\ndir {tmp_path}\n")
    proc = subprocess.Popen([REDIS_SERVER, str(conf), "--sentinel"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        for _ in range(250):  # bounded: a sentinel answers within a few 10 ms
            if ping(port):
                break
            time.sleep(0.02)
        yield port
    finally:
        terminate(proc)
        for sock in held:
            sock.close()


@pytest.mark.parametrize("service", ["nope", None])  # a wrong name; a server, no sentinel
async def test_a_sentinel_url_naming_no_master_says_so(sentinel, servers, tiers, caplog,
                                                       service):
    url = (f"redis+sentinel://127.0.0.1:{sentinel}/{service}" if service else
           f"redis+sentinel://127.0.0.1:{servers().port}/kvp")
    tier = tiers(url)
    assert not await tier.warm_up()
    await _misses(tier)
    said = lines(caplog, "name no master for that service")
    assert len(said) == 1 and "redis+sentinel://HOST:PORT/NAME" in said[0], caplog.text
    assert "<redis" not in said[0]  # no client repr in the line
    assert tier.stats().breaker_state != int(BreakerState.CLOSED)


async def test_a_read_only_replica_is_said_once_with_the_fix(servers, tiers, caplog):
    primary = servers()
    replica = servers(extra_args=("--replicaof", "127.0.0.1", str(primary.port)))
    tier = tiers(replica.url)
    await warmed(tier)  # reachable: its reads work, its puts cannot (NOTE(warmed))
    await _misses(tier)
    said = lines(caplog, "replica")
    assert len(said) == 1 and f"127.0.0.1:{primary.port}" in said[0], caplog.text
    assert "point --remote-url at the master" in said[0]
    assert tier.stats().errors.get("readonly", 0) >= 1
    # a primary turned replica under a running tier (a failover with a plain URL): no INFO
    # read since, so the first READONLY reply says it
    caplog.clear()
    other = tiers(primary.url)
    admin = redis.Redis(port=primary.port)
    admin.replicaof("127.0.0.1", replica.port)
    admin.close()
    await _misses(other)
    said = lines(caplog, "read-only replica")
    assert len(said) == 1 and "redis+sentinel://" in said[0], caplog.text
    assert not lines(caplog, "Redis answered an error")


@pytest.mark.parametrize("grant", ["+get", "+mget +set +del +touch +evalsha +script|load +ping "
                                   "+info"])  # one command; all the old fix listed, no TYPE
async def test_an_acl_user_without_the_tiers_commands_gets_the_acl_line(servers, tiers,
                                                                        caplog, grant):
    srv = servers(password="admin")
    admin = redis.Redis(port=srv.port, password="admin")
    admin.execute_command("ACL", "SETUSER", "u", "on", ">p", "~*", "-@all", *grant.split())
    admin.close()
    tier = tiers(f"redis://u:p@127.0.0.1:{srv.port}/0")
    await tier.warm_up()
    its = items(tier.codec, 4)
    for _ in range(3):
        await tier.put_many(its)
        assert await tier.probe([k for k, _ in its]) == 0
    said = lines(caplog, "lacks a permission")
    assert len(said) == 1 and "+type" in said[0] and "ACL SETUSER" in said[0], caplog.text
    assert not lines(caplog, "Redis answered an error")
    st = tier.stats()  # one event, then the calls pause (NOTE(pause), test_pause.py)
    assert st.errors.get("noperm") == 1 and st.breaker_state != int(BreakerState.CLOSED), st
    # the line pasted as given works on this user, whose ~* refused a bare ~kvp:* (Redis 7:
    # "Try 'resetkeys'"; diagnose.py NOTE(acl-line))
    fix = said[0].split("ACL SETUSER USER ", 1)[1].split(" (", 1)[0].split()
    admin = redis.Redis(port=srv.port, password="admin")
    try:
        assert admin.execute_command("ACL", "SETUSER", "u", *fix) in (True, b"OK")
        assert admin.acl_getuser("u")["keys"] in (["~kvp:*"], "~kvp:*")
    finally:
        admin.close()


def _startup_line(caplog) -> str:
    said = lines(caplog, "at startup")
    assert len(said) == 1, caplog.text
    return said[0]


@pytest.mark.parametrize("fault", ["noperm", "auth"])
async def test_a_server_that_refuses_the_tier_is_not_called_unreachable(servers, tiers,
                                                                        caplog, fault):
    srv = servers(password="admin")
    if fault == "noperm":  # an ACL user that may run GET only: SCRIPT LOAD fails NOPERM
        admin = redis.Redis(port=srv.port, password="admin")
        admin.execute_command("ACL", "SETUSER", "u", "on", ">p", "~*", "-@all", "+get")
        admin.close()
    url = f"redis://u:{'p' if fault == 'noperm' else 'wrong'}@127.0.0.1:{srv.port}/0"
    tier = tiers(url)
    assert not await tier.warm_up()
    line = _startup_line(caplog)
    # Redis answered: no outage and no timed retry in the line, the kind and the fix above it
    assert "not reachable" not in line and "retries" not in line, line
    assert f"cannot serve the tier ({fault}; the fix is logged above)" in line
    assert "until the server's settings or --remote-url are fixed" in line
    assert len(lines(caplog, "lacks a permission" if fault == "noperm" else
                     "rejected the password")) == 1


async def test_a_closed_port_is_an_outage_that_the_health_check_retries(tiers, caplog):
    with dead_port() as port:  # nothing listens there (bench/redis_ports.py NOTE(dead-port))
        tier = tiers(f"redis://127.0.0.1:{port}/0")
        assert not await tier.warm_up()
        line = _startup_line(caplog)
        assert "not reachable at startup (refused)" in line, line
        assert "the tier PINGs it about every 0.3 s" in line
        assert tier.breaker.state is not BreakerState.CLOSED  # the PINGs the line promises run
        assert len(lines(caplog, "nothing accepts connections there")) == 1


@pytest.mark.parametrize("target", ["sentinel", "dbindex"])
async def test_a_server_no_tier_call_can_work_on_is_refused_with_the_fix(
        sentinel, servers, tiers, caplog, target):
    """diagnose.py NOTE(refused-at-start): a redis:// URL at a Sentinel's port (SCRIPT is
    unknown there), or a DB index the server lacks. Before: a raw error, "the fix is logged
    above" with none logged, and every request went on calling the server."""
    url = (f"redis://127.0.0.1:{sentinel}" if target == "sentinel" else
           f"redis://127.0.0.1:{servers().port}/99")
    tier = tiers(url)
    assert not await tier.warm_up()
    kind = "unknowncmd" if target == "sentinel" else "dbindex"
    assert f"cannot serve the tier ({kind}; the fix is logged above)" in _startup_line(caplog)
    fix = ("use redis+sentinel://HOST:PORT/SERVICE" if target == "sentinel" else
           "e.g. redis://HOST:PORT/0")
    assert len(lines(caplog, fix)) == 1, caplog.text
    sent = dict(tier.stats().errors)
    await _misses(tier)
    errors = tier.stats().errors
    assert errors.get("refused_server", 0) >= 15  # none sent: the server is refused
    assert {k: v for k, v in errors.items() if k != "refused_server"} == sent
