"""A request task cancelled as its remote prefetch completes stays cancelled
(kvpool/runtime/remote/reader.py NOTE(prefetch-cancel)). ``RemoteReader.prefetch`` was
``asyncio.wait_for(self._prefetch(...), ...)``; on Python 3.11 wait_for returns the inner
result when its own task is cancelled in the step the inner work finished (CPython gh-86296),
so the cancel (the engine's shutdown cancelling its prefetches) was lost and the task went on.

A real engine with a remote link on the in-memory tier; the cancel is made in the very step
the prefetch completes: the tier's probe (the last thing a prefetch of a prompt the tier does
not hold awaits) cancels the waiting task as it answers, which is the race's timing without
relying on the scheduler (as tests/server/test_bounded_write_cancel.py does for a write).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from kvpool.remote import Namespace, ValueCodec
from kvpool.remote.memory_tier import InMemoryTier
from kvpool.runtime.engine.async_engine import AsyncEngine
from kvpool.runtime.remote.link import RemoteLink
from tests.remote.engines import CONFIG, PROMPT, stop


class CancelsAsProbed(InMemoryTier):
    """A tier whose probe answers, then cancels ``waiter`` in the same step."""

    waiter: asyncio.Task | None = None

    async def probe(self, keys: Sequence[str], refresh: Sequence[str] = (),
                    purpose: str = "read") -> int:
        n = await super().probe(keys, refresh, purpose)
        if self.waiter is not None:
            self.waiter.cancel()
        return n


async def test_a_cancel_that_lands_as_the_prefetch_completes_is_not_lost():
    ns = Namespace(model_id="tiny", weights="w", dtype="float32", block_size=16, layers=2,
                   kv_heads=2, head_dim=16)
    codec = ValueCodec(ns)
    tier = CancelsAsProbed(codec)
    eng = AsyncEngine(CONFIG)
    eng.remote_link = RemoteLink(tier=tier, group_keys=ns.group_keys, encode=codec.encode,
                                 split_blocks=codec.split, write_policy="off")
    await eng.start()
    outcome: list[str] = []

    async def request() -> None:
        tier.waiter = asyncio.current_task()
        try:
            assert eng.reader is not None
            await eng.reader.prefetch(PROMPT, None)  # the tier holds nothing: no fetch
            await asyncio.sleep(0)  # the task's next wait: where a kept cancel lands
            outcome.append("went on")
        except asyncio.CancelledError:
            outcome.append("cancelled")
            raise

    task = asyncio.create_task(request())
    await asyncio.wait([task])
    try:
        assert outcome == ["cancelled"] and task.cancelled()
        assert eng.reader.stats.considered == 1  # the probe did run
    finally:
        await stop(eng)
