"""Issue 16's "event-loop stalls while prefetching <= 5 ms": what a replica pays once, at start.

The stalls were one-time costs paid inside the first fetch on the event loop: a pooled Redis
connection per parallel MGET (socket connect + handshake, and redis-py's package-metadata
lookup per Connection object) and a worker thread per ``to_thread`` (``Thread.start`` blocks
its caller until the thread runs). These tests check where that work happens, not how long
it takes: the request window opens no connection and starts no thread, and building
connections does not look the redis version up again for each one.
"""

from __future__ import annotations

import asyncio
import threading

import redis
import redis.utils

from kvpool.remote import CircuitBreaker, RedisTier, ValueCodec
from kvpool.remote.redis_tier import GET_PARTS
from kvpool.runtime.engine.workers import default_workers, prestart_default_executor
from kvpool.runtime.remote.reader import MAX_CHUNKS
from tests.remote.conftest import NS
from bench.redis_ports import dead_port
from tests.remote.engines import PROMPT, engine, run, stop, stored, tokens
from tests.remote.redis_stats import CountedReads, commandstats


class ConnectionsSeen:
    """Redis's count of connections accepted, read over one connection of its own (kept open,
    so reading it again does not count itself)."""

    def __init__(self, port: int) -> None:
        self._r = redis.Redis(port=port, single_connection_client=True)

    def __call__(self) -> int:
        return int(self._r.info("stats")["total_connections_received"])

    def close(self) -> None:
        self._r.close()


def executor_threads() -> set[int]:
    # asyncio names its default executor's threads "asyncio_<n>"
    return {t.ident for t in threading.enumerate() if t.name.startswith("asyncio_")}


def store_in_another_loop(url: str) -> list:
    """Engine 1's run in a thread of its own with its own loop: this test's loop (and its
    default executor) then first serve engine 2, as in a fresh replica process."""
    out: list = []

    async def main() -> None:
        e1 = await stored(url)
        out.append(tokens(await run(e1, PROMPT)))
        await stop(e1)

    t = threading.Thread(target=lambda: asyncio.run(main()), name="engine-1")
    t.start()
    t.join(60)
    assert out, "engine 1 did not store the prompt"
    return out[0]


async def test_fetch_opens_no_connection_and_starts_no_thread(redis_server):
    want = store_in_another_loop(redis_server.url)
    assert executor_threads() == set()  # engine 1's loop shut its executor down

    seen = ConnectionsSeen(redis_server.port)
    e2 = await engine(redis_server.url)
    try:
        conns = seen()
        threads = executor_threads()
        got = await run(e2, PROMPT)
        assert tokens(got) == want
        assert e2.reader.stats.fetched_blocks >= 36  # the fetch did happen
        # the start opened every connection the fetch used and started its worker threads
        assert seen() == conns
        assert executor_threads() == threads
        assert len(threads) == default_workers()  # all started by engine 2's start
    finally:
        await stop(e2)
        seen.close()


async def test_fetch_sends_one_read_per_chunk(redis_server):
    """The reader's chunks are its parallelism; the tier does not split them again (4 x 4
    sockets ready at once were the rest of the loop's lag): one pipeline of GETRANGE per chunk,
    one GETRANGE per key (NOTE(bounded-get)), no MGET."""
    store_in_another_loop(redis_server.url)
    e2 = await engine(redis_server.url)
    tier = e2.remote_link.tier
    tier.reads = counted = CountedReads(tier.reads)
    try:
        before = commandstats(redis_server.port)
        await run(e2, PROMPT)
        after = commandstats(redis_server.port)
        assert e2.reader.stats.fetched_blocks >= 36
        assert counted.calls == MAX_CHUNKS
        assert after["getrange"] - before.get("getrange", 0) == counted.keys
        assert after.get("mget", 0) == before.get("mget", 0)
    finally:
        await stop(e2)


async def test_warm_up_opens_the_pool_once_and_keeps_it_usable(make_tier, redis_server,
                                                               monkeypatch):
    lookups = []
    real_version = redis.utils.metadata.version

    def counting_version(name):  # the real lookup, counted
        lookups.append(name)
        return real_version(name)

    monkeypatch.setattr(redis.utils.metadata, "version", counting_version)
    tier = make_tier(max_connections=MAX_CHUNKS * GET_PARTS)
    seen = ConnectionsSeen(redis_server.port)
    before = seen()
    assert await tier.warm_up(MAX_CHUNKS * GET_PARTS)
    assert seen() - before == MAX_CHUNKS * GET_PARTS
    assert len(lookups) <= 1, "redis-py's version looked up per connection"
    # every warmed connection went back to the pool: a full-width fetch neither blocks on the
    # pool nor opens another one
    keys = [f"kvp:1:{'0' * 16}:{i:064x}" for i in range(64)]
    got = await asyncio.gather(*(tier.get_many(keys[i::MAX_CHUNKS]) for i in range(MAX_CHUNKS)))
    assert all(v is None for part in got for v in part)
    assert seen() - before == MAX_CHUNKS * GET_PARTS
    assert tier.stats().errors == {}
    seen.close()


async def test_warm_up_with_redis_down_is_false_and_opens_the_breaker():
    with dead_port() as port:  # bench/redis_ports.py NOTE(dead-port)
        tier = RedisTier(f"redis://127.0.0.1:{port}/0", ValueCodec(NS),
                         breaker=CircuitBreaker(threshold=3, reset_s=0.5))
        try:
            assert not await tier.warm_up(4)
            assert tier.stats().breaker_opens == 1  # a refused connect opens it at once
            assert await tier.probe(["kvp:x"]) == 0  # and requests then miss without network
        finally:
            await tier.aclose()


async def test_prestart_starts_distinct_threads_that_later_jobs_reuse():
    before = executor_threads()
    assert await prestart_default_executor(3) == 3
    started = executor_threads() - before
    assert len(started) == 3
    loop = asyncio.get_running_loop()
    # NOTE(race): a worker marks itself idle just after its job's result is set; a submit in
    # between starts a new thread. An engine's first request comes long after its start; here
    # the jobs wait that long (bounded) instead.
    await asyncio.sleep(0.2)
    ran = await asyncio.gather(*(loop.run_in_executor(None, threading.get_ident)
                                 for _ in range(3)))
    # later jobs start no thread: they run on the started ones or on idle threads this loop's
    # executor had before (the test loop may be shared with earlier tests that used it)
    assert executor_threads() - before == started
    assert set(ran) <= started | before
