"""bench/heldout_rollout.py: the held-out shape prompt_rollout has the properties its docstring
names (bench.heldout replays it as one of SHAPES)."""

from __future__ import annotations

import os
from collections import Counter

import pytest

from bench.heldout import SHAPES
from bench.heldout_rollout import INSTRUCTION, generate, prompt_rollout


@pytest.fixture(scope="module")
def run():
    return generate(1, 0.5)


def _heads(trace, meta, prompts):
    """(product, version) -> the set of id tuples its turns start with (prompt length)."""
    heads: dict[tuple[int, int], set] = {}
    for r, (kind, _, p, v) in zip(trace, meta):
        if kind == "turn":
            heads.setdefault((p, v), set()).add(tuple(r[:len(prompts[p][v])]))
    return heads


def test_registered_deterministic_and_seeded():
    assert SHAPES["prompt_rollout"] is prompt_rollout
    assert prompt_rollout(1, 0.1) == prompt_rollout(1, 0.1) != prompt_rollout(2, 0.1)
    assert generate(3, 0.1)[0] == prompt_rollout(3, 0.1)


def test_a_prompt_version_is_shared_by_its_products_requests_while_live(run):
    trace, meta, prompts, plans = run
    heads = _heads(trace, meta, prompts)
    assert all(len(h) == 1 for h in heads.values())  # one id chain per version
    assert len(heads) > 6  # versions past the first were served
    products = {p: set() for p in range(6)}
    for (p, _), (h,) in heads.items():
        products[p].update(h)
    assert all(not products[a] & products[b] for a in products for b in products if a < b)
    for i, (kind, _, p, v) in enumerate(meta):
        if kind == "turn":  # version v is live from its rollout's start to the next's end
            assert (plans[p][v - 1][0] if v else 0) <= i
            assert v == len(plans[p]) or i < plans[p][v][1]


def test_old_and_new_version_overlap_then_the_old_one_stops(run):
    trace, meta, prompts, plans = run
    heads = _heads(trace, meta, prompts)
    ended = 0
    for p, plan in enumerate(plans):
        for v, (start, end) in enumerate(plan):
            window = {m[3] for m in meta[start:end] if m[0] == "turn" and m[2] == p}
            assert window <= {v, v + 1}
            if end >= len(trace) or (p, v) not in heads:
                continue
            ended += 1
            assert v in window  # the old version is still live during the rollout
            shared = len(os.path.commonprefix([prompts[p][v], prompts[p][v + 1]]))
            (old,) = heads[p, v]
            gone = set(old[shared:])
            assert gone and any(gone & set(r) for r in trace[:end])
            assert not any(gone & set(r) for r in trace[end:])
    assert ended >= 4
    assert any(len({m[3] for m in meta[a:b] if m[0] == "turn" and m[2] == p}) == 2
               for p, plan in enumerate(plans) for a, b in plan)  # both at once


def test_a_returning_turn_resends_the_previous_request(run):
    trace, meta, prompts, _ = run
    last: dict[int, int] = {}
    kept = moved = 0
    for i, (kind, c, _, v) in enumerate(meta):
        if kind != "turn":
            continue
        if c in last:
            prev = last[c]
            assert i - prev >= 1
            if meta[prev][3] == v:
                kept += 1
                assert trace[i][:len(trace[prev])] == trace[prev]
                assert 2 <= len(trace[i]) - len(trace[prev]) <= 16
            else:  # re-rendered on a new version: the history is new content
                moved += 1
                head = len(os.path.commonprefix([trace[i], trace[prev]]))
                assert head < len(prompts[meta[prev][2]][meta[prev][3]])
                assert not set(trace[i][head:]) & set(trace[prev])
        last[c] = i
    assert kept > 0.6 * len(trace) and moved > 10
    turns = Counter(m[1] for m in meta if m[0] == "turn")
    assert 0.3 < sum(n == 1 for n in turns.values()) / len(turns) < 0.6  # never return


def test_summaries_are_fresh_content_after_a_shared_instruction(run):
    trace, meta, _, _ = run
    scans = [r for r, m in zip(trace, meta) if m[0] == "scan"]
    assert 0.02 * len(trace) < len(scans) < 0.15 * len(trace)
    assert len({tuple(r[:INSTRUCTION]) for r in scans}) == 1
    assert all(50 <= len(r) - INSTRUCTION <= 300 for r in scans)
    seen = Counter(h for r in trace for h in set(r))
    assert all(seen[h] == 1 for r in scans for h in r[INSTRUCTION:])


def test_size_at_scale_one_and_scaled_down():
    full = prompt_rollout(1)
    assert len(full) == 9000
    distinct = len({h for r in full for h in r})
    assert 150_000 < distinct < 300_000 and distinct > 2 * 16000
    assert 800_000 < sum(map(len, full)) < 1_600_000
    small = prompt_rollout(1, 0.25)
    assert len(small) == 2250
    assert len({h for r in small for h in r}) < 0.35 * distinct
