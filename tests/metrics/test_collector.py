"""The collector exports every DESIGN.md metric from a live manager's lock-free snapshot."""

import threading

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


def make():
    mgr = BlockSpaceManager(CacheConfig(num_device_blocks=32, num_host_blocks=16, block_size=4))
    metrics = KVPoolMetrics(lambda: MetricsSnapshot(
        mgr.stats(), mgr.fragmentation(), requests={"running": len(mgr.seq_ids())},
        preemptions={"swap": 1}, swap_bytes={"out": 4096}))
    return mgr, metrics


def test_every_metric_is_exported_with_live_values():
    mgr, metrics = make()
    prompt = list(range(10))
    mgr.allocate([1], prompt)
    mgr.mark_computed(1)
    mgr.allocate([2], prompt)  # 8 prefix-hit tokens
    mgr.swap_out([2])
    metrics.ttft.observe(0.05)
    got = parse(metrics.render())
    families = {n.removesuffix("_total") for n in got} | {
        n.rsplit("_", 1)[0] for n in got if n.endswith(("_bucket", "_count", "_sum"))}
    for name in METRIC_NAMES:
        assert name.removesuffix("_total") in families, name
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


def test_lean_renderer_matches_prometheus_client_line_for_line():
    mgr, metrics = make()
    mgr.allocate([1], list(range(10)))
    for v in (0.0004, 0.2, 3.0, 1e9):
        metrics.ttft.observe(v)
        metrics.step.observe(v)
    ours = metrics.render().decode()
    ref = metrics.render_reference().decode()
    # prometheus_client also emits *_created series (vLLM turns them off too); nothing else
    # may differ
    assert ours.splitlines() == [line for line in ref.splitlines() if "_created" not in line]
    assert 'le="+Inf"' in ours
