"""Hardened sentinels (kvpool/remote/clients.py NOTE(sentinel-auth)): a sentinel with
``requirepass`` and one that speaks TLS only, on loopback before a real master. The URL gives
their password (``?sentinel_password=``) and TLS (``?sentinel_ssl=true``); a refused password
is said as such. Before: the sentinels were asked with no credentials and in plain text,
called unreachable ("start the sentinels"), and could not be used at all."""

from __future__ import annotations

import logging
import subprocess
import time

import pytest
import redis

from bench.redis_ports import reserve_port
from bench.redis_servers import REDIS_SERVER, RedisServer, terminate
from kvpool.remote import CircuitBreaker, RedisTier, ValueCodec
from kvpool.remote.secret_marker import PLAIN, marker_key
from tests.remote.chains import chain
from tests.remote.conftest import NS
from tests.remote.tls_certs import make_tls_files


def _sentinel(tmp_path, master: RedisServer, extra: str, tls=None):
    """A sentinel watching ``master`` as service kvp with the ``extra`` conf lines; its port
    and process (the caller stops it with ``_stop``). The port stays held until then
    (bench/redis_ports.py NOTE(port-hold)): the sentinel binds it with SO_REUSEADDR."""
    port, held = reserve_port()
    listen = (f"port 0\ntls-port {port}\ntls-cert-file {tls.cert}\ntls-key-file {tls.key}\n"
              f"tls-ca-cert-file {tls.ca}\ntls-auth-clients no\n" if tls else f"port {port}\n")
    conf = tmp_path / f"sentinel-{port}.conf"
    conf.write_text(f"{listen}bind 127.0.0.1\ndir {tmp_path}\n{extra}"
                    f"sentinel monitor kvp 127.0.0.1 {master.port} 1\n")
    proc = subprocess.Popen([REDIS_SERVER, str(conf), "--sentinel"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    proc.held = held  # closed by _stop
    return port, proc


def _stop(proc) -> None:
    """Stop a sentinel by pid and let its port go."""
    terminate(proc)
    for s in proc.held:
        s.close()


async def _round_trip(url: str) -> bool:
    tier = RedisTier(url, ValueCodec(NS), op_timeout=3.0, connect_timeout=3.0,
                     breaker=CircuitBreaker(threshold=3, reset_s=0.3))
    try:
        for _ in range(100):  # bounded: the sentinel answers within a second
            if await tier.warm_up():
                break
            time.sleep(0.05)
        else:
            return False
        (h,) = chain(1)
        (key,) = NS.group_keys([h])
        value = tier.codec.encode(h, [b"\x05" * 4096])
        return await tier.put_many([(key, value)]) == 1 and await tier.get_many([key]) == [value]
    finally:
        await tier.aclose()


@pytest.mark.parametrize("tls", [False, True], ids=["plain", "tls-only"])
async def test_a_hardened_sentinel_is_used_with_its_password_and_tls(tmp_path, redis_server,
                                                                     caplog, tls):
    files = make_tls_files(tmp_path) if tls else None
    port, proc = _sentinel(tmp_path, redis_server, "requirepass spw\n", files)
    try:
        ssl = f"&sentinel_ssl=true&ssl_ca_certs={files.ca}" if tls else ""
        base = f"redis+sentinel://127.0.0.1:{port}/kvp"
        assert await _round_trip(f"{base}?sentinel_password=spw{ssl}")
        if tls:
            return
        master = redis.Redis.from_url(redis_server.url)  # the secret marker went through the
        try:  # sentinels to the master (kvpool/remote/secret_marker.py)
            assert master.get(marker_key(NS)) == PLAIN
        finally:
            master.close()
        caplog.clear()
        caplog.set_level(logging.WARNING, "kvpool.remote")
        tier = RedisTier(f"{base}?sentinel_password=wrong", ValueCodec(NS), op_timeout=3.0,
                         connect_timeout=3.0)
        try:
            assert not await tier.warm_up()
        finally:
            await tier.aclose()
        said = [r.getMessage() for r in caplog.records]
        assert any("the sentinels want a password" in m and "?sentinel_password=" in m
                   for m in said), said
        assert not any("start the sentinels" in m for m in said), said
    finally:
        _stop(proc)
