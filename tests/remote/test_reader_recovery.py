"""After a slow spell of the tier, the read path fetches again once the tier is fast
(kvpool/runtime/remote/reader.py NOTE(probe-worth)). The cost model's fixed-cost estimate was
measured by complete fetches only, and once one slow fetch put it above the recompute
estimate, no fetch was tried again: the replica recomputed every request until restarted.

One real redis-server, written by one engine; a second engine reads it through a loopback
proxy whose reply delay the test sets. No timing is asserted: the delay only makes the one
slow fetch slow; what is counted is which requests were fetched."""

from __future__ import annotations

import asyncio
import logging
import time

from kvpool.runtime.remote.reader import PROBE_EVERY
from tests.remote.engines import PROMPT, engine, run, settle, stop

# 8 full blocks the stored PROMPT never starts with: a prefill that measures the rate
OTHER = [(i * 11 + 5) % 500 + 1 for i in range(16 * 8 + 3)]
LIMIT = (len(PROMPT) - 1) // 16  # blocks of PROMPT a read can fetch


class DelayProxy:
    """A loopback TCP proxy to ``port`` that holds each reply chunk ``delay`` seconds (a
    delay line: chunks keep their order; set ``delay`` at any time, 0 for none)."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.delay = 0.0
        self.server: asyncio.AbstractServer | None = None
        self.tasks: set[asyncio.Task] = set()

    async def start(self) -> str:
        self.server = await asyncio.start_server(self.handle, "127.0.0.1", 0)
        return f"redis://127.0.0.1:{self.server.sockets[0].getsockname()[1]}/0"

    async def handle(self, r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        ur, uw = await asyncio.open_connection("127.0.0.1", self.port)
        for t in (self.pipe(r, uw, False), self.pipe(ur, w, True)):
            task = asyncio.ensure_future(t)
            self.tasks.add(task)
            task.add_done_callback(self.tasks.discard)

    async def pipe(self, src: asyncio.StreamReader, dst: asyncio.StreamWriter,
                   delayed: bool) -> None:
        """Copy ``src`` to ``dst``; a reply chunk is written ``delay`` after it arrived."""
        late: asyncio.Queue = asyncio.Queue()

        async def write() -> None:
            while (item := await late.get()) is not None:
                await asyncio.sleep(max(0.0, item[0] - time.monotonic()))
                dst.write(item[1])
                await dst.drain()

        writer = asyncio.ensure_future(write())
        try:
            while chunk := await src.read(1 << 16):
                late.put_nowait((time.monotonic() + (self.delay if delayed else 0.0), chunk))
            late.put_nowait(None)
            await writer
        except ConnectionError:
            pass
        finally:
            writer.cancel()
            dst.close()

    async def close(self) -> None:
        assert self.server is not None
        self.server.close()
        for t in list(self.tasks):
            t.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)


async def _fetched(eng, salt: str) -> int:
    """Blocks of PROMPT (under ``salt``) the reader fetched for one request."""
    before = eng.reader.stats.fetched_blocks
    await run(eng, PROMPT, salt=salt)
    return eng.reader.stats.fetched_blocks - before


async def test_hits_come_back_within_probe_every_requests_after_a_slow_spell(
        redis_server, caplog):
    salts = [f"s{i}" for i in range(PROBE_EVERY + 3)]  # each a chain of its own in Redis
    e1 = await engine(redis_server.url)
    for s in salts:
        await run(e1, PROMPT, salt=s)
    await settle(e1)
    await stop(e1)
    proxy = DelayProxy(redis_server.port)
    url = await proxy.start()
    e2 = await engine(url, policy="off", op_timeout_ms=10_000, prefetch_timeout_ms=20_000)
    try:
        await run(e2, OTHER)  # the prefill rate is measured
        r = e2.reader
        assert await _fetched(e2, salts[0]) == LIMIT  # fast: fetched, fixed cost measured
        # one slow fetch, sized so that a fifth of it (its weight in the EMA) is twice the
        # recompute estimate
        proxy.delay = min(2.0, max(0.2, 10 * r.estimate(LIMIT)[1]))
        assert await _fetched(e2, salts[1]) == LIMIT
        proxy.delay = 0.0
        assert r.fixed_s > r.estimate(LIMIT)[1]  # the state that used to last for good
        caplog.set_level(logging.WARNING, "kvpool.runtime.remote.reader")
        got = [await _fetched(e2, s) for s in salts[2:]]
        assert LIMIT in got[:PROBE_EVERY], (got, r.stats, r.fixed_s, r.estimate(LIMIT))
        back = got.index(LIMIT)
        assert got[back + 1:] == [LIMIT] * (len(got) - back - 1), got  # and they stay
        assert r.stats.explored == 1
        said = [m for m in caplog.messages if "recomputed rather than fetched" in m]
        assert len(said) == 1, caplog.messages  # the stretch of declines, once
        st = e2.remote_link.tier.stats()
        assert st.reads["unprobed"] == back and st.fetched_blocks == (len(got) - back + 2) * LIMIT
    finally:
        await stop(e2)
        await proxy.close()


async def test_a_failed_probe_is_no_round_trip(redis_server):
    """A probe the tier cut at its deadline returns 0 without raising; its time fed the RTT
    EMA, inflating it (and the requests then went unprobed). It is counted instead."""
    proxy = DelayProxy(redis_server.port)
    url = await proxy.start()
    e2 = await engine(url, policy="off")  # the product's deadline: 0.25 s a round trip
    try:
        await run(e2, OTHER)
        r = e2.reader
        rtt = r.rtt
        proxy.delay = 1.0  # past the deadline: the probe fails (and opens the breaker)
        await run(e2, PROMPT, salt="cut")
        assert r.rtt == rtt
        assert r.stats.probe_failed == 1
        assert e2.remote_link.tier.stats().reads["probe_failed"] == 1
    finally:
        proxy.delay = 0.0
        await stop(e2)
        await proxy.close()
