"""bench/heldout_support.py: the held-out shape support_desk has the properties its docstring
names (bench.heldout replays it as one of SHAPES)."""

from __future__ import annotations

import os
from collections import Counter, defaultdict

import pytest

from bench.heldout import SHAPES
from bench.heldout_fewshot import BLOCK
from bench.heldout_support import BATCH_SHARE, generate, support_desk
from tests.bench.shape_sizes import check_size


@pytest.fixture(scope="module")
def run():
    return generate(1, 0.3)


def _common(a, b):
    return len(os.path.commonprefix([a, b]))


def _live(run):
    """ticket -> the indices of its live requests (every kind but summaries), in order."""
    out = defaultdict(list)
    for i, m in enumerate(run.meta):
        if m[0] != "summary":
            out[m[2]].append(i)
    return out


def test_registered_deterministic_and_seeded():
    assert SHAPES["support_desk"] is support_desk
    assert support_desk(1, 0.05) == support_desk(1, 0.05) != support_desk(2, 0.05)
    assert generate(3, 0.05).trace == support_desk(3, 0.05)
    for seed, scale in ((4, 0.05), (1, 0.02), (2, 0.02)):  # tiny scales still have every part
        small = generate(seed, scale)
        assert len(small.trace) == int(9000 * scale) and all(small.trace)
        assert {m[0] for m in small.meta} == {"turn", "handoff", "reopen", "summary"}
        assert small.attachments and len(small.nights) == 3


def test_a_tenants_requests_share_its_persona_prompt(run):
    heads = {}
    for r, m in zip(run.trace, run.meta):
        tenant = run.tenants[m[1]]
        prompt = tenant.summarize if m[0] == "summary" else tenant.prompts[m[3]]
        k = prompt[1] // BLOCK
        assert r[:k] == heads.setdefault((m[1], m[3]), r[:k])
    assert len(heads) == 6 * 4  # every tenant's three personas and its summary job
    firsts = [h[0] for h in heads.values()]
    assert len(set(firsts)) == len(firsts)  # another tenant or persona shares nothing


