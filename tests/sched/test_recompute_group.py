"""A recomputed ``n > 1`` request whose sequences diverged holds its prompt once: its units
reuse the first unit's prompt blocks, the admission counts them once, and so a request that
fit when it was admitted fits again and finishes (it used to be counted with a prompt copy
per sequence and dropped FINISHED_IGNORED). Every request the engine's up-front check
(RequestChecker, sched/request_checker.py) accepts finishes, with no host pool to swap to."""

from __future__ import annotations

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from kvpool.sched import RequestChecker
from kvpool.runtime.model import SamplingParams
from kvpool.sched import SeqStatus
from tests.sched.helpers import FakeRuntime, assert_empty, make, params, prompt


def _diverging(sid: int, step: int) -> int:
    return 10 + sid % 3  # each sequence samples its own token: their outputs differ


def _pressured(caching: bool):
    """8 blocks of 8, no host pool. q (8 + 24 tokens) and r (32 prompt tokens, n=2,
    max_tokens=16: 4 shared blocks + 2 of its own per sequence = 8) run together until both
    need a block in the same step: r, the newest, is recomputed with 9 diverged tokens per
    sequence (41 tokens each: 6 blocks each counted apart, 12 > 8; shared, 4 + 2 + 2)."""
    s = make(blocks=8, host=0, watermark=0.0, caching=caching, bs=8, max_model_len=64)
    rt = FakeRuntime(s, sample_fn=_diverging)
    s.add_request("q", prompt(8, 5000), params(max_tokens=24))
    s.add_request("r", prompt(32), params(max_tokens=16, n=2))
    return s, rt


def test_diverged_pair_recomputed_without_a_host_pool_finishes():
    for caching in (False, True):
        s, rt = _pressured(caching)
        a, b = s.seq_ids("r")
        rt.drain()
        done = rt.by_id()
        assert [f.request_id for f in rt.finished
                if f.status is SeqStatus.FINISHED_IGNORED] == [], done["r"].reason
        r = done["r"]
        assert r.status is SeqStatus.FINISHED_LENGTH, (caching, r.reason)
        assert r.num_preemptions >= 1 and s.stats().preemptions["recompute"] >= 1
        assert [o.output_token_ids for o in r.seqs] == [[_diverging(a, 0)] * 16,
                                                         [_diverging(b, 0)] * 16]
        assert len(done["q"].output_token_ids) == 24
        assert_empty(s)


def _step_until_preempted(rt, request_id: str) -> None:
    while not any(p.request_id == request_id for o in rt.outputs for p in o.preempted):
        rt.step()


def test_recompute_computes_the_prompt_once_then_each_own_tail():
    s, rt = _pressured(False)
    a, b = s.seq_ids("r")
    _step_until_preempted(rt, "r")
    mark = len(rt.outputs)
    rt.drain()
    again = [(p.seq_ids, p.start, p.end, p.num_tokens) for o in rt.outputs[mark:]
             for p in o.prefills if p.request_id == "r"]
    # a's unit computes the prompt and its own 9 tokens; b's reuses the 4 prompt blocks and
    # computes only its 9 tokens, after a's step wrote them
    assert [x[0] for x in again] == [(a,), (b,)], again
    assert again[0][1:] == (0, 41, 41) and again[1][1:] == (32, 41, 41), again
    steps = [i for i, o in enumerate(rt.outputs[mark:]) for p in o.prefills
             if p.request_id == "r"]
    assert steps[0] < steps[1]
    assert_empty(s)


def test_follower_takes_over_when_the_first_unit_is_finished_before_it_runs():
    s, rt = _pressured(False)
    a, b = s.seq_ids("r")
    _step_until_preempted(rt, "r")
    while s.request_status("r") is not SeqStatus.RUNNING:
        out = s.schedule(now=rt.now)
        if any(p.request_id == "r" for p in out.prefills):
            # a is admitted and scheduled this step: end it before the step is done
            s.finish("r", a)
            rt.finished += s.on_step_done(out, rt.sample_for(out), now=rt.now)
            break
        rt.finished += out.ignored
        if out.has_work:
            rt.finished += s.on_step_done(out, rt.sample_for(out), now=rt.now)
    mark = len(rt.outputs)
    rt.drain()
    # b's unit reused a's prompt blocks, which a never wrote: b computes them itself
    assert [(p.seq_ids, p.start) for o in rt.outputs[mark:] for p in o.prefills
            if p.request_id == "r"] == [((b,), 0)]
    (f,) = [x for x in rt.finished if x.request_id == "r"]
    assert [o.status for o in f.seqs] == [SeqStatus.FINISHED_STOPPED,
                                          SeqStatus.FINISHED_LENGTH]
    assert f.seqs[1].output_token_ids == [_diverging(b, 0)] * 16
    assert_empty(s)


# ----------------------------------------------------------------------------- property
MAX_LEN = 256


def _checker(s) -> RequestChecker:
    return RequestChecker(10_000, MAX_LEN, s.manager)


