"""Random arrivals / steps / aborts / finishes / forks against the real manager, with a fake
runtime that samples tokens. After every rule the scheduler and the manager pass
check_invariants; at the end, once arrivals stop, every request finishes within a bound on
steps (no starvation), each is reported exactly once, and no block leaks."""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (RuleBasedStateMachine, initialize, invariant, precondition,
                                 rule)

from kvpool.sched import RequestParams, SeqStatus
from tests.sched.helpers import FakeRuntime, assert_empty, make

STOP = 3  # a stop token the fake runtime samples now and then


class SchedulerMachine(RuleBasedStateMachine):
    @initialize(
        blocks=st.integers(6, 28), bs=st.sampled_from([2, 4]), host=st.sampled_from([0, 24]),
        watermark=st.sampled_from([0.0, 0.1]), caching=st.booleans(),
        policy=st.sampled_from(["fcfs", "priority"]),
        mode=st.sampled_from([None, "swap", "recompute"]), chunked=st.booleans(),
        budget=st.integers(8, 40), max_seqs=st.integers(1, 6),
        defrag=st.sampled_from([None, 0.0, 0.3]))
    def setup(self, blocks, bs, host, watermark, caching, policy, mode, chunked, budget,
              max_seqs, defrag):
        max_len = 40
        self.sched = make(blocks=blocks, bs=bs, host=host, watermark=watermark,
                          caching=caching, policy=policy, preemption_mode=mode,
                          enable_chunked_prefill=chunked,
                          max_num_batched_tokens=budget if chunked else max_len,
                          max_num_seqs=min(max_seqs, budget), max_model_len=max_len,
                          defrag_threshold=defrag)
        self.rt = FakeRuntime(self.sched,
                              sample_fn=lambda s, k: (s * 7919 + k * 31) % 11)
        self.added: dict[str, int] = {}  # request id -> prompt + n * max_tokens
        self.reported: list[str] = []
        self.next_id = 0
        self.prompts: list[list[int]] = [[1, 2, 3, 4, 5, 6, 7, 8]]

    def _collect(self, finished) -> None:
        self.reported += [f.request_id for f in finished]

    @rule(length=st.integers(1, 44), share=st.booleans(), max_tokens=st.integers(1, 10),
          n=st.integers(1, 3), priority=st.integers(0, 3), stop=st.booleans())
    def add(self, length, share, max_tokens, n, priority, stop):
        base = self.prompts[-1] if share else []
        toks = (base + [100 + self.next_id * 50 + i for i in range(length)])[:max(length, 1)]
        rid = f"r{self.next_id}"
        self.next_id += 1
        self.prompts.append(toks)
        self.sched.add_request(rid, toks, RequestParams(
            max_tokens=max_tokens, n=n, stop_token_ids=(STOP,) if stop else (),
            ignore_eos=True), priority=priority)
        self.added[rid] = len(toks) + n * max_tokens

    @rule()
    def step(self):
        before = len(self.rt.finished)
        self.rt.step()
        self._collect(self.rt.finished[before:])

    @rule(data=st.data(), fail=st.booleans())
    @precondition(lambda self: self.sched.has_unfinished())
    def abort_while_a_step_runs(self, data, fail):
        s = self.sched
        out = s.schedule()
        self._collect(out.ignored)
        if s.has_unfinished():
            f = s.abort(data.draw(st.sampled_from(sorted(s.request_ids()))))
            self._collect([f])
        if not out.has_work:
            return
        if fail:
            self._collect(s.on_step_failed(out, "step failed"))
        else:
            self._collect(s.on_step_done(out, self.rt.sample_for(out)))

    @rule(copy=st.sampled_from([1e6, 1e12]), prefill=st.sampled_from([1.0, 1e6]))
    def update_cost_model(self, copy, prefill):
        self.sched.update_cost_model(copy_bytes_per_s=copy, prefill_tokens_per_s=prefill)

    @rule(data=st.data())
    @precondition(lambda self: self.sched.has_unfinished())
    def abort(self, data):
        rid = data.draw(st.sampled_from(sorted(self.sched.request_ids())))
        f = self.sched.abort(rid)
        assert f is not None and f.status is SeqStatus.FINISHED_ABORTED
        self._collect([f])

    @rule(data=st.data())
    @precondition(lambda self: self.sched.has_unfinished())
    def finish_one_seq(self, data):
        rid = data.draw(st.sampled_from(sorted(self.sched.request_ids())))
        seqs = self.sched.seq_ids(rid)
        sid = data.draw(st.sampled_from(seqs))
        f = self.sched.finish(rid, sid, SeqStatus.FINISHED_STOPPED, "stop string")
        if f is not None:
            self._collect([f])

    @rule(data=st.data())
    def fork(self, data):
        s = self.sched
        cands = [q.seq_id for g in s.state.running for q in g.seqs
                 if q.status is SeqStatus.RUNNING and q.unit is None]
        if not cands or s.num_running_seqs >= s.config.max_num_seqs:
            return
        s.fork(data.draw(st.sampled_from(cands)))

    @invariant()
    def consistent(self):
        if hasattr(self, "sched"):
            self.sched.check_invariants()

    def teardown(self):
        if not hasattr(self, "sched"):
            return
        s = self.sched
        # no starvation: with arrivals stopped everything ends within a bound on steps
        bound = 50 + 10 * sum(self.added[r] for r in s.request_ids())
        before = len(self.rt.finished)
        steps = self.rt.drain(max_steps=bound)
        assert steps <= bound
        self._collect(self.rt.finished[before:])
        assert sorted(self.reported) == sorted(self.added), "a request lost or reported twice"
        assert_empty(s)
        for f in self.rt.finished:
            if f.status is SeqStatus.FINISHED_IGNORED:
                assert any(w in f.reason for w in ("never fit", "max_model_len", "max_num_seqs"))


SchedulerMachine.TestCase.settings = settings(
    max_examples=60, stateful_step_count=40, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
TestSchedulerMachine = SchedulerMachine.TestCase
