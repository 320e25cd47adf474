"""The seeds' admission decisions through the scheduler: OK / LATER / NEVER with the
watermark, head-of-line order, max_model_len, and the budgets."""

import pytest

from kvpool.core import AllocStatus
from kvpool.errors import ConfigError, RequestError, SchedulerError
from kvpool.sched import SchedulerConfig, SeqStatus
from tests.sched.helpers import BS, FakeRuntime, assert_empty, make, params, prompt


def test_ok_admits_and_runs_to_completion():
    s = make(blocks=16, watermark=0.1)
    rt = FakeRuntime(s)
    s.add_request("a", prompt(10), params(max_tokens=3))
    out = rt.step()
    assert [(p.request_id, p.start, p.end) for p in out.prefills] == [("a", 0, 10)]
    assert out.prefills[0].is_last and out.prefills[0].token_ids == prompt(10)
    rt.drain()
    f = rt.by_id()["a"]
    assert f.status is SeqStatus.FINISHED_LENGTH and f.output_token_ids == [7, 7, 7]
    assert f.seqs[0].finish_reason == "max_tokens"
    assert_empty(s)


def test_never_is_ignored_with_a_reason_and_not_retried():
    s = make(blocks=10, watermark=0.1)  # watermark 1 block
    assert s.manager.admission([(10 * BS, ())]).status is AllocStatus.NEVER
    s.add_request("big", prompt(10 * BS))
    s.add_request("small", prompt(BS))
    rt = FakeRuntime(s)
    out = rt.step()
    assert [f.request_id for f in out.ignored] == ["big"]
    big = out.ignored[0]
    assert big.status is SeqStatus.FINISHED_IGNORED
    assert "10 blocks" in big.reason and "never fit" in big.reason and "watermark" in big.reason
    assert [p.request_id for p in out.prefills] == ["small"]  # the queue moved on
    assert s.request_status("big") is None
    rt.drain()
    assert s.stats().ignored == 1
    assert_empty(s)


def test_prompt_longer_than_max_model_len_is_ignored():
    s = make(max_model_len=32)
    s.add_request("long", prompt(33))
    out = FakeRuntime(s).step()
    assert out.ignored[0].reason == "prompt has 33 tokens, more than max_model_len=32"
    assert not s.has_unfinished()


def test_later_waits_until_blocks_free_and_keeps_fcfs_order():
    s = make(blocks=10, watermark=0.1)
    rt = FakeRuntime(s)
    s.add_request("a", prompt(8 * BS), params(max_tokens=2))  # 8 of 10 blocks
    rt.step()
    s.add_request("b", prompt(2 * BS))  # free 2 - 2 < watermark 1 -> LATER
    s.add_request("c", prompt(1))  # would fit, but must not overtake b (head of line)
    assert s.manager.admission([(2 * BS, ())]).status is AllocStatus.LATER
    out = rt.step()
    assert out.prefills == [] and s.request_status("b") is SeqStatus.WAITING
    assert s.request_status("c") is SeqStatus.WAITING
    rt.drain()
    order = [f.request_id for f in rt.finished]
    assert order == ["a", "b", "c"]
    assert rt.by_id()["b"].first_scheduled_time <= rt.by_id()["c"].first_scheduled_time
    assert_empty(s)


def test_max_num_seqs_counts_every_sequence_of_a_request():
    s = make(blocks=64, max_num_seqs=3, max_num_batched_tokens=64)
    s.add_request("a", prompt(4), params(n=2, max_tokens=5))
    s.add_request("b", prompt(4, 2000), params(n=2, max_tokens=5))
    rt = FakeRuntime(s)
    out = rt.step()
    assert [p.request_id for p in out.prefills] == ["a"]
    assert s.request_status("b") is SeqStatus.WAITING
    rt.drain()
    assert_empty(s)


def test_num_running_seqs_is_the_public_read_only_count_max_num_seqs_bounds():
    s = make(blocks=64, max_num_seqs=3, max_num_batched_tokens=64)
    assert s.num_running_seqs == 0
    s.add_request("a", prompt(4), params(n=2, max_tokens=5))
    s.add_request("b", prompt(4, 2000), params(n=2, max_tokens=5))
    assert s.num_running_seqs == 0  # waiting sequences do not count
    rt = FakeRuntime(s)
    rt.step()
    assert s.num_running_seqs == 2 == s.stats().num_running_seqs  # a's two; b's would be 4
    s.fork(s.seq_ids("a")[0])
    assert s.num_running_seqs == 3
    with pytest.raises(AttributeError):
        s.num_running_seqs = 0  # read-only: only the scheduler moves it
    rt.drain()
    assert s.num_running_seqs == 0
    assert_empty(s)


