"""A sample the runtime defers (a late grammar mask): the sequence gets no token from its step,
is scheduled no more while it awaits the token, takes it through ``accept_late`` between steps,
and survives swap and recompute preemption meanwhile; nothing leaks (block size 4)."""

import pytest

from kvpool.errors import SchedulerError
from kvpool.sched import SeqStatus
from tests.sched.helpers import BS, FakeRuntime, assert_empty, make, params, prompt


def deferred_step(s, rt, defer: set[int]):
    """One step whose ``defer`` sequences get no token."""
    out = s.schedule()
    rt.check(out)
    sampled = {i: t for i, t in rt.sample_for(out).items() if i not in defer}
    rt.finished += s.on_step_done(out, sampled, deferred=defer)
    return out


def decoded(out) -> list[int]:
    return [d.seq_id for d in out.decodes]


def test_a_deferred_decode_waits_for_its_late_token_and_its_neighbour_goes_on():
    s = make(blocks=16)
    rt = FakeRuntime(s)
    s.add_request("a", prompt(6, 100), params(max_tokens=4))
    s.add_request("b", prompt(6, 200), params(max_tokens=8))
    rt.step()  # both prompts, first token 7 each
    (sa,), (sb,) = s.seq_ids("a"), s.seq_ids("b")
    assert decoded(deferred_step(s, rt, {sa})) == [sa, sb]
    s.check_invariants()  # a's table holds its every token now: the slot of its last
    assert s.awaiting(sa) is SeqStatus.RUNNING and s.awaiting(sb) is None
    for _ in range(2):  # b decodes on; a is not scheduled
        assert decoded(rt.step()) == [sb]
        s.check_invariants()
    with pytest.raises(SchedulerError):
        s.fork(sa)  # its KV holds a token it has no output for yet
    assert s.accept_late({sa: 9, sb: 5}) == []  # b awaits nothing: its id is ignored
    assert s.awaiting(sa) is None
    out = rt.step()
    assert decoded(out) == [sa, sb]
    assert out.decodes[0].token_id == 9 and out.decodes[0].position == 6 + 2 - 1
    rt.drain()
    assert [so.output_token_ids for so in rt.by_id()["a"].seqs] == [[7, 9, 7, 7]]
    assert [so.output_token_ids for so in rt.by_id()["b"].seqs] == [[7] * 8]
    assert_empty(s)


def test_a_deferred_first_token_of_n_sequences_and_a_stop_from_a_late_token():
    s = make(blocks=16)
    rt = FakeRuntime(s)
    s.add_request("g", prompt(6, 100), params(max_tokens=4, n=2, stop=(3,)))
    ids = set(s.seq_ids("g"))
    out = deferred_step(s, rt, ids)
    assert out.prefills[0].is_last
    s.check_invariants()
    assert not s.schedule().has_work  # every sequence awaits: nothing to compute
    (a, b) = sorted(ids)
    assert s.accept_late({a: 3}) == []  # a stops (stop token), b still awaits
    assert s.awaiting(b) is SeqStatus.RUNNING
    assert s.accept_late({b: 8}) == []
    assert decoded(rt.step()) == [b]
    rt.drain()
    outs = {so.seq_id: so.output_token_ids for so in rt.by_id()["g"].seqs}
    assert outs[a] == [3] and outs[b][0] == 8 and len(outs[b]) == 4
    assert_empty(s)


@pytest.mark.parametrize("mode", ["swap", "recompute"])
def test_a_sequence_preempted_while_it_awaits_its_token(mode):
    # 4 blocks, prompts of 7 tokens (2 blocks each): after the second step each table is full,
    # so a's next decode needs the block b holds: b (the tail) is preempted awaiting its token
    s = make(blocks=4, host=8, preemption_mode=mode)
    rt = FakeRuntime(s)
    s.add_request("a", prompt(2 * BS - 1, 100), params(max_tokens=3))
    s.add_request("b", prompt(2 * BS - 1, 200), params(max_tokens=3))
    rt.step()
    (sa,), (sb,) = s.seq_ids("a"), s.seq_ids("b")
    deferred_step(s, rt, {sb})
    out = rt.step()
    assert decoded(out) == [sa] and [p.request_id for p in out.preempted] == ["b"]
    s.check_invariants()
    if mode == "recompute":  # its KV is gone: the recompute samples the token afresh
        assert s.awaiting(sb) is None
    else:  # swapped with the slot of its last token; the token is taken once it is back
        assert s.awaiting(sb) is SeqStatus.SWAPPED
        assert s.accept_late({sb: 9}) == [] and s.awaiting(sb) is SeqStatus.SWAPPED
    while s.request_status("b") is not SeqStatus.RUNNING:
        out = rt.step()
        s.check_invariants()
        assert sb not in decoded(out)  # swapped in, still awaiting: no slot appended
    if mode == "swap":
        assert s.awaiting(sb) is SeqStatus.RUNNING
        s.accept_late({sb: 9})
    rt.drain()
    b = rt.by_id()["b"].seqs[0].output_token_ids
    assert b == ([7, 9, 7] if mode == "swap" else [7, 7, 7])
    assert s.stats().preemptions[mode] == 1
    assert_empty(s)
