"""The collector exports every DESIGN.md metric from a live manager's lock-free snapshot."""

import threading

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kvpool.config import CacheConfig
from kvpool.core import BlockSpaceManager
from kvpool.metrics import METRIC_NAMES, KVPoolMetrics, MetricsSnapshot


def parse(text: bytes) -> dict[str, dict[tuple, float]]:
    out: dict[str, dict[tuple, float]] = {}
    for fam in text_string_to_metric_families(text.decode()):
        for s in fam.samples:
            out.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return out


def make(model_name: str | None = None):
    mgr = BlockSpaceManager(CacheConfig(num_device_blocks=32, num_host_blocks=16, block_size=4))
    metrics = KVPoolMetrics(lambda: MetricsSnapshot(
        mgr.stats(), mgr.stats.fragmentation(), requests={"running": len(mgr.seq_ids())},
        preemptions={"swap": 1}, swap_bytes={"out": 4096}), model_name=model_name)
    return mgr, metrics


def test_every_metric_is_exported_with_live_values():
    mgr, metrics = make()
    prompt = list(range(10))
    mgr.allocate([1], prompt)
    mgr.mark_computed(1)
    mgr.allocate([2], prompt)  # 8 prefix-hit tokens
    mgr.swap.swap_out([2])
    metrics.ttft.observe(0.05)
    got = parse(metrics.render())
    families = {n.removesuffix("_total") for n in got} | {
        n.rsplit("_", 1)[0] for n in got if n.endswith(("_bucket", "_count", "_sum"))}
    for name in METRIC_NAMES:  # vllm:iteration_tokens_total: a histogram named *_total
        assert name in families or name.removesuffix("_total") in families, name
    st = mgr.stats()
    assert got["kvpool_free_blocks"][(("tier", "device"),)] == st.device.num_free
    assert got["kvpool_blocks"][(("tier", "host"),)] == 16
    assert got["kvpool_prefix_cache_hits_total"][()] == 8
    assert got["kvpool_prefix_cache_queries_total"][()] == 20
    assert got["kvpool_swap_blocks_total"][(("direction", "out"),)] == 3
    assert got["kvpool_swap_bytes_total"][(("direction", "out"),)] == 4096
    assert got["kvpool_preemptions_total"][(("mode", "swap"),)] == 1
    assert got["kvpool_requests"][(("state", "running"),)] == 2
    assert got["kvpool_time_to_first_token_seconds_count"][()] == 1
    assert 0 < got["kvpool_cache_usage_ratio"][(("tier", "device"),)] < 1
    # the device pool's two kinds only: nothing measures the host pool's scatter
    assert set(got["kvpool_fragmentation_ratio"]) == {
        (("kind", k), ("tier", "device")) for k in ("internal", "external")}


def test_scrape_takes_no_pool_lock():
    mgr, metrics = make()
    mgr.allocate([1], list(range(10)))
    out = []
    # hold both raw locks (as an idle writer would) without entering a mutation: a reader
    # that tried to take them would hang; the seqlock read does not
    with mgr.device_pool.lock, mgr.host_pool.lock:
        t = threading.Thread(target=lambda: out.append(metrics.render()))
        t.start()
        t.join(5)
        assert not t.is_alive() and out


def test_scrape_waits_out_a_mutation_instead_of_tearing():
    mgr, metrics = make()
    scraped = threading.Event()
    with mgr.batch():  # version odd: a mutation is in progress
        t = threading.Thread(target=lambda: (metrics.render(), scraped.set()))
        t.start()
        assert not scraped.wait(0.2)
    t.join(5)
    assert scraped.is_set()


@pytest.mark.parametrize("model_name", [None, 'tiny "v1"\\x'])
def test_lean_renderer_matches_prometheus_client_line_for_line(model_name):
    mgr, metrics = make(model_name)
    mgr.allocate([1], list(range(10)))
    for v in (0.0004, 0.2, 3.0, 1e9):
        metrics.ttft.observe(v)
        metrics.observe_step(v, int(v * 10))
    ours = metrics.render().decode()
    ref = metrics.render_reference().decode()
    # prometheus_client also emits *_created series (vLLM turns them off too); nothing else
    # may differ
    assert ours.splitlines() == [line for line in ref.splitlines() if "_created" not in line]
    assert 'le="+Inf"' in ours


# --- LatencyHistogram: the lean histogram against a plain model and prometheus_client ---

import math  # noqa: E402

from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from prometheus_client import CollectorRegistry, Histogram, generate_latest  # noqa: E402

from kvpool.metrics.collector import LatencyHistogram  # noqa: E402
from kvpool.metrics.vllm_series import TTFT_BUCKETS as LATENCY_BUCKETS  # noqa: E402

amounts = st.floats(min_value=0, max_value=1e7, allow_nan=False) | st.sampled_from(
    [0.0, *LATENCY_BUCKETS])  # exact bounds: `le` is inclusive


@settings(max_examples=60, deadline=None)
@given(st.lists(amounts, max_size=40))
def test_histogram_matches_a_model_and_prometheus_client(values):
    reg = CollectorRegistry()
    ours = LatencyHistogram("h_seconds", "doc", LATENCY_BUCKETS)
    reg.register(ours)
    ref_reg = CollectorRegistry()
    ref = Histogram("h_seconds", "doc", buckets=LATENCY_BUCKETS, registry=ref_reg)
    for v in values:
        ours.observe(v)
        ref.observe(v)
    cum, total = ours.values()
    bounds = list(LATENCY_BUCKETS) + [math.inf]
    assert cum == [sum(1 for v in values if v <= b) for b in bounds]
    assert total == pytest.approx(sum(values))
    out: list[str] = []
    ours.lines(out)
    expected = [line for line in generate_latest(ref_reg).decode().splitlines()
                if "_created" not in line]
    assert "".join(out).splitlines() == expected
    assert generate_latest(reg).decode().splitlines() == expected


def test_histogram_counts_every_observation_from_many_threads():
    h = LatencyHistogram("h_seconds", "doc", (0.5, 1.0))
    per, n = 5000, 4

    def work(i):
        for k in range(per):
            h.observe((k + i) % 3 * 0.5)  # 0.0, 0.5, 1.0: every bucket but +Inf

    threads = [threading.Thread(target=work, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    cum, total = h.values()
    assert cum[-1] == per * n and cum[1] == cum[2]
    assert total == pytest.approx(sum((k + i) % 3 * 0.5 for i in range(n) for k in range(per)))


def test_histogram_rejects_unsorted_buckets():
    with pytest.raises(ValueError, match="strictly increasing"):
        LatencyHistogram("h_seconds", "doc", (1.0, 0.5))
