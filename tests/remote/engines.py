"""Engines for the remote-tier tests: an AsyncEngine on the shared small config with a remote
link to a Redis URL (or none, for the reference), the greedy run of a prompt, waiting for its
stores to land, and a stop that checks no block leaked."""

from __future__ import annotations

import asyncio

import pytest

from kvpool.runtime.engine.async_engine import AsyncEngine, collect
from kvpool.runtime.model import SamplingParams
from kvpool.server.remote_setup import build_link
from tests.configs import engine_config

# 96 device and host blocks: PROMPT's 40 blocks fit twice over
CONFIG = engine_config("remote", max_num_seqs=8, max_num_batched_tokens=256,
                       enable_prefix_caching=True)
GREEDY = SamplingParams(max_tokens=8, temperature=0.0, ignore_eos=True)
PROMPT = [(i * 7 + 3) % 500 + 1 for i in range(16 * 40 + 5)]  # 40 full blocks + a tail


async def engine(url: str | None, policy: str = "write_through", **link_kw) -> AsyncEngine:
    eng = AsyncEngine(CONFIG)
    if url is not None:
        eng.remote_link = build_link(eng, url, write_policy=policy, **link_kw)
    await eng.start()
    return eng


async def stop(eng: AsyncEngine) -> None:
    await eng.shutdown()  # also closes the remote tier
    eng.core.manager.check_invariants()
    st = eng.core.manager.stats()
    assert st.device.num_used == 0 and st.host.num_used == 0, "leaked blocks"


async def run(eng: AsyncEngine, prompt, salt=None):
    out = await collect(eng.generate(None, prompt, GREEDY, cache_salt=salt))
    assert all(c.finish_reason != "error" for c in out.outputs), out
    return out


async def settle(eng: AsyncEngine) -> None:
    """Wait until the writer has no store in flight (bounded)."""
    for _ in range(200):
        w = eng.writer
        if w is None or (w.inflight_bytes == 0 and w.pending() == 0):
            return
        await asyncio.sleep(0.02)
    pytest.fail("stores still in flight after 4 s")


def tokens(out):
    return [list(c.token_ids) for c in out.outputs]


async def fresh_tokens(prompt) -> list:
    """Greedy tokens of ``prompt`` computed by an engine with no remote tier (the reference)."""
    ref = await engine(None)
    want = tokens(await run(ref, prompt))
    await stop(ref)
    return want


async def stored(url: str) -> AsyncEngine:
    """An engine that computed PROMPT and stored its blocks in Redis (still running)."""
    e1 = await engine(url)
    await run(e1, PROMPT)
    await settle(e1)
    return e1
