"""Decode append, preemption (victims, recompute, swap, mode by cost and forced) and the
swap-in formula, through the scheduler (block size 4)."""

import pytest

from kvpool.core import AllocStatus
from kvpool.sched import PreemptionMode, SeqStatus
from kvpool.sched.preemption import recompute_tokens
from tests.sched.helpers import BS, FakeRuntime, assert_empty, make, params, prompt


def two_full_prompts(**kw):
    """a and b each hold two full blocks of a 5-block pool: the next decode needs a new block
    for each (the seeds' worst case), but one is free."""
    s = make(blocks=5, **kw)
    rt = FakeRuntime(s)
    s.add_request("a", prompt(2 * BS, 100), params(max_tokens=4))
    s.add_request("b", prompt(2 * BS, 200), params(max_tokens=4))
    out = rt.step()
    assert [p.request_id for p in out.prefills] == ["a", "b"]
    assert s.manager.device_pool.num_free_blocks == 1
    return s, rt


def test_decode_needs_a_block_per_full_sequence_and_preempts_the_newest():
    s, rt = two_full_prompts()
    (sa,), (sb,) = s.seq_ids("a"), s.seq_ids("b")
    assert not s.manager.slots.can_append([sa, sb])  # worst case: one block each, 1 free
    assert s.manager.slots.can_append([sa])
    out = rt.step()
    assert [d.request_id for d in out.decodes] == ["a"]
    assert [(p.request_id, p.mode, p.cause) for p in out.preempted] == [
        ("b", PreemptionMode.RECOMPUTE, "decode")]
    assert out.prefills == [] and out.blocks_to_swap_out == []
    assert s.request_status("b") is SeqStatus.WAITING
    assert s.stats().preemptions == {"swap": 0, "recompute": 1}
    s.check_invariants()


def test_recompute_prompt_includes_generated_tokens_and_hits_the_prefix_cache():
    s2, rt2 = two_full_prompts()
    sb = s2.seq_ids("b")[0]
    out = rt2.step()  # b preempted with one output token (7)
    assert out.preempted[0].request_id == "b"
    for _ in range(10):  # b waits (3 blocks: its 2 evictable ones count) until a is done
        out = rt2.step()
        if out.prefills:
            break
    assert "a" in rt2.by_id()
    (p,) = out.prefills  # prompt-for-recompute = prompt + [7], prompt blocks still cached
    assert p.num_tokens == 2 * BS + 1 and p.seq_ids == (sb,)
    assert (p.start, p.end, p.num_cached_tokens, p.token_ids) == (8, 9, 8, [7])
    rt2.drain()
    f = rt2.by_id()["b"]
    assert f.output_token_ids == [7, 7, 7, 7] and f.num_preemptions >= 1
    assert f.num_cached_tokens == 0  # the first admission had no hit
    assert_empty(s2)


def test_forced_swap_and_swapped_resume_before_new_prefills():
    s = make(blocks=5, host=8, caching=False, preemption_mode="swap")
    rt = FakeRuntime(s)
    s.add_request("a", prompt(2 * BS, 100), params(max_tokens=3))
    s.add_request("b", prompt(2 * BS, 200), params(max_tokens=4))
    rt.step()
    out = rt.step()
    assert [(p.request_id, p.mode) for p in out.preempted] == [("b", PreemptionMode.SWAP)]
    assert len(out.blocks_to_swap_out) == 2  # one pair per distinct block
    assert s.request_status("b") is SeqStatus.SWAPPED
    sb = s.seq_ids("b")
    # swap-in needs len(blocks) + num_seqs = 3 blocks (watermark 0); 2 are free
    assert s.manager.device_pool.num_free_blocks == 2
    assert s.manager.admission(swapped=list(sb)).status is AllocStatus.LATER
    s.add_request("c", prompt(1, 300), params(max_tokens=1))  # fits, but b goes first
    out = rt.step()
    assert out.blocks_to_swap_in == [] and out.prefills == []
    assert s.request_status("c") is SeqStatus.WAITING
    assert "a" in rt.by_id()  # a finished: room for b
    out = rt.step()
    assert len(out.blocks_to_swap_in) == 2
    assert [d.request_id for d in out.decodes] == ["b"]  # resumed and decoding in one step
    assert out.decodes[0].position == 2 * BS
    assert [p.request_id for p in out.prefills] == ["c"]  # then new prefills
    rt.drain()
    assert rt.by_id()["b"].output_token_ids == [7, 7, 7, 7]
    assert s.stats().swap_out_blocks == 2 and s.stats().swap_in_blocks == 2
    assert_empty(s)


