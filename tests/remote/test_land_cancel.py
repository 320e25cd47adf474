"""A prefetch cancelled while its worker thread copies fetched bytes into lent host blocks
gives those blocks back only once the copy is done (kvpool/runtime/remote/reader.py
NOTE(land-cancel)). Before, the cancelled task's cleanup freed them at once while the thread
went on writing into them: a swap-out or another prefetch lent them next could have its
bytes overwritten by this request's. The cancel comes from the prefetch deadline or the
engine's shutdown.

Two real engines on one real redis-server: the first stores PROMPT, the second fetches it
with its value splitter held at a gate inside the worker thread, is cancelled there, and the
test reads the host pool's lent blocks before and after the gate opens."""

from __future__ import annotations

import asyncio
import threading

from tests.remote.engines import PROMPT, engine, stop, stored


def _host_used(eng) -> int:
    return eng.core.manager.stats().host.num_used


async def _until(cond, what: str) -> None:
    for _ in range(250):  # bounded: 5 s
        if cond():
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


async def test_a_cancelled_landing_keeps_its_host_blocks_until_the_copy_ends(redis_server):
    await stop(await stored(redis_server.url))
    e2 = await engine(redis_server.url, policy="off", fetch_bias=0.0)
    entered, gate = threading.Event(), threading.Event()
    split = e2.remote_link.split_blocks

    def held_split(value):  # runs in the reader's worker thread
        entered.set()
        gate.wait(5)
        return split(value)

    e2.remote_link.split_blocks = held_split
    task = asyncio.create_task(e2.reader.prefetch(PROMPT, None))
    try:
        await _until(entered.is_set, "the worker thread to start landing")
        lent = _host_used(e2)
        assert lent > 0
        task.cancel()
        await asyncio.wait([task])
        assert task.cancelled()
        await asyncio.sleep(0.2)  # the loop has run the cleanup by now
        assert _host_used(e2) == lent, "host blocks freed while the thread writes them"
    finally:
        gate.set()
    await _until(lambda: _host_used(e2) == 0, "the host blocks to come back")
    await stop(e2)
