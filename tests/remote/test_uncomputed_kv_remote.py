"""The remote tier stores only blocks whose KV was computed. Its writer names blocks by the
device prefix index (runtime/remote/writer.py), so a block the index held before its last
token's KV was written would reach Redis, and every replica fetching it, through the blocks a
later request hit (write_through_selective).

Engine 1 (the tiny model, stepped by the test, its writer on a real redis-server) runs A until
its o3 fills block 1 in the step that admits B (P + o1..o3 + 5 tokens), and A's forward fails
there (tests/runtime/stepped.py): block 1's last slot is never written. Engine 2, fresh, then
fetches B's prefix from Redis: it finds exactly the blocks engine 1 computed (block 0 from A's
prefill and block 1 from B's under write_through, block 0 only under write_through_selective,
B's one hit) and its greedy tokens and logprobs are those of an engine with no cache."""

from __future__ import annotations

import asyncio

import pytest

from kvpool.runtime.engine.async_engine import AsyncEngine, collect
from kvpool.runtime.remote.host_front import HostBlockFront
from kvpool.runtime.remote.writer import RemoteWriter
from kvpool.server.remote_setup import build_link
from tests.remote.engines import engine, stop
from tests.runtime.stepped import BS, FailArmed, Run, config, fresh, greedy, same
from tests.torch_threads import one_torch_thread  # noqa: F401 (autouse)


async def settled(writer: RemoteWriter) -> None:
    """Until the writer has no store in flight (bounded)."""
    for _ in range(250):
        if writer.inflight_bytes == 0 and writer.pending() == 0:
            return
        await asyncio.sleep(0.02)
    pytest.fail("stores still in flight after 5 s")


async def stored_by_engine_one(url: str, policy: str) -> list[int]:
    """Engine 1's run (see the module docstring); returns B's prompt."""
    plan = FailArmed()
    e1 = AsyncEngine(config(), faults=plan)  # never started: the test steps its core
    link = build_link(e1, url, write_policy=policy, op_timeout_ms=5000,
                      connect_timeout_ms=5000)
    core = e1.core
    writer = RemoteWriter(link, HostBlockFront(core.manager), core.copies,
                          core.storage.host_kv, core.storage.bytes_per_block,
                          asyncio.get_running_loop())
    core.block_sink = writer
    run = Run(core=core)
    try:
        b = run.fail_a_as_b_joins(plan)
        run.drain(empty=False)
        assert run.final["b"].num_cached_tokens == BS
        await settled(writer)
        run.empty()
        assert link.tier.stats().puts >= 1
        return b
    finally:
        core.block_sink = None
        await writer.aclose()
        await e1.shutdown()
        await link.tier.aclose()


@pytest.mark.parametrize("policy,fetched", [("write_through", 2), ("write_through_selective", 1)])
async def test_a_block_whose_last_token_was_never_computed_never_reaches_the_tier(
        redis_server, policy, fetched):
    b = await stored_by_engine_one(redis_server.url, policy)
    e2 = await engine(redis_server.url)
    try:
        out = await collect(e2.generate(None, b, greedy(6)))
        assert out.num_cached_tokens == fetched * BS
        assert e2.reader.stats.fetched_blocks == fetched
        got = [(t.token_id, t.logprob) for t in out.outputs[0].logprobs]
        assert same(got, fresh({"b": (b, 6)})["b"])
    finally:
        await stop(e2)