def test_token_budget_limits_prefills_per_step():
    s = make(blocks=64, max_num_batched_tokens=16, max_num_seqs=4,
             enable_chunked_prefill=False, max_model_len=16)
    for r in "abc":
        s.add_request(r, prompt(8, base=100 * ord(r)))
    out = FakeRuntime(s).step()
    assert [p.request_id for p in out.prefills] == ["a", "b"]
    assert out.num_batched_tokens == 16


def test_add_request_validation():
    s = make()
    s.add_request("a", prompt(3))
    with pytest.raises(SchedulerError):
        s.add_request("a", prompt(3))
    with pytest.raises(RequestError) as e:
        s.add_request("e", [])
    assert e.value.param == "prompt"
    with pytest.raises(RequestError):
        s.add_request("z", prompt(3), params(max_tokens=0))
    with pytest.raises(RequestError):
        s.add_request("z", prompt(3), params(n=0))


@pytest.mark.parametrize("kw,needle", [
    ({"max_num_seqs": 10, "max_num_batched_tokens": 5}, "max_num_batched_tokens"),
    ({"enable_chunked_prefill": False, "max_model_len": 4096,
      "max_num_batched_tokens": 2048}, "chunked"),
    ({"policy": "lifo"}, "fcfs"),
    ({"preemption_mode": "drop"}, "recompute"),
    ({"defrag_threshold": 1.5}, "defrag_threshold"),
    ({"prefill_tokens_per_s": 0}, "prefill_tokens_per_s"),
])
def test_config_errors_name_the_fix(kw, needle):
    with pytest.raises(ConfigError) as e:
        SchedulerConfig(**kw)
    assert needle in str(e.value)


def test_schedule_twice_without_step_done_is_an_error():
    s = make()
    s.add_request("a", prompt(3))
    out = s.schedule()
    with pytest.raises(SchedulerError):
        s.schedule()
    with pytest.raises(SchedulerError):
        s.on_step_done(out, {})  # the prefill's last chunk needs a sampled token
    s.on_step_done(out, {out.prefills[0].seq_ids[0]: 1})
    s.check_invariants()


def test_stop_token_and_eos():
    from kvpool.sched import RequestParams
    s = make(eos_token_id=2)
    rt = FakeRuntime(s)
    a = s.add_request("a", prompt(3), RequestParams(max_tokens=10, stop_token_ids=(9,)))
    b = s.add_request("b", prompt(3, 50), RequestParams(max_tokens=10))
    c = s.add_request("c", prompt(3, 90), RequestParams(max_tokens=3, ignore_eos=True))
    rt.tokens = {a[0]: 9, b[0]: 2, c[0]: 2}
    rt.drain()
    f = rt.by_id()
    assert (f["a"].status, f["a"].seqs[0].finish_reason) == (SeqStatus.FINISHED_STOPPED,
                                                              "stop_token 9")
    assert (f["b"].status, f["b"].seqs[0].finish_reason) == (SeqStatus.FINISHED_STOPPED, "eos")
    assert f["c"].status is SeqStatus.FINISHED_LENGTH and f["c"].output_token_ids == [2, 7, 7]
    assert_empty(s)


def test_max_model_len_stops_generation():
    s = make(max_model_len=12)
    s.add_request("a", prompt(10), params(max_tokens=100))
    rt = FakeRuntime(s)
    rt.drain()
    f = rt.by_id()["a"]
    assert f.seqs[0].finish_reason == "max_model_len" and len(f.output_token_ids) == 2


def test_one_context_rule_for_the_scheduler_and_the_server_edge():
    """exceeds_context judges both: the scheduler runs a prompt that fills the context (it
    stops the sequence at max_model_len itself), the server's edge wants room for one token."""
    from kvpool.runtime.model import build_byte_tokenizer
    from kvpool.server.protocol import RequestParser

    s = make(max_model_len=32)
    s.add_request("full", prompt(32), params(max_tokens=5))
    rt = FakeRuntime(s)
    assert not rt.step().ignored
    rt.drain()
    assert rt.by_id()["full"].seqs[0].finish_reason == "max_model_len"
    edge = RequestParser(build_byte_tokenizer(), ["m"], 32, max_n=1, max_tokens_limit=8,
                         max_stop=1)
    with pytest.raises(RequestError) as info:
        edge.parse_completion({"prompt": [5] * 32})
    assert info.value.code == "context_length_exceeded"
    assert edge.parse_completion({"prompt": [5] * 31}).params.max_tokens == 1
