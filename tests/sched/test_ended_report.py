"""``Scheduler.ended``: each on_step_done / accept_late reports the sequences it finished, with
their status, reason and stop token, so that the runtime gives each of an n > 1 request's
choices its finish in that step without a copy of the stop rule (NOTE(child-finish))."""

from kvpool.sched import SeqStatus
from tests.sched.helpers import FakeRuntime, assert_empty, make, params, prompt

STOPPED, LENGTH = SeqStatus.FINISHED_STOPPED, SeqStatus.FINISHED_LENGTH


def report(s) -> list[tuple[int, SeqStatus, str | None, int | None]]:
    return [(so.seq_id, so.status, so.finish_reason, so.stop_token) for so in s.ended]


def test_each_call_reports_the_sequences_it_ended_and_nothing_older():
    s = make(blocks=32)
    rt = FakeRuntime(s)
    s.add_request("g", prompt(6, 100), params(max_tokens=3, n=3, stop=(3,)))
    a, b, c = s.seq_ids("g")
    rt.tokens = {a: 3}  # a ends on its stop token in the prompt's step
    rt.step()
    assert report(s) == [(a, STOPPED, "stop_token 3", 3)] and rt.finished == []
    rt.step()
    assert report(s) == []  # nothing ended in this step: the last report is gone
    out = s.schedule()
    sampled = rt.sample_for(out)
    del sampled[b]
    rt.finished += s.on_step_done(out, sampled, deferred={b})
    assert report(s) == [(c, LENGTH, "max_tokens", None)]
    assert s.accept_late({b: 9}, stops={b: "stop 'x'"}) != []  # the request's last
    assert report(s) == [(b, STOPPED, "stop 'x'", None)]
    assert_empty(s)
