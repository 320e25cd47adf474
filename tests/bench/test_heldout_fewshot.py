"""bench/heldout_fewshot.py: the held-out shape fewshot_lora has the properties its docstring
names (bench.heldout replays it as one of SHAPES)."""

from __future__ import annotations

import os
from collections import Counter, defaultdict

import pytest

from bench.heldout import SHAPES
from bench.heldout_fewshot import BLOCK, CONCURRENT, MODELS, Blocks, fewshot_lora, generate
from tests.bench.shape_sizes import check_size


@pytest.fixture(scope="module")
def run():
    return generate(1, 0.4)


def _sends(run, kind):
    """key -> the indices of the first sends (not burst copies) of that task / conversation."""
    out = defaultdict(list)
    for i, m in enumerate(run.meta):
        if m[0] == kind and m[3] == i:
            out[m[1]].append(i)
    return out


def _common(a, b):
    return len(os.path.commonprefix([a, b]))


def test_registered_deterministic_and_seeded():
    assert SHAPES["fewshot_lora"] is fewshot_lora
    assert fewshot_lora(1, 0.1) == fewshot_lora(1, 0.1) != fewshot_lora(2, 0.1)
    assert generate(3, 0.1).trace == fewshot_lora(3, 0.1)
    assert all(fewshot_lora(4, 0.02))  # tiny scales still give non-empty requests


def test_blocks_are_full_16_token_blocks_chained_and_salted_by_model():
    blocks = Blocks()
    a = blocks.ids(0, [(1, 10), (2, 30)])  # 40 tokens: 2 full blocks, the rest is dropped
    assert len(a) == 2 and a == blocks.ids(0, [(1, 10), (2, 30)])
    assert blocks.ids(0, [(1, 10), (3, 30)])[:1] != a[:1]  # block 0 straddles both segments
    assert _common(blocks.ids(0, [(1, 16), (3, 30)]), blocks.ids(0, [(1, 16), (2, 30)])) == 1
    assert not set(blocks.ids(1, [(1, 10), (2, 30)])) & set(a)  # another adapter


def test_a_tasks_requests_share_the_instruction_and_diverge_at_the_first_other_shot(run):
    further = 0
    for t, sends in _sends(run, "eval").items():
        task = run.tasks[t]
        head = task.instruction[1] // BLOCK
        assert head >= 1 and len({tuple(run.trace[i][:head]) for i in sends}) == 1
        for i, j in zip(sends, sends[1:]):
            a, b = run.meta[i][4], run.meta[j][4]
            same = len(os.path.commonprefix([a, b]))  # leading shots in common
            tokens = task.instruction[1] + sum(task.pool[s][1] for s in a[:same])
            c = tokens // BLOCK
            assert _common(run.trace[i], run.trace[j]) == c
            assert not set(run.trace[i][c:]) & set(run.trace[j][c:])  # new ids from there on
            further += task.fixed is None and same > 0 and c > head
    assert further > 0  # sampled shots share past the instruction while they agree


def test_fixed_shot_tasks_share_instruction_and_shots_and_others_sample(run):
    kinds = Counter()
    for t, sends in _sends(run, "eval").items():
        task = run.tasks[t]
        shots = {run.meta[i][4] for i in sends}
        assert all(len(s) == task.k for s in shots)
        if task.fixed is None:
            kinds["sampled"] += len(shots) > 1
            continue
        kinds["fixed"] += 1
        assert shots == {task.fixed}
        head = (task.instruction[1] + sum(task.pool[s][1] for s in task.fixed)) // BLOCK
        assert len({tuple(run.trace[i][:head]) for i in sends}) == 1
        assert all(len(run.trace[i]) >= head for i in sends)
    assert kinds["fixed"] >= 3 and kinds["sampled"] >= 3


def test_best_of_n_copies_are_identical_and_come_in_a_short_burst(run):
    bursts = defaultdict(list)
    for i, m in enumerate(run.meta):
        bursts[m[3]].append(i)
    seen = Counter()
    for send, idx in bursts.items():
        assert all(run.trace[i] == run.trace[send] for i in idx)
        assert idx[0] == send and len(idx) <= 16
        assert all(b - a <= 4 for a, b in zip(idx, idx[1:]))
        m = run.meta[send]
        if m[0] == "eval" and send < len(run.trace) - 60:  # not cut off by the trace's end
            assert len(idx) == run.tasks[m[1]].samples
        seen[m[0]] += len(idx) > 1
    assert seen["eval"] > 20 and seen["chat"] > 20
    assert max(t.samples for t in run.tasks) > 8


def test_the_same_text_under_two_models_shares_no_block(run):
    ids = defaultdict(set)
    for r, m in zip(run.trace, run.meta):
        ids[m[2]].update(r)
    assert len(ids) == MODELS
    assert all(not ids[a] & ids[b] for a in ids for b in ids if a < b)
    heads = defaultdict(set)  # (product, model) -> the system prompt's block ids
    for r, m in zip(run.trace, run.meta):
        if m[0] == "chat":
            heads[m[4], m[2]].add(tuple(r[:run.prompts[m[4]][1] // BLOCK]))
    assert all(len(h) == 1 for h in heads.values())  # one prompt chain per model
    assert Counter(p for p, _ in heads)[0] >= 4  # the top product under several models


def test_one_adapter_rises_as_another_fades(run):
    fading, rising, launch, ramp = run.shift
    assert fading != rising and 0.25 <= launch <= 0.45 and launch + ramp <= 0.7
    fifth = len(run.trace) // 5

    def share(part, model):
        chat = [m for m in part if m[0] == "chat"]
        return sum(m[2] == model for m in chat) / len(chat)

    first, last = run.meta[:fifth], run.meta[-fifth:]
    assert share(first, rising) == 0.0 and share(last, rising) > 0.25
    assert share(first, fading) > 0.25 and share(last, fading) < share(first, fading) / 2


def test_a_chat_turn_resends_the_previous_request_of_its_conversation(run):
    convs = defaultdict(list)
    for i, m in enumerate(run.meta):
        if m[0] == "chat":
            convs[m[1]].append(i)
    for idx in convs.values():
        for i, j in zip(idx, idx[1:]):
            if run.meta[i][3] == run.meta[j][3]:
                continue  # a burst copy of the same turn
            assert run.trace[j][:len(run.trace[i])] == run.trace[i]
            assert len(run.trace[j]) > len(run.trace[i])
    turns = Counter(len(set(run.meta[i][3] for i in idx)) for idx in convs.values())
    total = sum(turns.values())
    assert 0.4 < turns[1] / total < 0.75 and max(turns) >= 6  # most are short, a few long


def test_a_finished_task_never_comes_back(run):
    sends = _sends(run, "eval")
    n = len(run.trace)
    finished = 0
    for t, idx in sends.items():
        last = max(i for i, m in enumerate(run.meta) if m[0] == "eval" and m[1] == t)
        head = set(run.trace[idx[0]][:run.tasks[t].instruction[1] // BLOCK])
        assert not any(head & set(r) for r in run.trace[last + 1:])
        finished += last < 0.8 * n
    starts = sorted(idx[0] for idx in sends.values())
    assert finished >= 5 and starts[0] < 0.1 * n and starts[-1] > 0.4 * n
    running = Counter(i for idx in sends.values() for i in range(idx[0], idx[-1] + 1))
    assert max(running.values()) <= CONCURRENT  # a task's questions lie in one run


def test_size_at_scale_one_and_scaled_down():
    check_size(fewshot_lora, (550_000, 950_000), (80_000, 260_000), (0.1, 0.35), 0.4)
