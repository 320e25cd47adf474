"""NOTE(child-finish) in kvpool/runtime/engine/output_processor.py, on the tiny model with real
tensors: a sequence of an n > 1 request that ends before its siblings (a stop token, a stop
string) gets its one final output in the update of the step that ended it, and its e2e is its
own; the request's last update ends it, with no second finish for a sequence already ended."""

from __future__ import annotations

from dataclasses import replace

from kvpool.metrics.collector import KVPoolMetrics
from kvpool.runtime.engine.core import EngineCore
from kvpool.runtime.engine.output_processor import RequestOutput
from kvpool.runtime.model import SamplingParams
from kvpool.sched import SeqStatus
from tests.configs import engine_config
from tests.runtime.test_engine_step import PROMPT, merged, run
from tests.torch_threads import one_torch_thread  # noqa: F401 (autouse)

N, MAX = 4, 24
SAMPLED = dict(n=N, max_tokens=MAX, temperature=1.0, seed=5, ignore_eos=True)


def engine() -> tuple[EngineCore, KVPoolMetrics]:
    metrics = KVPoolMetrics(lambda: core.snapshot())  # read only by a scrape
    core = EngineCore(engine_config("small", max_num_seqs=8, max_num_batched_tokens=256),
                      metrics=metrics)
    return core, metrics


def early_stop(outs: dict[int, tuple[int, ...]]) -> int:
    """A token among choice 0's first three that no other choice generates: a stop token that
    ends choice 0 early and leaves the others to run to max_tokens."""
    others = {t for i, ids in outs.items() if i for t in ids}
    return next(t for t in outs[0][:3] if t not in others)


def finishes(updates: list[RequestOutput]) -> dict[int, list[tuple[int, object]]]:
    """Per choice: (update number, output) of each output that carries a finish_reason."""
    got: dict[int, list] = {i: [] for i in range(N)}
    for k, u in enumerate(updates):
        for c in u.outputs:
            if c.finish_reason is not None:
                got[c.index].append((k, c))
    return got


def test_a_stop_token_ends_its_choice_at_once_timed_as_its_own():
    core, metrics = engine()
    try:
        ref = merged(run(core, {"ref": SamplingParams(**SAMPLED)})["ref"])
        stop = early_stop({c.index: c.token_ids for c in ref.outputs})
        base = metrics.e2e.values()
        ups = run(core, {"r": SamplingParams(**SAMPLED, stop_token_ids=[stop])})["r"]
        ends = finishes(ups)
        assert all(len(v) == 1 for v in ends.values()), ends  # one finish per choice
        (k0, c0), = ends[0]
        assert (c0.finish_reason, c0.stop_reason) == ("stop", stop) and c0.num_generated <= 3
        assert not ups[k0].finished  # it went out before the request ended ...
        later = [c for u in ups[k0 + 1:] for c in u.outputs if c.index != 0 and c.token_ids]
        assert later  # ... and the other choices' tokens kept coming after it
        for i in range(1, N):
            (_, c), = ends[i]
            assert (c.finish_reason, c.num_generated) == ("length", MAX)
        e2e = ups[-1].metrics["e2e"]
        own = [c.e2e for v in ends.values() for _, c in v]
        assert c0.e2e < e2e and all(x <= e2e for x in own)
        counts, total = metrics.e2e.values()
        assert counts[-1] - base[0][-1] == N
        assert abs((total - base[1]) - sum(own)) < 1e-9  # each child observed at its own
    finally:
        core.close()


def test_a_stop_string_finishes_its_choice_once():
    """Before, the update that matched the stop string and the request's last update each
    carried the choice's finish (a stream showed finish_reason "stop" twice)."""
    core, _ = engine()
    try:
        ref = merged(run(core, {"ref": SamplingParams(**SAMPLED)})["ref"])
        texts = {c.index: c.text for c in ref.outputs}
        stop = next(texts[0][j:j + 2] for j in range(len(texts[0]) - 1)
                    if not any(texts[0][j:j + 2] in texts[i] for i in range(1, N)))
        ups = run(core, {"r": SamplingParams(**SAMPLED, stop=[stop])})["r"]
        ends = finishes(ups)
        assert all(len(v) == 1 for v in ends.values()), ends
        (k0, c0), = ends[0]
        assert (c0.finish_reason, c0.stop_reason) == ("stop", stop)
        assert merged(ups).outputs[0].text == texts[0][:texts[0].index(stop)]
        assert k0 < len(ups) - 1 or all(c.num_generated == MAX for _, c in ends[0])
    finally:
        core.close()