def test_swap_in_needs_blocks_plus_one_per_seq_above_the_watermark():
    s = make(blocks=10, host=16, watermark=0.1, caching=False, preemption_mode="swap")
    m = s.manager
    assert m.watermark_blocks == 1
    rt = FakeRuntime(s)
    s.add_request("a", prompt(2 * BS, 100), params(max_tokens=8))
    s.add_request("b", prompt(2 * BS, 200), params(max_tokens=8))
    rt.step()  # 4 blocks used
    m.allocate([10_000], prompt(5 * BS, 900))  # someone else holds 5 blocks: 1 free
    out = rt.step()  # both need a block: b is swapped out
    assert [(p.request_id, p.mode) for p in out.preempted] == [("b", PreemptionMode.SWAP)]
    m.free(10_000)
    m.allocate([10_001], prompt(4 * BS, 900))  # leaves exactly 3 free
    sb = list(s.seq_ids("b"))
    need = len(m.get_block_table(sb[0])) + 1  # len(blocks) + num_swapped_seqs
    assert need == 3 and m.device_pool.num_free_blocks == 3
    assert m.admission(swapped=sb).status is AllocStatus.LATER  # 3 - 3 < watermark 1
    out = rt.step()
    assert out.blocks_to_swap_in == [] and s.request_status("b") is SeqStatus.SWAPPED
    m.free(10_001)
    out = rt.step()
    assert len(out.blocks_to_swap_in) == 2 and s.request_status("b") is SeqStatus.RUNNING
    rt.drain()
    assert_empty(s)


def test_forced_swap_without_host_blocks_falls_back_to_recompute():
    s, rt = two_full_prompts(preemption_mode="swap")
    out = rt.step()
    assert out.preempted[0].mode is PreemptionMode.RECOMPUTE
    rt.drain()
    assert_empty(s)


def test_forced_recompute_with_host_blocks():
    s, rt = two_full_prompts(host=16, preemption_mode="recompute")
    out = rt.step()
    assert out.preempted[0].mode is PreemptionMode.RECOMPUTE and not out.blocks_to_swap_out
    rt.drain()
    assert_empty(s)


def cost_scenario(shared: bool, **kw):
    """a (12 tokens) runs; b is admitted next step, either sharing a's prompt (two blocks hit
    and a's third block still cached) or with its own prompt; b's first decode finds the pool
    full and b, the newest, is the victim. Swap moves b's 3 blocks: 2*3 s at 1 B/s."""
    s = make(blocks=5 if shared else 7, host=16, kv_bytes_per_block=1, copy_bytes_per_s=1.0,
             prefill_tokens_per_s=1.0, **kw)
    rt = FakeRuntime(s)
    s.add_request("a", prompt(3 * BS, 100), params(max_tokens=8))
    rt.step()
    s.add_request("b", prompt(3 * BS, 100 if shared else 200), params(max_tokens=8))
    out = rt.step()
    (pb,) = [p for p in out.prefills if p.request_id == "b"]
    assert pb.num_cached_tokens == (2 * BS if shared else 0)
    return s, rt


def test_mode_by_cost_swap_when_recompute_is_dearer():
    s, rt = cost_scenario(shared=False)
    out = rt.step()  # recompute 13 tokens at 1 tok/s = 13 s > swap 6 s
    assert [(p.request_id, p.mode, p.num_blocks) for p in out.preempted] == [
        ("b", PreemptionMode.SWAP, 3)]
    rt.drain()
    assert_empty(s)


