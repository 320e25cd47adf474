"""The tier under TLS (``rediss://``) on a real redis-server started with ``--tls-port`` and a
CA made in the test: the connections are kvpool's buffered ones (the URL's scheme used to
swap in redis-py's plain SSLConnection, losing the read buffer), and values round-trip."""

from __future__ import annotations

import pytest

from kvpool.remote import CircuitBreaker, RedisTier, ValueCodec
from kvpool.remote.connections import BufferedConnection, BufferedTLSConnection
from redis.asyncio.connection import SSLConnection
from tests.remote.conftest import NS
from bench.redis_servers import RedisServer
from tests.remote.chains import chain
from tests.remote.tls_certs import make_tls_files


@pytest.fixture
def tls_server(tmp_path):
    srv = RedisServer(tls=make_tls_files(tmp_path))
    srv.start()
    try:
        yield srv
    finally:
        srv.stop()


async def test_rediss_uses_the_buffered_tls_connection_and_round_trips(tls_server):
    tier = RedisTier(tls_server.url, ValueCodec(NS), op_timeout=2.0, connect_timeout=2.0,
                     breaker=CircuitBreaker(threshold=3, reset_s=0.5))
    try:
        assert tier.connection_class is BufferedTLSConnection  # before any connection opens
        assert await tier.warm_up(2)
        hashes = chain(3)
        keys = NS.group_keys(hashes)
        vals = [tier.codec.encode(h, [bytes([i]) * (1 << 20)]) for i, h in enumerate(hashes)]
        assert await tier.put_many(list(zip(keys, vals))) == 3
        assert await tier.get_many(keys) == vals  # 1 MiB values read back through TLS
        assert tier.connection_class is BufferedTLSConnection
        assert issubclass(BufferedTLSConnection, SSLConnection)
        assert issubclass(BufferedTLSConnection, BufferedConnection)
        assert not tier.stats().errors
    finally:
        await tier.aclose()


def test_plain_urls_keep_the_buffered_connection_and_their_options():
    tier = RedisTier("redis://:pw@127.0.0.1:1/3", ValueCodec(NS))
    assert tier.connection_class is BufferedConnection
