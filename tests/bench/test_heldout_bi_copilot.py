"""bench/heldout_bi_copilot.py: the held-out shape bi_copilot has the properties its docstring
names (bench.heldout replays it as one of SHAPES)."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from bench import heldout_bi_parts as parts
from bench.heldout_bi_copilot import KINDS, bi_copilot, generate
from bench.heldout_bi_sim import REPORT_AT
from bench.heldout_fewshot import BLOCK
from tests.bench.trace_parts import (check_full_blocks, common, registered_small_runs,
                                     shared_tokens, tokens)

HOUR = 3600.0


@pytest.fixture(scope="module")
def run():
    return generate(1, 0.25)


def _prefix(r, t, team):
    tm = r.teams[team]
    return [r.heads["system"], r.dialects[tm.warehouse], tm.glossary_at(t), *tm.schema(t)]


def _analyst(r):
    """(request, session) of every analyst request."""
    return [(i, r.sessions[m[1]]) for i, m in enumerate(r.meta) if m[0] == "analyst"]


def test_registered_deterministic_and_seeded():
    runs = registered_small_runs("bi_copilot", bi_copilot, generate)
    kinds = [{m[0] for m in small.meta} for small in runs]
    assert all(k >= {"analyst", "dashboard", "report", "slack"} for k in kinds)
    assert set().union(*kinds) == set(KINDS)
    assert all(small.times == sorted(small.times) for small in runs)


def test_block_ids_are_the_full_blocks_of_the_segments(run):
    check_full_blocks(run)
    for i, j in itertools.pairwise(range(0, len(run.trace), 7)):
        a, b = run.meta[i][3], run.meta[j][3]
        assert common(run.trace[i], run.trace[j]) == shared_tokens(a, b) // BLOCK


def test_analysts_of_a_team_share_its_schema_prompt(run):
    shared = Counter()
    firsts = {}
    for i, s in _analyst(run):
        head = _prefix(run, run.times[i], s.team)
        assert run.meta[i][3][:len(head)] == head
        key = (s.team, tuple(head))
        if key in firsts and run.sessions.index(s) != firsts[key][1]:
            assert common(run.trace[i], run.trace[firsts[key][0]]) >= tokens(head) // BLOCK
            shared[s.team] += 1
        firsts.setdefault(key, (i, run.sessions.index(s)))
    assert sum(shared.values()) > 200 and len(shared) >= 3


def test_a_migration_makes_the_schemas_later_blocks_new(run):
    """A request after a migration shares the prompt only up to the first changed table (or
    the glossary); its first block from there on was never sent before."""
    seen: set[int] = set()
    last: dict[int, int] = {}
    changed = 0
    for i, m in enumerate(run.meta):
        if m[0] == "analyst":
            team = run.sessions[m[1]].team
            j = last.get(team)
            if j is not None and any(run.times[j] < g.time <= run.times[i]
                                     for g in run.teams[team].migrations):
                before, now = _prefix(run, run.times[j], team), _prefix(run, run.times[i], team)
                assert before != now
                k = common(run.trace[i], run.trace[j])
                assert k == shared_tokens(before, now) // BLOCK < tokens(now) // BLOCK
                assert run.trace[i][k] not in seen
                changed += 1
            last[team] = i
        seen.update(run.trace[i])
    assert changed >= 5


def test_migrations_change_tables_and_document_them(run):
    assert len(run.migrations) >= 5
    docs = [(i, m) for i, m in enumerate(run.meta) if m[0] == "docs"]
    for i, (_, key, k, segs) in docs:
        mig = run.migrations[key]
        team = run.teams[mig.team]
        tables = mig.changed + ([mig.added] if mig.added is not None else [])
        assert run.times[i] > mig.time
        assert segs[2] in [v for t, v in team.tables[tables[k]].versions if t == mig.time]
        hour = parts.local_hour(mig.time, team.tz)
        assert 1 <= hour < 4 or 10 <= hour < 17
    assert len(docs) >= len(run.migrations)


def test_sessions_grow_retry_errors_and_come_back(run):
    fixes = results = returns = 0
    for s in run.sessions:
        for (a, i), (b, j) in itertools.pairwise(zip(s.steps, s.sent)):
            if not any(run.times[i] < g.time <= run.times[j]
                       for g in run.teams[s.team].migrations):
                assert common(run.trace[i], run.trace[j]) == len(run.trace[i])
            if b == "fix":
                assert run.times[j] - run.times[i] < 60
                fixes += 1
            results += b == "results"
        for k in s.sittings[1:]:
            gap = run.times[s.sent[k]] - run.times[s.sent[k - 1]]
            assert gap >= 20 * 60
            returns += 1
    assert fixes > 30 and results > 30 and returns > 10
    assert any(run.times[s.sent[k]] - run.times[s.sent[k - 1]] > 12 * HOUR
               for s in run.sessions for k in s.sittings[1:])


def test_analyst_sessions_start_in_office_hours(run):
    starts = [(run.times[s.sent[0]], run.teams[s.team].tz) for s in run.sessions]
    day = sum(8 <= parts.local_hour(t, tz) < 18 for t, tz in starts)
    assert day > 0.8 * len(starts)


def test_dashboards_refresh_on_schedule_with_fresh_results(run):
    runs = 0
    for k, d in enumerate(run.dashboards):
        tz = run.teams[d.team].tz
        for sent in d.runs:
            for a, b in itertools.pairwise(sent):
                head = run.meta[a][3][:3]
                assert run.meta[b][3][:3] == head and run.meta[b][1:3] == (k, run.meta[a][2] + 1)
                if run.times[a] > 0:
                    assert common(run.trace[a], run.trace[b]) >= tokens(head) // BLOCK
            if d.every == "hourly" and sent:
                assert 7 <= parts.local_hour(run.times[sent[0]], tz) < 20.1
            runs += bool(sent)
        full = [r for r in d.runs if len(r) == len(d.tiles)]
        for x, y in itertools.pairwise(full):
            assert run.meta[x[0]][3][3] == run.meta[y[0]][3][3]  # the tile's SQL
            assert run.meta[x[0]][3][4] != run.meta[y[0]][3][4]  # a fresh result
    assert runs > 30


def test_the_nightly_report_walks_the_teams_in_order(run):
    assert len(run.nights) >= 3
    for n, night in enumerate(run.nights):
        assert night.start == (REPORT_AT + 24 * n) * HOUR
        teams = [team for team, _ in night.requests]
        assert teams == sorted(teams)
        for (a, i), (b, j) in itertools.pairwise(zip(night.requests, night.sent)):
            assert run.times[j] > run.times[i]
            if a[0] == b[0]:
                segs = run.meta[i][3]
                assert common(run.trace[i], run.trace[j]) >= tokens(segs[:-2]) // BLOCK


def test_slack_faq_repeats_and_pastes_are_one_off(run):
    prompts = Counter(tuple(r) for i, r in enumerate(run.trace) if run.meta[i][0] == "slack")
    assert sum(n > 1 for n in prompts.values()) >= 5
    seen = Counter(seg for m in run.meta for seg in set(m[3]))
    for i in run.pastes:
        body = run.meta[i][3][2]
        assert 3000 <= body[1] <= 30000 and seen[body] == 1


def test_requests_mix_as_documented(run):
    kinds = Counter(m[0] for m in run.meta)
    n = len(run.trace)
    assert 0.35 < kinds["analyst"] / n < 0.7 and 0.15 < kinds["dashboard"] / n < 0.45
    assert 0.03 < kinds["report"] / n < 0.12 and 0.07 < kinds["slack"] / n < 0.2
    assert 0.004 < kinds["docs"] / n < 0.03 and 0 < kinds["paste"] / n < 0.01
