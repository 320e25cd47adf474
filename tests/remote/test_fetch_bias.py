"""The read path's cost model and its ``fetch_bias`` (RemoteLink): with a measured prefill
rate, a huge bias makes the reader decline a stored prefix and recompute it, a bias of 0 makes
it fetch every stored block; either way the greedy output equals a fresh compute and no block
leaks. Two real engines on one real redis-server."""

from __future__ import annotations

import math

import pytest

from kvpool.errors import ConfigError
from kvpool.runtime.remote_link import RemoteLink
from tests.remote.test_engine_remote import PROMPT, engine, fresh_tokens, run, stop, stored, tokens

# 8 full blocks the stored PROMPT never starts with: a prefill that measures the rate
OTHER = [(i * 11 + 5) % 500 + 1 for i in range(16 * 8 + 3)]


async def _second(url: str, bias: float):
    """Engine 2 (reads only) after one unrelated request: its prefill rate is measured."""
    e2 = await engine(url, policy="off", fetch_bias=bias)
    await run(e2, OTHER)
    assert e2.core.prefill_rate > 0
    fetch_s, recompute_s = e2.reader.estimate(40)
    assert fetch_s > 0 and recompute_s > 0
    return e2


async def test_bias_decides_between_fetch_and_recompute(redis_server):
    want = await fresh_tokens(PROMPT)
    await stop(await stored(redis_server.url))
    limit = (len(PROMPT) - 1) // 16

    declining = await _second(redis_server.url, 1e9)
    out = await run(declining, PROMPT)
    assert tokens(out) == want
    st = declining.reader.stats
    assert (st.declined_cost, st.fetched_blocks) == (1, 0)
    assert out.num_cached_tokens == 0  # recomputed, nothing adopted
    await stop(declining)

    forced = await _second(redis_server.url, 0.0)
    out = await run(forced, PROMPT)
    assert tokens(out) == want
    st = forced.reader.stats
    assert (st.declined_cost, st.fetched_blocks) == (0, limit)  # every stored block
    assert forced.imports.adopted_blocks == limit
    await stop(forced)


@pytest.mark.parametrize("bias", [-0.5, math.nan])
def test_bad_bias_is_a_config_error(bias):
    with pytest.raises(ConfigError, match="fetch_bias"):
        RemoteLink(tier=None, group_keys=list, encode=None, split_blocks=None, fetch_bias=bias)
