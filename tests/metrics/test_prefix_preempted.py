"""Prefix-cache queries and hits count first admissions only, as vLLM's do
(NOTE(preempted-queries) in kvpool/core/block_table.py): four prompts sharing no token run
through the real scheduler with recompute preemptions; each re-admission finds its own blocks
again, and that is counted in the manager's preempted_* counters, never in
vllm:prefix_cache_queries_total / vllm:prefix_cache_hits_total or their kvpool_ twins."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from kvpool.metrics import KVPoolMetrics, MetricsSnapshot
from tests.sched.helpers import FakeRuntime, assert_empty, make, params, prompt

LABELS = (("engine", "0"), ("model_name", "tiny"))


def _scrape(metrics: KVPoolMetrics) -> dict[str, dict[tuple, float]]:
    out: dict[str, dict[tuple, float]] = {}
    for fam in text_string_to_metric_families(metrics.render().decode()):
        for s in fam.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def _spy(mgr) -> list[tuple[tuple[int, ...], int, int]]:
    """(seq ids, tokens, cached tokens) of every allocation that succeeded, in order."""
    seen: list[tuple[tuple[int, ...], int, int]] = []
    real = mgr.prompts.allocate_batch

    def allocate_batch(reqs):
        res = real(reqs)
        seen.extend((tuple(r.seq_ids), len(r.token_ids), c)
                    for r, c in zip(reqs, res) if c is not None)
        return res
    mgr.prompts.allocate_batch = allocate_batch
    return seen


def test_readmissions_after_recompute_are_not_prefix_cache_queries():
    # the probe's server: 24 blocks of 4, no host pool, 4 sequences, 16 tokens a step
    s = make(blocks=24, host=0, max_num_seqs=4, max_num_batched_tokens=16, max_model_len=96,
             preemption_mode="recompute")
    mgr = s.manager
    allocs = _spy(mgr)
    metrics = KVPoolMetrics(lambda: MetricsSnapshot(
        mgr.stats(), mgr.stats.fragmentation(), preemptions=s.stats().preemptions),
        model_name="tiny")
    rt = FakeRuntime(s)
    prompts = [prompt(8, 40 + 10 * i) for i in range(4)]  # no token in common
    for i, p in enumerate(prompts):
        s.add_request(f"r{i}", p, params(max_tokens=60))
    rt.drain()
    assert all(len(f.seqs[0].output_token_ids) == 60 for f in rt.finished)
    assert s.stats().preemptions["recompute"] >= 3
    firsts: set[tuple[int, ...]] = set()
    again = [0, 0]  # tokens queried and served re-admitting preempted sequences
    for ids, n, cached in allocs:
        if ids in firsts:
            again[0] += n
            again[1] += cached
        firsts.add(ids)
    assert len(firsts) == 4 and again[1] > 0  # they did find their own blocks again
    st = mgr.stats()
    assert (st.prefix_query_tokens, st.prefix_hit_tokens) == (32, 0)
    assert [st.preempted_query_tokens, st.preempted_hit_tokens] == again
    assert s.stats().prefix_hit_tokens == 0  # the scheduler's own: first admissions
    got = _scrape(metrics)
    assert got["vllm:prefix_cache_queries_total"][LABELS] == sum(map(len, prompts))
    assert got["vllm:prefix_cache_hits_total"][LABELS] == 0
    assert got["kvpool_prefix_cache_queries_total"][()] == 32
    assert got["kvpool_prefix_cache_hits_total"][()] == 0
    assert_empty(s)
