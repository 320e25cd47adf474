"""Chunked prefill within the token budget, prefix-cache skips, n > 1 sharing, fork, and the
priority policy."""

from kvpool.sched import PreemptionMode, SeqStatus
from tests.sched.helpers import BS, FakeRuntime, assert_empty, make, params, prompt


def test_chunked_prefill_spans_steps_within_the_budget():
    s = make(blocks=32, max_num_batched_tokens=8, max_num_seqs=4)
    rt = FakeRuntime(s)
    s.add_request("long", prompt(20), params(max_tokens=2))
    spans = []
    for _ in range(3):
        out = rt.step()
        spans += [(p.start, p.end, p.is_last) for p in out.prefills]
        assert out.num_batched_tokens <= 8
    assert spans == [(0, 8, False), (8, 16, False), (16, 20, True)]
    assert out.prefills[0].token_ids == prompt(20)[16:20]
    rt.drain()
    assert rt.by_id()["long"].output_token_ids == [7, 7]
    assert_empty(s)


def test_decodes_come_first_and_chunks_take_the_rest_of_the_budget():
    s = make(blocks=32, max_num_batched_tokens=8, max_num_seqs=4)
    rt = FakeRuntime(s)
    s.add_request("a", prompt(3, 100), params(max_tokens=10))
    rt.step()
    s.add_request("b", prompt(20, 200), params(max_tokens=2))
    out = rt.step()
    assert [d.request_id for d in out.decodes] == ["a"]
    assert [(p.request_id, p.start, p.end) for p in out.prefills] == [("b", 0, 7)]
    out = rt.step()
    assert [(p.start, p.end) for p in out.prefills] == [(7, 14)]
    rt.drain()
    assert_empty(s)


def test_computed_chunks_become_prefix_hits_for_later_requests():
    s = make(blocks=64, max_num_batched_tokens=8, max_num_seqs=4)
    rt = FakeRuntime(s)
    s.add_request("first", prompt(20), params(max_tokens=1))
    rt.step()  # tokens [0, 8): two full blocks computed and indexed
    assert s.num_cached_tokens("first") == 0
    s.add_request("second", prompt(20), params(max_tokens=1))
    assert s.num_cached_tokens("second") is None  # not admitted yet
    out = rt.step()
    (p,) = [p for p in out.prefills if p.request_id == "second"] or [None]
    if p is None:  # the budget went to "first"; second is admitted next step
        out = rt.step()
        (p,) = [p for p in out.prefills if p.request_id == "second"]
    assert p.num_cached_tokens >= 2 * BS and p.start == p.num_cached_tokens
    assert s.num_cached_tokens("nope") is None
    rt.drain()
    assert rt.by_id()["second"].num_cached_tokens == p.num_cached_tokens
    assert s.stats().prefix_hit_tokens >= 2 * BS
    assert_empty(s)


def test_prefix_hit_leaves_the_last_token_to_compute():
    s = make(blocks=64)
    rt = FakeRuntime(s)
    s.add_request("a", prompt(2 * BS), params(max_tokens=1))
    rt.drain()
    s.add_request("b", prompt(2 * BS), params(max_tokens=1))
    out = rt.step()
    assert [(p.start, p.end, p.num_cached_tokens) for p in out.prefills] == [(BS, 2 * BS, BS)]
    rt.drain()
    assert_empty(s)


def test_n_sequences_share_the_prompt_and_copy_on_write_the_partial_block():
    s = make(blocks=32)
    rt = FakeRuntime(s)
    ids = s.add_request("r", prompt(6), params(n=3, max_tokens=3))
    out = rt.step()
    (p,) = out.prefills
    assert p.seq_ids == ids  # one computation for all three
    tables = [s.manager.get_block_table(i) for i in ids]
    assert tables[0] == tables[1] == tables[2]
    rt.tokens = {ids[0]: 11, ids[1]: 12, ids[2]: 13}
    out = rt.step()
    assert [d.seq_id for d in out.decodes] == list(ids)
    assert len(out.blocks_to_copy) == 2  # the shared partial block, copied for two of three
    assert len({s.manager.get_block_table(i)[1] for i in ids}) == 3
    assert s.manager.get_block_table(ids[0])[0] == s.manager.get_block_table(ids[2])[0]
    rt.drain()
    f = rt.by_id()["r"]
    assert [o.output_token_ids[0] for o in f.seqs] == [7, 7, 7]
    assert [o.output_token_ids[1] for o in f.seqs] == [11, 12, 13]
    assert_empty(s)


def test_fork_shares_blocks_and_decodes_independently():
    s = make(blocks=32)
    rt = FakeRuntime(s)
    (a,) = s.add_request("r", prompt(5), params(max_tokens=4))
    rt.step()
    b = s.fork(a)
    assert s.manager.get_block_table(b) == s.manager.get_block_table(a)
    out = rt.step()
    assert sorted(d.seq_id for d in out.decodes) == sorted([a, b])
    assert len(out.blocks_to_copy) == 1
    rt.drain()
    f = rt.by_id()["r"]
    assert [o.seq_id for o in f.seqs] == [a, b]
    assert all(len(o.output_token_ids) == 4 for o in f.seqs)
    assert_empty(s)


def test_priority_policy_admits_by_priority():
    s = make(blocks=64, policy="priority", max_num_seqs=1, max_num_batched_tokens=16)
    rt = FakeRuntime(s)
    s.add_request("low", prompt(4, 100), params(max_tokens=1), priority=9)
    s.add_request("high", prompt(4, 200), params(max_tokens=1), priority=0)
    rt.drain()
    assert [f.request_id for f in rt.finished] == ["high", "low"]


def test_priority_preemption_makes_room_for_a_higher_priority_request():
    s = make(blocks=6, policy="priority")
    rt = FakeRuntime(s)
    s.add_request("low", prompt(4 * BS, 100), params(max_tokens=5), priority=5)
    rt.step()
    s.add_request("high", prompt(4 * BS, 200), params(max_tokens=2), priority=0)
    out = rt.step()
    assert [(p.request_id, p.cause, p.mode) for p in out.preempted] == [
        ("low", "priority", PreemptionMode.RECOMPUTE)]
    assert [p.request_id for p in out.prefills] == ["high"]
    assert s.request_status("low") is SeqStatus.WAITING
    rt.drain()
    assert [f.request_id for f in rt.finished] == ["high", "low"]
    assert rt.by_id()["low"].num_preemptions == 1
    assert_empty(s)


def test_fcfs_never_preempts_for_a_waiting_request():
    s = make(blocks=6)
    rt = FakeRuntime(s)
    s.add_request("first", prompt(4 * BS, 100), params(max_tokens=3), priority=5)
    rt.step()
    s.add_request("second", prompt(4 * BS, 200), params(max_tokens=2), priority=0)
    out = rt.step()
    assert out.preempted == [] and out.prefills == []
    rt.drain()
    assert [f.request_id for f in rt.finished] == ["first", "second"]
