"""NOTE(child-requests) in kvpool/metrics/vllm_series.py: vllm:num_requests_running and
vllm:num_requests_waiting count sequences, as vLLM counts an n > 1 request's child requests;
kvpool_requests{state} keeps counting requests. A request not yet in the scheduler (inbox,
prefetch) counts one, as before."""

from kvpool.config import CacheConfig
from kvpool.core import BlockSpaceManager
from kvpool.metrics import MetricsSnapshot
from kvpool.metrics.vllm_series import engine_families, waiting, waiting_by_reason

MGR = BlockSpaceManager(CacheConfig(num_device_blocks=8, num_host_blocks=0, block_size=4))


def snap(requests: dict[str, int], sequences: dict[str, int],
         in_flight: int) -> MetricsSnapshot:
    return MetricsSnapshot(MGR.stats(), MGR.stats.fragmentation(), requests=requests,
                           sequences=sequences, requests_in_flight=in_flight)


def gauges(s: MetricsSnapshot) -> tuple[float, float]:
    got = {name: samples[0][1] for name, _, _, _, samples in engine_families(s, "m", ())}
    return got["vllm:num_requests_running"], got["vllm:num_requests_waiting"]


def test_the_probe_case_n_4_4_1_running_reads_9():
    s = snap({"running": 3}, {"running": 9}, 3)
    assert gauges(s) == (9, 0)


def test_waiting_and_swapped_count_their_live_sequences():
    # one n=4 request waiting, one swapped with 2 of its 3 sequences still live
    s = snap({"running": 1, "waiting": 1, "swapped": 1},
             {"running": 2, "waiting": 4, "swapped": 2}, 3)
    assert gauges(s) == (2, 6)


def test_a_request_outside_the_scheduler_counts_one():
    # 5 in flight: 1 running, 1 waiting (n=3), 3 still in the inbox
    s = snap({"running": 1, "waiting": 1}, {"running": 1, "waiting": 3}, 5)
    assert waiting(s) == 3 + 3
    # a request finished in the scheduler, its stream not yet closed: never below the queues
    s = snap({"running": 1, "waiting": 1}, {"running": 2, "waiting": 2}, 1)
    assert waiting(s) == 2


def test_waiting_by_reason_sums_to_waiting():
    """NOTE(waiting-reasons): the scheduler's queued sequences wait for capacity, the requests
    not yet in the scheduler are deferred; the two sum to vllm:num_requests_waiting."""
    s = snap({"running": 1, "waiting": 1, "swapped": 1},
             {"running": 1, "waiting": 3, "swapped": 2}, 6)
    assert waiting_by_reason(s) == (5, 3)
    fams = {name: samples for name, _, _, _, samples in engine_families(s, "m", ())}
    assert fams["vllm:num_requests_waiting_by_reason"] == [
        (("0", "m", "capacity"), 5), (("0", "m", "deferred"), 3)]
    assert fams["vllm:num_requests_waiting"] == [(("0", "m"), 8)]