def test_a_tickets_next_turn_resends_its_previous_request(run):
    sizes, gaps = Counter(), []
    for idx in _live(run).values():
        assert run.meta[idx[0]][0] == "turn" and run.meta[idx[0]][2] == idx[0]
        for i, j in zip(idx, idx[1:]):
            if run.meta[j][0] != "handoff":
                assert run.trace[j][:len(run.trace[i])] == run.trace[i]
                assert len(run.trace[j]) > len(run.trace[i])
            if run.meta[j][0] != "reopen":
                gaps.append(j - i)
        sizes[len(idx)] += 1
    total = sum(sizes.values())
    assert 0.25 < sizes[1] / total < 0.45 and max(sizes) >= 6
    assert sorted(gaps)[len(gaps) // 2] < 30  # minutes apart


def test_a_reopened_ticket_resends_its_history_long_after_its_last_turn(run):
    live, size = _live(run), len(run.trace)
    reopened = 0
    for j, m in enumerate(run.meta):
        if m[0] == "reopen":
            idx = live[m[2]]
            i = idx[idx.index(j) - 1]
            assert run.meta[i][0] != "reopen" and j - i > 0.07 * size
            assert run.trace[j][:len(run.trace[i])] == run.trace[i]
            reopened += 1
    assert reopened > 20


def _start(segments, segment):
    """The block in which ``segment`` starts within ``segments``."""
    at = 0
    for s in segments:
        if s == segment:
            return at // BLOCK
        at += s[1]
    raise AssertionError(segment)


def test_an_attachments_blocks_reappear_in_later_turns_of_its_ticket_only(run):
    where = defaultdict(set)
    for i, r in enumerate(run.trace):
        for h in r:
            where[h].add(i)
    live = _live(run)
    followed = 0
    for i, t, seg in run.attachments:
        ids = run.trace[i][_start(run.meta[i][4], seg):]
        assert ids and all(min(where[h]) == i for h in ids)  # new content from there on
        for j in set().union(*(where[h] for h in ids)):
            assert run.meta[j][0] != "summary" and run.meta[j][2] == t
            assert run.meta[j][3] == run.meta[i][3]  # not behind a specialist's prompt
        idx = live[t]
        later = idx[idx.index(i) + 1:]
        if later and run.meta[later[0]][0] != "handoff":
            assert set(ids) <= set(run.trace[later[0]])
            followed += 1
    assert followed > 40


def test_a_handoff_resends_the_history_behind_a_specialists_prompt(run):
    live = _live(run)
    handoffs = 0
    for j, m in enumerate(run.meta):
        if m[0] != "handoff":
            continue
        idx = live[m[2]]
        earlier = idx[:idx.index(j)]
        assert earlier and m[3] > 0 and all(run.meta[i][3] == 0 for i in earlier)
        assert not set(run.trace[j]) & set().union(*(run.trace[i] for i in earlier))
        previous = run.meta[earlier[-1]][4]
        assert m[4][1:len(previous)] == previous[1:]  # chunks and history, as new ids
        later = idx[idx.index(j) + 1:]
        assert all(run.meta[i][3] == m[3] for i in later)
        handoffs += 1
    assert handoffs > 40


def test_an_incidents_chunks_are_retrieved_while_it_lasts_only(run):
    firsts = [(i, set(m[4])) for i, m in enumerate(run.meta) if m[2] == i]
    during = 0
    for tenant in run.tenants:
        for start, end, first, last in tenant.incidents:
            chunks = set(tenant.kb[first:last])
            hits = [i for i, segments in firsts if segments & chunks]
            assert all(start <= i < end for i in hits)
            during += len(hits)
        if tenant.launch:
            end = tenant.incidents[0][2]
            launched = set(tenant.kb[tenant.launch[1]:end])
            hits = [i for i, segments in firsts if segments & launched]
            assert hits and min(hits) >= tenant.launch[0]
    assert during > 30


def test_nightly_summaries_come_in_bursts_of_one_tenant_after_another(run):
    nights = run.nights
    assert len(nights) == 3 and all(b - a > 0.3 * len(run.trace) for a, b in zip(nights,
                                                                              nights[1:]))
    summaries = [i for i, m in enumerate(run.meta) if m[0] == "summary"]
    assert summaries[0] == nights[0] and 0.15 < len(summaries) / len(run.trace) < 0.35
    for night, nxt in zip(nights, [*nights[1:], len(run.trace)]):
        these = [i for i in summaries if night <= i < nxt]
        span = these[-1] - night + 1
        assert len(these) > 0.75 * span and span < 0.15 * len(run.trace)  # one dense burst
        tenants = [run.meta[i][1] for i in these]
        runs = [a for a, b in zip(tenants, tenants[1:] + [None]) if a != b]
        assert len(runs) == len(set(runs)) == 6  # each tenant's job runs once, in one piece
    assert BATCH_SHARE >= 0.75


def test_every_ticket_closed_before_a_night_is_summarized_that_night_once(run):
    live, nights = _live(run), run.nights
    summaries = defaultdict(list)
    for i, m in enumerate(run.meta):
        if m[0] == "summary":
            summaries[m[2]].append(i)
    checked = 0
    for last, night, nxt in zip([-1, *nights], nights, nights[1:]):
        due = {t for n, t in run.closes if last <= n < night  # closed and not open at night
               if not any(n < i < night for i in live[t])}
        done = {t for t, idx in summaries.items() for i in idx if night <= i < nxt}
        assert due == done
        assert sum(night <= i < nxt for idx in summaries.values() for i in idx) == len(due)
        checked += len(due)
    assert checked > 300


def test_size_at_scale_one_and_scaled_down():
    check_size(support_desk, (600_000, 900_000), (200_000, 290_000), (0.25, 0.40), 0.35)
