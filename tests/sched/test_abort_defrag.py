"""abort / finish in every state free everything; on_step_failed; the defrag trigger, commit
and abort."""

import pytest

from kvpool.errors import SchedulerError
from kvpool.sched import PreemptionMode, SeqStatus
from tests.sched.helpers import BS, FakeRuntime, assert_empty, make, params, prompt


def _to_state(state: str):
    """A scheduler whose request "x" is in ``state``; returns (sched, runtime, inflight out)."""
    s = make(blocks=5, host=8, max_num_batched_tokens=8 if state == "prefilling" else 16,
             preemption_mode="swap")
    rt = FakeRuntime(s)
    if state == "waiting":
        s.add_request("x", prompt(6), params(n=2))
        return s, rt, None
    if state == "prefilling":
        s.add_request("x", prompt(12), params(n=2))
        rt.step()  # chunk [0, 8) of 12
        return s, rt, None
    if state == "decoding":
        s.add_request("x", prompt(6), params(n=2, max_tokens=9))
        rt.step()
        rt.step()
        return s, rt, None
    if state == "swapped":
        s.add_request("a", prompt(2 * BS, 100), params(max_tokens=9))
        s.add_request("x", prompt(2 * BS, 200), params(max_tokens=9))
        rt.step()
        out = rt.step()
        assert out.preempted[0].mode is PreemptionMode.SWAP
        s.abort("a")
        return s, rt, None
    if state == "inflight":
        s.add_request("x", prompt(6), params(n=2, max_tokens=9))
        rt.step()
        return s, rt, s.schedule()
    raise AssertionError(state)


@pytest.mark.parametrize("state", ["waiting", "prefilling", "decoding", "swapped", "inflight"])
def test_abort_in_every_state_frees_everything(state):
    s, rt, inflight = _to_state(state)
    expect = {"waiting": SeqStatus.WAITING, "prefilling": SeqStatus.RUNNING,
              "decoding": SeqStatus.RUNNING, "swapped": SeqStatus.SWAPPED,
              "inflight": SeqStatus.RUNNING}[state]
    assert s.request_status("x") is expect
    f = s.abort("x")
    assert f.status is SeqStatus.FINISHED_ABORTED and f.reason == "aborted"
    assert all(o.status is SeqStatus.FINISHED_ABORTED for o in f.seqs)
    assert s.abort("x") is None and s.abort("never-seen") is None
    if inflight is not None:
        sampled = rt.sample_for(inflight)
        assert s.on_step_done(inflight, sampled) == []  # tokens of the aborted are dropped
    assert_empty(s)
    assert s.stats().aborted == (2 if state == "swapped" else 1)  # "a" was aborted too


def test_finish_one_sequence_then_the_rest():
    s = make(blocks=32)
    rt = FakeRuntime(s)
    a, b = s.add_request("r", prompt(5), params(n=2, max_tokens=50))
    rt.step()
    assert s.finish("r", a, reason="stop string 'xy'") is None  # b still runs
    assert not s.manager.has_seq(a)
    rt.step()
    assert [d.seq_id for d in rt.outputs[-1].decodes] == [b]
    f = s.finish("r", b, SeqStatus.FINISHED_STOPPED, "stop string 'zz'")
    assert f.status is SeqStatus.FINISHED_STOPPED
    assert [o.finish_reason for o in f.seqs] == ["stop string 'xy'", "stop string 'zz'"]
    assert_empty(s)
    with pytest.raises(SchedulerError):
        s.finish("r", None, SeqStatus.RUNNING)


def test_on_step_failed_aborts_the_step_requests():
    s = make(blocks=32)
    rt = FakeRuntime(s)
    s.add_request("a", prompt(5), params(max_tokens=5))
    s.add_request("b", prompt(5, 50), params(max_tokens=5))
    rt.step()
    s.add_request("c", prompt(3, 90), params(max_tokens=5))
    out = s.schedule()
    failed = s.on_step_failed(out, "copy engine failed")
    assert {f.request_id for f in failed} == {"a", "b", "c"}
    assert all(f.reason == "copy engine failed" for f in failed)
    assert_empty(s)


def _fragmented(caching=False, threshold=0.0):
    """a (2 blocks), b (4), c (2); b aborted: a 4-block hole below c. The next decodes fill
    two of its blocks (lowest ids first), c's full blocks can move into the other two."""
    s = make(blocks=16, caching=caching, defrag_threshold=threshold, defrag_max_moves=8)
    rt = FakeRuntime(s)
    for r, base, n in (("a", 100, 2), ("b", 200, 4), ("c", 300, 2)):
        s.add_request(r, prompt(n * BS, base), params(max_tokens=3))
    rt.step()
    s.abort("b")
    assert s.manager.stats.fragmentation().external > 0
    return s, rt


def test_defrag_trigger_and_commit():
    s, rt = _fragmented()
    tables = {r: s.manager.get_block_table(s.seq_ids(r)[0]) for r in "ac"}
    out = s.schedule()
    assert out.defrag_moves and out.defrag_plan_id is not None
    srcs = {src for src, _ in out.defrag_moves}
    assert srcs <= set(tables["c"])  # only c's full blocks move down into b's hole
    s.on_step_done(out, rt.sample_for(out))  # commits (copies ran after compute)
    st = s.stats()
    assert st.defrag_plans == 1 and st.defrag_moves == len(out.defrag_moves)
    assert s.manager.stats().defrag_moves == len(out.defrag_moves)
    new_c = s.manager.get_block_table(s.seq_ids("c")[0])
    assert srcs.isdisjoint(new_c[:2])
    s.check_invariants()
    rt.drain()
    assert_empty(s)


def test_defrag_abort_releases_the_destinations():
    s, rt = _fragmented()
    free_before = s.manager.device_pool.num_free_blocks
    out = s.schedule()
    assert out.defrag_moves
    s.on_step_done(out, rt.sample_for(out), defrag_ok=False)
    assert s.stats().defrag_aborted == 1 and s.manager.stats().defrag_moves == 0
    assert s.manager.device_pool.num_free_blocks >= free_before - len(out.decodes)
    s.check_invariants()
    out = s.schedule()  # a new plan may be made
    assert out.defrag_plan_id is not None
    assert s.defrag_done(out.defrag_plan_id, True) is not None  # explicit commit first
    s.on_step_done(out, rt.sample_for(out))  # does not commit twice
    with pytest.raises(SchedulerError):
        s.defrag_done(out.defrag_plan_id, True)
    rt.drain()
    assert_empty(s)


def test_defrag_off_or_below_threshold_emits_nothing():
    s, rt = _fragmented(threshold=None)
    assert s.schedule().defrag_moves == ()
    s2, rt2 = _fragmented(threshold=0.99)
    assert s2.schedule().defrag_moves == ()


def test_abort_during_defrag_step_drops_its_moves():
    s, rt = _fragmented()
    out = s.schedule()
    assert out.defrag_moves
    s.abort("c")  # c's blocks were the sources
    r = s.defrag_done(out.defrag_plan_id, True)
    assert r.committed == [] and len(r.retried) == len(out.defrag_moves)
    s.on_step_done(out, rt.sample_for(out))
    rt.drain()
    assert_empty(s)
