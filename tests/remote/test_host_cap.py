"""The tier with a host pool smaller than what it moves (kvpool/runtime/remote/reader.py
NOTE(host-cap)): a fetch lands the leading run the pool holds, a chunk is stored in parts it
holds; and a tier that could never serve refuses to start (remote_setup.py NOTE(tier-needs)).
Before, a run or a chunk over the pool's size moved nothing, and nothing said so."""

from __future__ import annotations

import dataclasses

import pytest

from kvpool.errors import ConfigError
from kvpool.runtime.engine.async_engine import AsyncEngine
from kvpool.server.remote_setup import build_link, require_tier_runs
from tests.remote.engines import CONFIG, PROMPT, fresh_tokens, run, settle, stop, tokens

SMALL_HOST = 16  # host blocks: under PROMPT's 40 blocks and under one 32-block chunk


async def engine_with(url: str, **config) -> AsyncEngine:
    eng = AsyncEngine(dataclasses.replace(CONFIG, **config))
    eng.remote_link = build_link(eng, url, write_policy="write_through", op_timeout_ms=5000)
    await eng.start()
    return eng


async def test_a_small_host_pool_stores_in_parts_and_fetches_the_leading_run(redis_server):
    want = await fresh_tokens(PROMPT)
    e1 = await engine_with(redis_server.url, num_host_blocks=SMALL_HOST,
                           max_num_batched_tokens=512)  # 32-block chunks
    assert tokens(await run(e1, PROMPT)) == want
    await settle(e1)
    assert e1.remote_link.tier.stats().puts >= SMALL_HOST  # before: 0 (every chunk dropped)
    await stop(e1)
    e2 = await engine_with(redis_server.url)  # a roomy host pool stores the rest
    await run(e2, PROMPT)
    await settle(e2)
    await stop(e2)
    e3 = await engine_with(redis_server.url, num_host_blocks=SMALL_HOST)
    got = await run(e3, PROMPT)
    assert tokens(got) == want
    assert e3.reader.stats.fetched_blocks == SMALL_HOST  # before: 0 (the run outgrew the pool)
    assert got.num_cached_tokens >= SMALL_HOST * 16
    await stop(e3)


@pytest.mark.parametrize("config,said", [
    ({"enable_prefix_caching": False}, "drop --no-enable-prefix-caching"),
    ({"num_host_blocks": 0}, "give --swap-space GIB")])
def test_a_tier_that_could_never_serve_is_refused_with_the_fix(config, said):
    eng = AsyncEngine(dataclasses.replace(CONFIG, **config))
    with pytest.raises(ConfigError, match="--remote-url needs") as e:
        require_tier_runs(eng)
    assert said in str(e.value)
    eng.core.close()
    require_tier_runs(AsyncEngine(CONFIG))  # the usual settings pass