def test_mode_by_cost_counts_prefix_blocks_that_stay_cached():
    s, rt = cost_scenario(shared=True)
    g = s.state.groups["b"]
    assert recompute_tokens(g) == 3 * BS + 1
    out = rt.step()  # 13 tokens, 12 still cached (a holds them): 1 s < swap 6 s
    assert [(p.request_id, p.mode) for p in out.preempted] == [("b", PreemptionMode.RECOMPUTE)]
    out = rt.step()
    (pb,) = [p for p in out.prefills if p.request_id == "b"]
    assert pb.num_cached_tokens == 3 * BS  # the recompute hit them indeed
    rt.drain()
    assert_empty(s)


def test_update_cost_model_changes_the_choice():
    s, rt = cost_scenario(shared=False)
    s.update_cost_model(prefill_tokens_per_s=1000.0)  # recompute now costs 13 ms
    out = rt.step()
    assert out.preempted[0].mode is PreemptionMode.RECOMPUTE
    s.update_cost_model(copy_bytes_per_s=1e9, prefill_tokens_per_s=1.0)
    assert s.cost.swap_seconds(3) == pytest.approx(6e-9)


def test_victims_are_lowest_priority_then_newest():
    s = make(blocks=7, policy="priority")
    rt = FakeRuntime(s)
    s.add_request("a", prompt(2 * BS, 100), params(max_tokens=6), priority=0)
    s.add_request("b", prompt(2 * BS, 200), params(max_tokens=6), priority=5)
    s.add_request("c", prompt(2 * BS, 300), params(max_tokens=6), priority=1)
    out = rt.step()
    assert [p.request_id for p in out.prefills] == ["a", "c", "b"]  # priority order
    out = rt.step()  # 3 blocks needed, 1 free: b (priority 5) goes, though c is newer
    assert [p.request_id for p in out.preempted] == ["b"]
    assert [d.request_id for d in out.decodes] == ["a", "c"]
    rt.drain()
    assert_empty(s)


def test_fcfs_victim_is_the_newest_arrival():
    s = make(blocks=7)
    rt = FakeRuntime(s)
    for r, base in (("a", 100), ("b", 200), ("c", 300)):
        s.add_request(r, prompt(2 * BS, base), params(max_tokens=6), priority=-base)
    rt.step()
    out = rt.step()
    assert [p.request_id for p in out.preempted] == ["c"]
    assert [d.request_id for d in out.decodes] == ["a", "b"]
    rt.drain()
    assert_empty(s)


def test_a_lone_request_that_outgrows_the_pool_is_ignored_with_its_output():
    s = make(blocks=3)
    rt = FakeRuntime(s)
    s.add_request("a", prompt(2 * BS), params(max_tokens=50))
    rt.drain()
    f = rt.by_id()["a"]
    assert f.status is SeqStatus.FINISHED_IGNORED and "never fit" in f.reason
    assert len(f.output_token_ids) >= BS  # it ran until it filled the pool
    assert_empty(s)


def test_preempted_sequences_are_counted_per_sequence_as_vllms_children():
    """NOTE(preempted-seqs) in kvpool/metrics/vllm_series.py: vLLM preempts each child of an
    n > 1 request and counts each, and each finished child observes its own count; so the
    scheduler counts the live sequences of each preempted request, and once every request has
    finished the per-sequence counts sum to it (before: one per request)."""
    s = make(blocks=8)
    rt = FakeRuntime(s)
    for i, n in enumerate((2, 2, 1)):
        s.add_request(f"r{i}", prompt(2 * BS, 100 * (i + 1)), params(max_tokens=3 * BS, n=n))
    rt.drain()
    st = s.stats()
    requests = sum(st.preemptions.values())
    assert requests > 0, "the test needs preemptions to happen"
    per_sequence = sum(f.num_preemptions * len(f.seqs) for f in rt.finished)
    assert st.preempted_seqs == per_sequence
    assert st.preempted_seqs > requests  # an n=2 request was preempted
