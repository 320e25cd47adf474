"""Scheduler.reset_prefix_cache (vLLM's reset, docs/architecture.md "Development routes"): False
and nothing dropped while a request holds blocks, on the device or swapped out to the host;
with reset_running_requests every running and swapped request is preempted for recompute, the
whole cache goes (the observer hears it cleared once) and every request still finishes with
its own tokens, no block leaked."""

from __future__ import annotations

from kvpool.config import CacheConfig
from kvpool.core import BlockSpaceManager
from kvpool.sched import SeqStatus
from tests.sched.helpers import FakeRuntime, assert_empty, make, params, prompt


class Heard:
    """A pool observer that keeps what it hears (the KV event recorder's calls)."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def stored(self, device, hashes, parent, tokens=None, *, salt=None) -> None:
        self.calls.append("stored")

    def removed(self, device, hashes) -> None:
        self.calls.append("removed")

    def cleared(self, device) -> None:
        self.calls.append("cleared")


def test_running_and_swapped_requests_are_recomputed_and_finish():
    s = make(6, 6, 0.2, True, 4, preemption_mode="swap", max_model_len=64)
    rt = FakeRuntime(s)
    s.add_request("r0", prompt(2), params(max_tokens=9))
    s.add_request("r1", prompt(15, 2000), params(max_tokens=5))
    for _ in range(100):
        if s.num_requests()["swapped"]:
            break
        rt.step()
    assert s.num_requests()["swapped"] == 1 and s.num_requests()["running"] == 1
    cached = s.manager.stats().device.num_cached
    assert s.reset_prefix_cache() is False  # blocks are held: nothing dropped
    assert s.manager.stats().device.num_cached == cached
    recomputed = s.stats().preemptions["recompute"]
    assert s.reset_prefix_cache(reset_running_requests=True) is True
    assert s.num_requests() == {"running": 0, "waiting": 2, "swapped": 0}
    assert s.stats().preemptions["recompute"] == recomputed + 2
    st = s.manager.stats()
    assert st.device.num_cached == 0 and st.device.num_used == 0
    s.check_invariants()
    rt.drain()
    done = rt.by_id()
    assert {k: f.status for k, f in done.items()} == {
        "r0": SeqStatus.FINISHED_LENGTH, "r1": SeqStatus.FINISHED_LENGTH}
    assert done["r0"].output_token_ids == [7] * 9 and done["r1"].output_token_ids == [7] * 5
    assert_empty(s)


def test_the_observer_hears_the_cache_cleared_only_when_it_is():
    heard = Heard()
    m = BlockSpaceManager(CacheConfig(num_device_blocks=8, block_size=4, num_host_blocks=0,
                                      enable_prefix_caching=True), observer=heard)
    m.allocate([1], prompt(9))
    m.mark_computed(1)
    assert heard.calls == ["stored"]
    assert m.reset_prefix_cache() is False and heard.calls == ["stored"]
    m.free(1)
    assert m.stats().device.num_cached == 2
    assert m.reset_prefix_cache() is True and heard.calls == ["stored", "cleared"]
    assert m.stats().device.num_cached == 0 and m.stats().device.num_free == 8
    assert m.reset_prefix_cache() is True  # an empty cache resets too, and says so
    assert heard.calls[-1] == "cleared"
    m.check_invariants()
