"""SchedulerOutput's per-request copies (add_copies / copies_in_order / the flat views) and
on_step_done's ``stops``: the runtime's stop decision finishes the sequence in that step."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kvpool.sched import SchedulerOutput, SeqStatus
from kvpool.sched.output import COPY_ORDER
from tests.sched.helpers import FakeRuntime, assert_empty, make, params, prompt

calls = st.lists(st.tuples(st.sampled_from(COPY_ORDER), st.sampled_from("abc"),
                           st.lists(st.tuples(st.integers(0, 50), st.integers(0, 50)),
                                    max_size=3)), max_size=30)


@settings(max_examples=200, deadline=None)
@given(calls)
def test_add_copies_groups_consecutive_calls_and_keeps_every_pair(seq):
    out = SchedulerOutput(0)
    for kind, rid, pairs in seq:
        out.add_copies(kind, rid, pairs)
    for kind, view in (("swap_out", out.blocks_to_swap_out), ("swap_in", out.blocks_to_swap_in),
                       ("cow", out.blocks_to_copy)):
        assert view == [p for k, _, ps in seq if k == kind for p in ps]
    batches = out.copies
    assert all(c.pairs for c in batches)  # empty calls add nothing
    assert all((a.kind, a.request_id) != (b.kind, b.request_id)
               for a, b in zip(batches, batches[1:]))
    ordered = out.copies_in_order()
    assert [c.kind for c in ordered] == sorted((c.kind for c in batches), key=COPY_ORDER.index)
    for kind in COPY_ORDER:  # stable: the order within a kind is the order of the calls
        assert [c for c in ordered if c.kind == kind] == [c for c in batches if c.kind == kind]
    assert out.has_work == bool(batches)


class StopRuntime(FakeRuntime):
    """Says 'stop string matched' for chosen sequences at a chosen step."""

    stop_at: dict[int, int] = {}

    def step(self, now=None):
        self.now += 1.0
        out = self.sched.schedule(now=self.now)
        self.check(out)
        stops = {s: "stop 'x'" for s, at in self.stop_at.items() if at == out.step_id}
        if out.has_work:
            self.finished += self.sched.on_step_done(out, self.sample_for(out), now=self.now,
                                                     stops=stops)
        return out


def test_stops_finish_only_the_named_sequence_and_free_its_blocks():
    s = make(blocks=16)
    rt = StopRuntime(s)
    s.add_request("a", prompt(6), params(max_tokens=8, n=2))
    s.add_request("b", prompt(5, 2000), params(max_tokens=3))
    a0, a1 = s.seq_ids("a")
    rt.stop_at = {a0: 2}
    rt.step()
    rt.step()
    used = s.manager.stats().device.num_used
    rt.step()  # step 2: a0's token completed a stop string
    assert s.seq_ids("a") == (a0, a1) and not s.manager.has_seq(a0) and s.manager.has_seq(a1)
    assert s.manager.stats().device.num_used < used
    rt.drain()
    fa = rt.by_id()["a"]
    by_seq = {so.seq_id: so for so in fa.seqs}
    assert (by_seq[a0].status, by_seq[a0].finish_reason) == (SeqStatus.FINISHED_STOPPED,
                                                            "stop 'x'")
    assert len(by_seq[a0].output_token_ids) == 3  # steps 0..2: the stopping token is kept
    assert by_seq[a1].status is SeqStatus.FINISHED_LENGTH and len(by_seq[a1].output_token_ids) == 8
    assert rt.by_id()["b"].output_token_ids == [7, 7, 7]
    assert_empty(s)
