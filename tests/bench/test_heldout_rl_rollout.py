"""bench/heldout_rl_rollout.py: the held-out shape rl_rollout has the properties its docstring
names (bench.heldout replays it as one of SHAPES)."""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict

import pytest

from bench.heldout import SHAPES
from bench.heldout_fewshot import BLOCK
from bench.heldout_rl_rollout import (BENCHES, EPOCH, EVAL_EVERY, KINDS, MAX_CONTEXT,
                                      generate, rl_rollout, rl_rollout_kept)
from tests.bench.shape_sizes import check_size
from tests.bench.trace_parts import (by_kind, common, registered_small_runs, shared_tokens,
                                     tokens)


@pytest.fixture(scope="module")
def run():
    return generate(1, 0.25)


def _kind(run, prompt):
    return KINDS[run.prompts[prompt].kind]


def _complete_steps(run):
    """The steps whose next step has started (the last one may be cut by the trace's end)."""
    return run.steps[:-1]


def test_registered_deterministic_and_seeded():
    for small in registered_small_runs("rl_rollout", rl_rollout, generate):  # every part
        assert {m[0] for m in small.meta} == {"rollout", "eval", "chat"}
        assert {_kind(small, m[1]).name for m in small.meta if m[0] == "rollout"} == {
            k.name for k in KINDS}


def test_block_ids_are_the_full_blocks_of_the_segments_under_one_version(run):
    last = {}
    for i, m in enumerate(run.meta):
        assert len(run.trace[i]) == tokens(m[5]) // BLOCK
        for j in {i - 1, last.get(m[:2], i - 1)} - {-1}:
            if run.meta[j][4] == m[4]:
                shared = shared_tokens(run.meta[j][5], m[5]) // BLOCK
                assert common(run.trace[j], run.trace[i]) == shared
            else:
                assert not set(run.trace[j]) & set(run.trace[i])
        last[m[:2]] = i
    version = {}
    for i, m in enumerate(run.meta):  # a block belongs to one weights version
        for h in run.trace[i]:
            assert version.setdefault(h, m[4]) == m[4]


def test_weights_change_every_step_in_time_order(run):
    assert run.times == sorted(run.times)
    versions = [m[4] for m in run.meta]
    assert versions == sorted(versions) and versions[-1] == len(run.steps) - 1
    for v, step in enumerate(run.steps):
        assert step.version == v and step.epoch == v // EPOCH
    for i, m in enumerate(run.meta):
        if m[0] == "rollout":
            assert i >= run.steps[m[4]].first
    gaps = [b.start - a.start for a, b in zip(run.steps, run.steps[1:])]
    assert min(gaps) > 200 + 90 and statistics.median(gaps) < 400  # about 5 minutes a step
    starts = [s.start for s in run.steps] + [float("inf")]
    for t, m in zip(run.times, run.meta):  # every request runs under the weights of its time
        assert starts[m[4]] <= t < starts[m[4] + 1]
    assert len(run.steps) > 3 * EPOCH


def test_a_group_is_g_identical_first_turns_in_a_row(run):
    groups = by_kind(run, "rollout", lambda m: (m[4], m[1]))
    for (v, p), idx in groups.items():
        assert p in run.steps[v].prompts
        if v == len(run.steps) - 1:
            continue  # the trace may end inside a group
        first = [i for i in idx if run.meta[i][3] == 0]
        g = _kind(run, p).group
        assert [run.meta[i][2] for i in first] == list(range(g))
        assert first == list(range(first[0], first[0] + g))  # in a row
        assert all(run.trace[i] == run.trace[first[0]] for i in first)
        prompt = run.prompts[p]
        assert run.meta[first[0]][5] == [prompt.template, prompt.problem]
    steps = _complete_steps(run)
    assert all({p for (v, p) in groups if v == s.version} == set(s.prompts) for s in steps)
    assert sum(len(s.prompts) for s in steps) > 100


def test_each_prompt_comes_back_once_an_epoch(run):
    shard = len(run.prompts)
    epochs = defaultdict(list)
    for s in _complete_steps(run):
        epochs[s.epoch].append(s)
    full = [steps for steps in epochs.values() if len(steps) == EPOCH]
    assert len(full) >= 3
    for steps in full:  # a new shuffle: every prompt once
        order = [p for s in steps for p in s.prompts]
        assert sorted(order) == list(range(shard))
    assert [p for s in full[0] for p in s.prompts] != [p for s in full[1] for p in s.prompts]
    seen = defaultdict(list)
    for s in _complete_steps(run):
        for p in s.prompts:
            seen[p].append(s.version)
    gaps = [b - a for v in seen.values() for a, b in zip(v, v[1:])]
    assert 1 <= min(gaps) and max(gaps) <= 2 * EPOCH - 1
    assert abs(statistics.mean(gaps) - EPOCH) < 2
    counts = Counter(run.prompts[p].kind for p in range(shard))
    for k, kind in enumerate(KINDS):
        assert abs(counts[k] - kind.share * shard) <= 1


