"""The read path's cost model and its ``fetch_bias`` (RemoteLink): with a measured prefill
rate, a huge bias makes the reader decline a stored prefix and recompute it, a bias of 0 makes
it fetch every stored block; either way the greedy output equals a fresh compute and no block
leaks. Two real engines on one real redis-server."""

from __future__ import annotations

import math

import pytest

from kvpool.errors import ConfigError
from kvpool.runtime.remote.link import RemoteLink
from kvpool.runtime.remote.reader import PROBE_EVERY
from tests.remote.engines import PROMPT, engine, fresh_tokens, run, stop, stored, tokens
from tests.remote.redis_stats import commandstats

# 8 full blocks the stored PROMPT never starts with: a prefill that measures the rate
OTHER = [(i * 11 + 5) % 500 + 1 for i in range(16 * 8 + 3)]


async def _second(url: str, bias: float):
    """Engine 2 (reads only) after one unrelated request: its prefill rate is measured."""
    e2 = await engine(url, policy="off", fetch_bias=bias)
    await run(e2, OTHER)
    assert e2.core.cost.prefill_rate > 0
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


async def test_a_complete_fetch_measures_the_fixed_cost_and_the_import(redis_server):
    """The cost model's fetch estimate is what fetches measured: before any fetch, the probe
    RTT plus bytes over the assumed bandwidth; after one, the fixed cost of that fetch (beyond
    its bytes) and the step thread's import latency replace the guess, and a fetch of at least
    1 MiB (this one: 40 blocks of 32 KiB) updates the bandwidth EMA."""
    await stop(await stored(redis_server.url))
    limit = (len(PROMPT) - 1) // 16
    e2 = await _second(redis_server.url, 0.0)
    r = e2.reader
    assert (r.fixed_s, e2.imports.latency_s) == (0.0, 0.0)
    bw = r.bandwidth
    guess = r.estimate(limit)[0]
    assert guess == pytest.approx(r.rtt + limit * r.bytes_per_block / bw)
    assert limit * r.bytes_per_block >= 1 << 20
    out = await run(e2, PROMPT)
    assert r.stats.fetched_blocks == limit and out.num_cached_tokens == limit * 16
    assert r.fixed_s > 0 and e2.imports.latency_s > 0
    assert r.bandwidth != bw
    assert r.estimate(limit)[0] == pytest.approx(
        r.fixed_s + limit * r.bytes_per_block / r.bandwidth + e2.imports.latency_s)
    await stop(e2)


def probes(url: str) -> int:
    """Probe scripts (EVALSHA, or EVAL) the redis-server at ``url`` has run."""
    stats = commandstats(int(url.rsplit(":", 1)[1].split("/")[0]))
    return stats.get("evalsha", 0) + stats.get("eval", 0)


async def test_no_probe_where_even_a_full_run_would_lose(redis_server):
    """NOTE(probe-worth) in reader.py: where the cost model would decline even every block
    past the local hits, the request is not probed (a round trip it waited for, behind a slow
    tier, before being computed anyway); one in PROBE_EVERY still is. Before, each was."""
    want = await fresh_tokens(PROMPT)
    await stop(await stored(redis_server.url))
    declining = await _second(redis_server.url, 1e9)
    st = declining.reader.stats
    before, considered = probes(redis_server.url), st.considered  # OTHER's, rate unknown
    for i in range(PROBE_EVERY - 1):  # each salt a new chain: nothing of it held locally
        assert tokens(await run(declining, PROMPT, salt=f"s{i}")) == want
    assert (probes(redis_server.url), st.considered) == (before, considered)
    assert st.unprobed == st.declined_cost == PROBE_EVERY - 1
    assert tokens(await run(declining, PROMPT, salt="last")) == want  # probed all the same
    assert (probes(redis_server.url), st.considered) == (before + 1, considered + 1)
    assert st.fetched_blocks == 0
    await stop(declining)