def test_the_context_end_ends_a_choice_as_the_scheduler_does():
    """max_tokens None runs to the context's end: "length", once, at the scheduler's token
    (one sooner, the sequence was cut short; one later, the scheduler had ended it)."""
    core = EngineCore(engine_config("small", max_num_seqs=4, max_model_len=64))
    try:
        prompt = len(core.tokenizer.encode(PROMPT))
        assert prompt < 48
        ups = run(core, {"ctx": SamplingParams(n=2, max_tokens=None, temperature=1.0, seed=1,
                                               ignore_eos=True)})["ctx"]
        ends = finishes(ups)
        assert [len(ends[i]) for i in range(2)] == [1, 1]
        assert {ends[i][0][1].num_generated for i in range(2)} == {64 - prompt}
        assert {ends[i][0][1].finish_reason for i in range(2)} == {"length"}
        assert core.manager.stats().device.num_used == 0 and core.check_invariants()
    finally:
        core.close()


def test_each_choice_ends_in_the_step_and_for_the_reason_the_scheduler_reports():
    """The output processor holds no copy of the scheduler's stop rule: a stop id only the
    scheduler knows (its config's other eos ids, as a model's generation_config adds them)
    ends choice 0 in that step, with that id; choice 1 ends on a stop_token_ids id, choice 2
    runs on. Each finish goes out once, in the update of the step whose report
    (``Scheduler.ended``) names it; before, the mirror missed choice 0 until the end."""
    core, _ = engine()
    try:
        p = dict(SAMPLED, n=3, ignore_eos=False)
        ref = merged(run(core, {"ref": SamplingParams(**p)})["ref"])
        ids = {c.index: c.token_ids for c in ref.outputs}
        a = next(t for t in ids[0][:3] if t not in ids[1] + ids[2])
        b = next(t for t in ids[1][2:6] if t not in ids[0][:ids[0].index(a) + 1] + ids[2])
        cfg = core.scheduler.config
        core.scheduler.config = replace(cfg, other_eos_ids=cfg.other_eos_ids + (a,))
        core.add_request("r", core.tokenizer.encode(PROMPT), SamplingParams(
            **p, stop_token_ids=[b]))
        index = {s: i for i, s in enumerate(core.scheduler.seq_ids("r"))}
        ups, reported = [], []
        while core.has_work():
            steps = core.steps
            ups += core.step()
            if core.steps > steps:  # the step ran: its report is the scheduler's latest
                reported += [(len(ups) - 1, index[so.seq_id], so) for so in core.scheduler.ended]
        ends = finishes(ups)
        assert sorted((k, i) for i, v in ends.items() for k, _ in v) == \
            sorted((k, i) for k, i, _ in reported)  # once each, in its step's update
        for k, i, so in reported:
            (_, c), = ends[i]
            assert c.finish_reason == ("length" if so.status is SeqStatus.FINISHED_LENGTH
                                       else "stop") and c.stop_reason == so.stop_token
        assert (ends[0][0][1].stop_reason, ends[1][0][1].stop_reason) == (a, b)
        assert ends[0][0][0] < ends[1][0][0] < len(ups) - 1  # three different steps
        assert core.check_invariants()
    finally:
        core.close()


def test_a_stop_id_only_the_scheduler_knows_adds_no_text():
    """NOTE(stop-token-text): whether the token that ended a choice shows its text follows the
    scheduler's verdict, not the output processor's own list of stop ids: an id only the
    scheduler knows (its config's other eos ids) adds no text, for n = 1 and n = 3, in the
    deltas a stream sends (never shown, then taken back) and so in the whole answer; with
    include_stop_str_in_output it keeps its text, as vLLM's detokenizer. Before, it showed."""
    core, _ = engine()
    try:
        tok, prompt = core.tokenizer, core.tokenizer.encode(PROMPT)
        runs = {n: dict(SAMPLED, n=n, ignore_eos=False) for n in (1, 3)}
        picks = []
        for n, p in runs.items():  # a new id with text among choice 0's first tokens
            ids = merged(run(core, {"ref": SamplingParams(**p)})["ref"]).outputs[0].token_ids
            picks.append(next(t for k, t in enumerate(ids) if 0 < k and t not in ids[:k]
                              and tok.decode([t]).strip()))
        assert not set(picks) & set(tok.eos_token_ids)
        cfg = core.scheduler.config
        core.scheduler.config = replace(cfg, other_eos_ids=cfg.other_eos_ids + tuple(picks))
        for (n, p), keep in [(r, k) for r in runs.items() for k in (False, True)]:
            ups = run(core, {"r": SamplingParams(**p, include_stop_str_in_output=keep)})["r"]
            outs = merged(ups).outputs
            assert len(outs) == n and any(c.stop_reason in picks for c in outs)
            for c in outs:
                by_id = c.stop_reason in picks
                shown = c.token_ids[:-1] if by_id and not keep else c.token_ids
                want = tok.detokenizer(True, prompt).push(list(shown))
                streamed = "".join(o.text for u in ups for o in u.outputs if o.index == c.index)
                assert streamed == c.text == want, (n, keep, c)
        assert core.check_invariants()
    finally:
        core.close()
