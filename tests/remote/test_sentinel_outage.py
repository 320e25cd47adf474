"""A redis+sentinel:// tier that finds no master says why, once, with the fix (real
sentinels on loopback, NOTE(sentinel-why)): no sentinel answers (an outage: start them or fix
the URL's list, the tier retries), the sentinels know the service but its master is down (a
failover pending), the sentinels name no master for that name (the name's fix), the master
they name refuses (a failover under way: no URL fix)."""

from __future__ import annotations

import subprocess
import time

import pytest

from bench.redis_ports import dead_port, reserve_port
from bench.redis_servers import REDIS_SERVER, ping, terminate
from kvpool.remote import BreakerState
from tests.remote.test_diagnose import items, lines, tiers  # noqa: F401 (fixtures)


async def _misses(tier, rounds: int = 5) -> None:
    its = items(tier.codec, 4)
    keys = [k for k, _ in its]
    for _ in range(rounds):
        assert await tier.put_many(its) == 0
        assert await tier.probe(keys) == 0


def _said_once(caplog, text: str) -> str:
    said = lines(caplog, text)
    assert len(said) == 1, caplog.text
    return said[0]


async def test_no_sentinel_answering_is_an_outage_not_a_wrong_name(tiers, caplog):
    with dead_port() as a, dead_port() as b:  # nothing listens on either (NOTE(dead-port))
        tier = tiers(f"redis+sentinel://127.0.0.1:{a},127.0.0.1:{b}/kvp")
        assert not await tier.warm_up()
        await _misses(tier)
    line = _said_once(caplog, "no sentinel answered")
    assert f"127.0.0.1:{a}, 127.0.0.1:{b}" in line and "start the sentinels" in line, line
    assert not lines(caplog, "name no master for that service")
    start = _said_once(caplog, "at startup")
    assert "not reachable at startup (sentinelsdown)" in start and "no retry" not in start
    assert tier.stats().breaker_state != int(BreakerState.CLOSED)


def _sentinel(tmp_path, down_after_ms: int):
    """A sentinel monitoring service kvp whose master is a port nothing listens on, judging
    it down after ``down_after_ms``; (its port, its process). Both ports stay held
    (bench/redis_ports.py NOTE(port-hold)) until the process is stopped: a free_port() let go
    at once could be drawn by another worker's server, and a live "dead" master was never
    judged down (a CI run's 'the sentinel never judged the dead master down')."""
    (port, held), (dead, held_dead) = reserve_port(), reserve_port()
    conf = tmp_path / "sentinel.conf"
    conf.write_text(f"port {port}\nbind 127.0.0.1\ndir {tmp_path}\n"
                    f"sentinel monitor kvp 127.0.0.1 {dead} 1\n"
                    f"sentinel down-after-milliseconds kvp {down_after_ms}\n")
    proc = subprocess.Popen([REDIS_SERVER, str(conf), "--sentinel"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    proc.held = held + held_dead  # closed by _stop
    return port, proc


def _stop(proc) -> None:
    """Stop a sentinel by pid and let its ports go."""
    terminate(proc)
    for s in proc.held:
        s.close()


@pytest.fixture
def sentinel_of_a_dead_master(tmp_path):
    """A sentinel that has judged its master down; its port. Stopped by pid."""
    port, proc = _sentinel(tmp_path, 100)
    import redis
    try:
        for _ in range(500):  # bounded: down-after is 0.1 s
            if ping(port):
                r = redis.Redis(port=port)
                flags = r.sentinel_master("kvp").get("is_sdown")
                r.close()
                if flags:
                    break
            time.sleep(0.02)
        else:
            pytest.fail("the sentinel never judged the dead master down")
        yield port
    finally:
        _stop(proc)


async def test_a_master_refusing_before_the_sentinels_judge_it_is_no_url_fix(tmp_path, tiers,
                                                                           caplog):
    """diagnose.py NOTE(sentinel-refused): a failover's first moments (the master killed, not
    yet judged down) said "start Redis or fix --remote-url" where the URL was right."""
    port, proc = _sentinel(tmp_path, 60_000)
    try:
        for _ in range(500):  # bounded
            if ping(port):
                break
            time.sleep(0.02)
        tier = tiers(f"redis+sentinel://127.0.0.1:{port}/kvp")
        assert not await tier.warm_up()
        await _misses(tier)
    finally:
        _stop(proc)
    line = _said_once(caplog, "refuses connections")
    assert "failing over" in line and "needs no fix" in line, line
    assert not lines(caplog, "fix --remote-url")
    assert "not reachable at startup (refused)" in _said_once(caplog, "at startup")


async def test_a_master_the_sentinels_report_down_is_said_as_such(sentinel_of_a_dead_master,
                                                                  tiers, caplog):
    tier = tiers(f"redis+sentinel://127.0.0.1:{sentinel_of_a_dead_master}/kvp")
    assert not await tier.warm_up()
    await _misses(tier)
    line = _said_once(caplog, "no master to use")
    assert "report its master down" in line and "promote a replica" in line, line
    assert not lines(caplog, "name no master for that service")
    assert "not reachable at startup (masterdown)" in _said_once(caplog, "at startup")