def test_a_tool_episode_resends_its_history_and_samples_diverge(run):
    episodes = by_kind(run, "rollout", lambda m: (m[4], m[1], m[2]))
    long_ones = 0
    for (v, p, g), idx in episodes.items():
        kind = _kind(run, p)
        if kind.calls is None:
            assert len(idx) == 1
            continue
        assert [run.meta[i][3] for i in idx] == list(range(len(idx))) and len(idx) <= 20
        for i, j in zip(idx, idx[1:]):
            a, b = run.meta[i][5], run.meta[j][5]
            assert b[:len(a)] == a and len(b) == len(a) + 2  # the output, the tool result
            assert run.trace[j][:len(run.trace[i])] == run.trace[i]
            assert tokens(b) <= MAX_CONTEXT
        long_ones += len(idx) >= 5
    assert long_ones > 20
    second = by_kind(run, "rollout", lambda m: (m[4], m[1]) if m[3] == 1 else None)
    second.pop(None, None)
    pairs = 0
    for (v, p), idx in second.items():
        prompt = run.prompts[p]
        k = tokens([prompt.template, prompt.problem]) // BLOCK
        for i, j in zip(idx, idx[1:]):  # two samples' second turns: only the first is shared
            assert run.meta[i][2] != run.meta[j][2]
            assert common(run.trace[i], run.trace[j]) == k
            pairs += 1
    assert pairs > 50


def test_eval_runs_resend_the_same_suite_under_each_new_version(run):
    runs = by_kind(run, "eval", lambda m: m[4])
    order = [(i, k) for i, item in enumerate(run.suite)
             for k in range(BENCHES[item.bench].samples)]
    complete = [v for v in runs if v + 1 < len(run.steps)]
    assert complete == [v for v in range(len(run.steps) - 1) if v % EVAL_EVERY == 0]
    assert len(complete) >= 9
    for v in complete:
        idx = runs[v]
        assert [run.meta[i][1:3] for i in idx] == order
        for i in idx:
            item = run.suite[run.meta[i][1]]
            assert run.meta[i][5] == [item.header, item.question]
        for i, j in zip(idx, idx[1:]):  # samples of an item: identical requests
            if run.meta[i][1] == run.meta[j][1]:
                assert run.trace[i] == run.trace[j]
    a, b = runs[complete[0]], runs[complete[1]]
    assert not {h for i in a for h in run.trace[i]} & {h for i in b for h in run.trace[i]}
    assert {BENCHES[item.bench].name for item in run.suite} == {x.name for x in BENCHES}


def test_eval_items_share_their_benchmarks_few_shot_header(run):
    idx = by_kind(run, "eval", lambda m: m[4])[0]
    shared = 0
    for i, j in zip(idx, idx[1:]):
        x, y = run.suite[run.meta[i][1]], run.suite[run.meta[j][1]]
        if x != y and x.header == y.header:
            assert common(run.trace[i], run.trace[j]) == x.header[1] // BLOCK
            shared += 1
    assert shared >= 2


def test_a_debug_chat_resends_its_history_within_a_version(run):
    chats = by_kind(run, "chat", lambda m: m[1])
    templates = {t for ts in run.templates for t in ts}
    crossed = 0
    for c, idx in chats.items():
        chat = run.chats[c]
        assert idx[0] == c and len(idx) <= chat.turns <= 10
        head = run.meta[c][5][0]
        assert head in run.playground or head in templates
        for i, j in zip(idx, idx[1:]):
            assert run.times[j] - run.times[i] >= 5
            a, b = run.meta[i][5], run.meta[j][5]
            assert b[:len(a)] == a and len(b) == len(a) + 2  # the reply, the message
            if run.meta[i][4] == run.meta[j][4]:
                assert run.trace[j][:len(run.trace[i])] == run.trace[i]
            else:
                crossed += 1
    assert len(chats) > 20 and crossed >= 1
    heads = Counter(run.meta[c][5][0] in run.playground for c in chats)
    assert heads[True] > heads[False] > 0


def test_requests_mix_as_documented():
    full = generate(2)
    kinds = Counter(m[0] if m[0] != "rollout" else _kind(full, m[1]).name for m in full.meta)
    n = len(full.trace)
    assert 0.4 < kinds["math"] / n < 0.52 and 0.18 < kinds["tool"] / n < 0.3
    assert 0.09 < kinds["code"] / n < 0.16 and 0.08 < kinds["eval"] / n < 0.14
    assert 0.03 < kinds["chat"] / n < 0.1
    assert 55 <= len(full.steps) <= 65 and 4.5 < full.times[-1] / 3600 < 5.5


def test_size_at_scale_one_and_scaled_down():
    check_size(rl_rollout, (400_000, 600_000), (82_000, 112_000), (0.16, 0.23), 0.35)


def test_the_kept_variant_reuses_blocks_across_weight_updates(run):
    """rl_rollout_kept: the same requests with the weights version out of the key, so a
    request's ids are those of the same segments under any version, and the eval suite's
    runs and a prompt's epochs share their blocks."""
    assert SHAPES["rl_rollout_kept"] is rl_rollout_kept
    kept = generate(1, 0.25, flush=False)
    assert kept.meta == run.meta and [len(r) for r in kept.trace] == [len(r) for r in run.trace]
    first = {}
    for i, m in enumerate(kept.meta):
        key = tuple(m[5])
        assert first.setdefault(key, kept.trace[i]) == kept.trace[i]
    runs = by_kind(kept, "eval", lambda m: m[4])
    a, b = (runs[v] for v in sorted(runs)[:2])
    assert [kept.trace[i] for i in a] == [kept.trace[i] for i in b]
    firsts = [i for i, m in enumerate(kept.meta) if m[0] == "rollout" and m[2] == m[3] == 0]
    by_prompt = by_kind(kept, "rollout", lambda m: m[1])
    back = [p for p, idx in by_prompt.items() if len({kept.meta[i][4] for i in idx}) > 1]
    assert back and firsts
    for p in back:
        idx = [i for i in by_prompt[p] if kept.meta[i][3] == 0]
        assert len({tuple(kept.trace[i]) for i in idx}) == 1
    assert rl_rollout_kept(1, 0.05) == generate(1, 0.05, flush=False).trace