def _accepted(checker: RequestChecker, p_len: int, max_tokens: int, n: int) -> bool:
    try:
        checker.check(prompt(p_len), SamplingParams(n=n, max_tokens=max_tokens))
    except ValueError:
        return False
    return True


@st.composite
def scenario(draw):
    bs = draw(st.sampled_from([4, 8]))
    blocks = draw(st.integers(3, 16))
    watermark = draw(st.sampled_from([0.0, 0.1, 0.2]))
    caching = draw(st.booleans())
    chunked = draw(st.booleans())
    mode = draw(st.sampled_from([None, "recompute"]))
    reqs = [(draw(st.integers(1, 3)), draw(st.integers(1, blocks * bs)),
             draw(st.sampled_from([0, 0, 1, 2, 5, 1000])), draw(st.integers(0, 3)))
            for _ in range(draw(st.integers(1, 5)))]
    return bs, blocks, watermark, caching, chunked, mode, reqs, draw(st.booleans())


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario())
@example((8, 8, 0.0, False, True, None, [(1, 8, 30, 0), (2, 32, 0, 0)], True))
def test_every_request_the_up_front_check_accepts_finishes(sc):
    bs, blocks, watermark, caching, chunked, mode, reqs, diverge = sc
    s = make(blocks, 0, watermark, caching, bs, max_model_len=MAX_LEN,
             max_num_batched_tokens=MAX_LEN, enable_chunked_prefill=chunked,
             preemption_mode=mode)
    checker = _checker(s)
    arrivals: dict[int, list] = {}
    want = {}
    for i, (n, p_len, short, at) in enumerate(reqs):
        # the largest max_tokens the check accepts, less ``short`` (near the edge mostly)
        top = next((m for m in range(blocks * bs, 0, -1) if _accepted(checker, p_len, m, n)),
                   None)
        if top is None:
            continue
        m = max(1, top - short)
        assert _accepted(checker, p_len, m, n)
        want[f"q{i}"] = (m, n)
        arrivals.setdefault(at, []).append((f"q{i}", p_len, m, n))
    rt = FakeRuntime(s, sample_fn=_diverging if diverge else None)
    step = 0
    while arrivals or s.has_unfinished():
        for rid, p_len, m, n in arrivals.pop(step, []):
            s.add_request(rid, prompt(p_len, 100 * int(rid[1:])), params(m, n=n))
        rt.step()
        s.check_invariants()
        step += 1
        assert step < 5000, "not drained: a request stalled"
    done = rt.by_id()
    assert sorted(done) == sorted(want)
    for rid, (m, n) in want.items():
        f = done[rid]
        assert f.status is SeqStatus.FINISHED_LENGTH, (rid, f.status, f.reason)
        assert [len(o.output_token_ids) for o in f.seqs] == [m] * n, rid
    assert_empty(s)


def test_n_sequences_without_max_tokens_are_checked_at_the_context():
    """NOTE(open-n) in sched/request_checker.py: n=2 with no max_tokens on a pool that holds one
    context but not two was accepted and failed part-way ("can never fit", finish_reason
    error); now refused up front, naming what fits, and where both fit it runs to the context."""
    small = make(blocks=16, host=0, watermark=0.0, caching=False, bs=16, max_model_len=MAX_LEN)
    checker, p = _checker(small), prompt(30)
    checker.check(p, SamplingParams(n=1, max_tokens=None))  # one context fits
    try:
        checker.check(p, SamplingParams(n=2, max_tokens=None))
        raise AssertionError("n=2 with no max_tokens was accepted on a pool too small for it")
    except ValueError as exc:
        assert "no max_tokens" in str(exc) and "use n <= 1, max_tokens <= " in str(exc), exc
    s = make(blocks=40, host=0, watermark=0.0, caching=False, bs=16, max_model_len=MAX_LEN)
    _checker(s).check(p, SamplingParams(n=2, max_tokens=None))
    rt = FakeRuntime(s, sample_fn=_diverging)
    s.add_request("r", p, SamplingParams(n=2, max_tokens=None, ignore_eos=True))
    rt.drain()
    (f,) = rt.finished
    assert [len(o.output_token_ids) for o in f.seqs] == [MAX_LEN - 30] * 2, f.status
    assert_empty(s)


def test_a_pool_short_of_one_context_suggests_what_n_sequences_fit():
    """The one-sequence refusal of an n > 1 request suggested one sequence's max_tokens (32 on
    4 blocks of 8), which the group check then refused again (16); every fix it names works."""
    s = make(blocks=4, host=0, watermark=0.0, caching=False, bs=8, max_model_len=96)
    checker, p = RequestChecker(10_000, 96, s.manager), prompt(1)
    for max_tokens in (None, 64):
        try:
            checker.check(p, SamplingParams(n=2, max_tokens=max_tokens))
            raise AssertionError("accepted on a pool too small for it")
        except ValueError as exc:
            suggested = int(str(exc).split("max_tokens <= ")[1].split()[0])
        checker.check(p, SamplingParams(n=2, max_tokens=suggested))
