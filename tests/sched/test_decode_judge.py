"""The decode path's per-token checks (StepCompletion): every stop rule fires on the exact
token, however late in the decode it comes, for each sequence of a batch and of an n > 1
request; a sequence finished while its step was in flight gets no token."""

from kvpool.sched import SeqStatus

from tests.sched.helpers import FakeRuntime, assert_empty, make, params, prompt


def _run(sched, rt_tokens=None):
    rt = FakeRuntime(sched, sample_fn=rt_tokens)
    rt.drain()
    assert_empty(sched)
    return rt.by_id()


def test_each_rule_ends_on_its_token_mid_decode():
    s = make(blocks=64, max_num_seqs=8, max_model_len=40, eos_token_id=3)
    s.add_request("tokens", prompt(6), params(max_tokens=13))
    s.add_request("model_len", prompt(30, 2000), params(max_tokens=100))  # 10 outputs fit
    s.add_request("stop_id", prompt(5, 3000), params(max_tokens=100, stop=(9,)))
    s.add_request("eos", prompt(7, 4000), params(max_tokens=100, ignore_eos=False))
    ids = {rid: s.seq_ids(rid)[0] for rid in ("stop_id", "eos")}

    def sample(seq_id, step):
        if seq_id == ids["stop_id"] and step == 11:
            return 9
        return 3 if seq_id == ids["eos"] and step == 8 else 7

    f = _run(s, sample)
    assert (f["tokens"].seqs[0].finish_reason, len(f["tokens"].output_token_ids)) == (
        "max_tokens", 13)
    assert (f["model_len"].seqs[0].finish_reason, len(f["model_len"].output_token_ids)) == (
        "max_model_len", 10)
    assert f["stop_id"].seqs[0].finish_reason == "stop_token 9"
    assert f["stop_id"].output_token_ids[-1] == 9 and 9 not in f["stop_id"].output_token_ids[:-1]
    assert f["eos"].seqs[0].finish_reason == "eos" and f["eos"].output_token_ids[-1] == 3
    assert all(r.status in (SeqStatus.FINISHED_STOPPED, SeqStatus.FINISHED_LENGTH)
               for r in f.values())


def test_n2_sequences_end_apart_and_first_token_time_is_the_first():
    s = make(blocks=64, max_model_len=64)
    s.add_request("g", prompt(8), params(max_tokens=20, n=2, stop=(9,)))
    a, b = s.seq_ids("g")
    out = s.schedule(now=1.0)
    s.on_step_done(out, {a: 7, b: 7}, now=1.0)
    for step in range(2, 6):
        out = s.schedule(now=float(step))
        s.on_step_done(out, {a: 9 if step == 4 else 7, b: 7}, now=float(step))
    out = s.schedule(now=6.0)
    assert [d.seq_id for d in out.decodes] == [b]
    (f,) = s.on_step_done(out, {b: 7}, now=6.0, stops={b: "stop string"})
    by = {o.seq_id: o for o in f.seqs}
    assert (by[a].finish_reason, len(by[a].output_token_ids)) == ("stop_token 9", 4)
    assert (by[b].finish_reason, len(by[b].output_token_ids)) == ("stop string", 6)
    assert f.first_token_time == 1.0
    assert_empty(s)


def test_finished_while_in_flight_gets_no_token():
    s = make(blocks=64)
    for rid in "abc":
        s.add_request(rid, prompt(5, 1000 + 100 * ord(rid)), params(max_tokens=50))
    rt = FakeRuntime(s)
    for _ in range(3):
        rt.step()
    out = s.schedule()
    sampled = rt.sample_for(out)
    r = s.finish("b", reason="client stop")
    assert r is not None and len(r.output_token_ids) == 3
    s.on_step_done(out, sampled)
    assert len(r.output_token_ids) == 3  # the in-flight token was dropped
    assert s.request_ids() == ["a", "c"]
    for rid in "ac":
        s.abort(rid)
    assert_empty(s)
