"""on_step_failed aborts the request its failed step swapped out: the swap-out copy never ran,
so the host blocks it would come back from hold nothing (as the engine aborts a request whose
swap-out copy failed)."""

from __future__ import annotations

from kvpool.sched import SeqStatus
from tests.sched.helpers import FakeRuntime, assert_empty, make, params, prompt


def test_a_failed_step_aborts_its_swap_out_victim():
    # 6 blocks of 4 tokens; A and B take 2 each: their decodes soon need a block more, so a
    # step swaps B out for A's growth
    s = make(blocks=6, host=16, preemption_mode="swap", max_num_batched_tokens=16,
             max_num_seqs=4, max_model_len=64)
    rt = FakeRuntime(s)
    s.add_request("A", prompt(8), params(max_tokens=12))
    s.add_request("B", prompt(8, 200), params(max_tokens=12))
    out = rt.step()
    for _ in range(20):
        out = s.schedule(now=rt.now)
        if out.blocks_to_swap_out:
            break
        rt.finished += s.on_step_done(out, rt.sample_for(out), now=rt.now)
    assert [c.request_id for c in out.copies if c.kind == "swap_out"] == ["B"]
    assert [e.request_id for e in out.entries] == ["A"]  # B computes nothing in the step
    failed = s.on_step_failed(out, "the device lost the step")
    assert sorted(f.request_id for f in failed) == ["A", "B"]
    assert {f.status for f in failed} == {SeqStatus.FINISHED_ABORTED}
    assert_empty(s)  # B's host blocks (never written) are free, none published
