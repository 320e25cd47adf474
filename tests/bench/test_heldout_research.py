"""bench/heldout_research.py: the held-out shape deep_research has the properties its docstring
names (bench.heldout replays it as one of SHAPES)."""

from __future__ import annotations

import itertools
import statistics
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench import heldout_research as shape
from bench import heldout_research_parts as parts
from bench.heldout_fewshot import BLOCK
from bench.heldout_research import KINDS, deep_research, generate
from tests.bench.shape_sizes import check_size
from tests.bench.trace_parts import (by_kind, check_full_blocks, common, registered_small_runs,
                                     shared_tokens, tokens)

HEAD = {"answer": "answer", "related": "related", "plan": "orchestrator", "agent": "agent",
        "synth": "orchestrator", "cite": "cite", "revise": "orchestrator",
        "monitor": "monitor", "pdf": "answer"}


@pytest.fixture(scope="module")
def run():
    return generate(1, 0.25)


@pytest.fixture(scope="module")
def smalls():
    """Scale-0.05 runs of seeds 1..8: research sessions keep their size, so these have many."""
    return [generate(seed, 0.05) for seed in range(1, 9)]


def _day(r, i):
    return parts.local_day(r.times[i])


def _same_day(r, i, j):
    return _day(r, i) == _day(r, j)


def test_registered_deterministic_and_seeded():
    runs = registered_small_runs("deep_research", deep_research, generate)
    for small in runs:  # every part but revisions (35 % of sessions) in a small trace
        assert {m[0] for m in small.meta} >= set(KINDS) - {"revise"}
    assert any(m[0] == "revise" for small in runs for m in small.meta)


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(1, 100_000), scale=st.sampled_from([0.01, 0.02, 0.03]))
def test_any_seed_and_scale_starts_every_prompt_with_its_head_and_the_date(seed, scale):
    r = generate(seed, scale)
    assert len(r.trace) == int(9000 * scale) and all(r.trace) and r.times == sorted(r.times)
    firsts = {}
    for i, m in enumerate(r.meta):
        head = r.heads[HEAD[m[0]]]
        assert m[3][:2] == [head, r.dates[_day(r, i)]]
        assert firsts.setdefault(head, r.trace[i][:head[1] // BLOCK]) == \
            r.trace[i][:head[1] // BLOCK]


def test_block_ids_are_the_full_blocks_of_the_segments(run):
    check_full_blocks(run)


def test_the_date_line_makes_later_blocks_new_at_midnight(run):
    answers = [i for i, m in enumerate(run.meta) if m[0] == "answer"]
    head = run.heads["answer"][1]
    crossed = 0
    for i, j in itertools.pairwise(answers):
        if _same_day(run, i, j):
            assert common(run.trace[i], run.trace[j]) >= (head + run.meta[i][3][1][1]) // BLOCK
        else:
            assert common(run.trace[i], run.trace[j]) == head // BLOCK
            crossed += 1
    assert crossed == 1 and 24 * 3600 < run.times[-1] < 40 * 3600


def test_the_day_has_a_rhythm(run):
    hours = Counter(int(parts.local_hour(t)) for t, m in zip(run.times, run.meta)
                    if m[0] == "answer")
    assert sum(hours[h] for h in range(9, 18)) / 9 > 6 * sum(hours[h] for h in range(1, 6)) / 5


def _results(r, t, turn):
    """The search results of thread ``t``'s ``turn``: after the thread so far, before the
    question."""
    i = r.threads[t].sent[turn]
    before = len(r.meta[r.threads[t].sent[turn - 1]][3]) + 1 if turn else 2
    return r.meta[i][3][before:-1]


def test_follow_ups_resend_the_thread(run):
    gaps, multi = [], 0
    for t, th in enumerate(run.threads):
        assert 1 <= len(th.sent) <= th.turns and [run.meta[i][2] for i in th.sent] == \
            list(range(len(th.sent)))
        multi += len(th.sent) > 1
        for turn, (i, j) in enumerate(itertools.pairwise(th.sent), 1):
            a, b = run.meta[i][3], run.meta[j][3]
            assert b[2:len(a)] == a[2:] and len(b) == len(a) + 1 + th.k + 1
            if _same_day(run, i, j):
                assert common(run.trace[i], run.trace[j]) == len(run.trace[i])
            gaps.append(run.times[j] - run.times[i])
            assert len(_results(run, t, turn)) == th.k
    assert 0.2 < multi / len(run.threads) < 0.4
    assert min(gaps) >= 10 and max(gaps) <= 1800 + 1500 / parts.RATE
    assert 60 < statistics.median(gaps) < 240


def test_most_pages_are_seen_once_and_topics_are_zipf(run):
    seen, pages, topics = Counter(), {}, Counter()
    for t, th in enumerate(run.threads):
        for turn in range(len(th.sent)):
            results = _results(run, t, turn)
            seen.update(results)
            pages.setdefault(th.source, set()).update(results)
        if th.source == "topic":
            topics[th.key] += 1
    assert sum(c == 1 for c in seen.values()) > 0.7 * len(seen)
    assert all(seen[p] == 1 for p in pages["tail"])
    assert max(seen.values()) > 20  # a popular topic's top page
    top = topics.most_common()
    assert top[0][1] > 20 and sum(c == 1 for _, c in top) > 0.3 * len(top)


def test_a_news_story_spikes_and_fades_with_the_newest_articles_first(run):
    firsts = Counter()
    for t, th in enumerate(run.threads):
        if th.source != "news":
            continue
        story = run.stories[th.key]
        for turn, i in enumerate(th.sent):
            published = story.pool(run.times[i])
            results = _results(run, t, turn)
            assert all(p in published or p not in story.pool(1e9) for p in results)
            firsts[results[0] == published[0]] += 1
    assert firsts[True] > 0.3 * sum(firsts.values())
    for story in run.stories:
        assert story.threads == sorted(story.threads) and story.threads[0] >= story.birth
        assert all(a[0] >= story.birth for a in story.articles)
    big = [s for s in run.stories if len(s.threads) >= 15]
    assert big
    for s in big:
        early = sum(t < s.birth + 4 * 3600 for t in s.threads)
        assert early > sum(s.birth + 8 * 3600 <= t < s.birth + 12 * 3600 for t in s.threads)


def test_sub_agents_share_the_plan_and_resend_their_tool_history(smalls):
    plans = [parts.local_hour(r.times[s.sent["plan"][0]]) for r in smalls for s in r.sessions]
    assert sum(8 <= h < 19 for h in plans) > 0.7 * len(plans)  # office hours
    for r in smalls:
        for k, s in enumerate(r.sessions):
            plan = r.meta[s.sent["plan"][0]]
            assert plan[3][2:] == [s.question] and s.plan not in plan[3]
            shared = r.heads["agent"][1] + s.plan[1]
            firsts = [r.agents[a].sent[0] for a in s.agents]
            for a in s.agents:
                _check_agent(r, r.agents[a], s)
            for i, j in itertools.pairwise(firsts):
                head = r.meta[i][3][1][1] + shared
                if _same_day(r, i, j):
                    assert common(r.trace[i], r.trace[j]) == head // BLOCK


def _check_agent(r, a, s):
    """Each call re-sends the one before plus a tool call and its result."""
    assert [r.meta[i][2] for i in a.sent] == list(range(len(a.sent)))
    for i, j in itertools.pairwise(a.sent):
        x, y = r.meta[i][3], r.meta[j][3]
        assert x[2:4] == [s.plan, a.question] and y[2:len(x)] == x[2:]
        assert len(y) == len(x) + 2 and r.times[j] > r.times[i]
        if _same_day(r, i, j):
            assert common(r.trace[i], r.trace[j]) == len(r.trace[i])


def test_the_synthesis_resends_the_plan_and_every_finding(smalls):
    fans = Counter()
    for r in smalls:
        for k, s in enumerate(r.sessions):
            if "synth" not in s.sent:
                continue
            i, p = s.sent["synth"][0], s.sent["plan"][0]
            first = [a for a in s.agents if r.agents[a].sent[0] < i]
            fans[len(first)] += 1
            assert r.meta[i][3][2:] == [s.question, s.plan, *(s.findings[a] for a in first)]
            assert r.times[i] > max(r.times[r.agents[a].sent[-1]] for a in first)
            if _same_day(r, p, i):
                assert common(r.trace[p], r.trace[i]) == len(r.trace[p])
    assert set(fans) <= set(range(3, 9)) and len(fans) >= 3


def test_citation_checks_share_the_report(smalls):
    checks = []
    for r in smalls:
        for s in (s for s in r.sessions if "cite" in s.sent):
            idx, synth = s.sent["cite"], r.meta[s.sent["synth"][0]][3]
            report = s.context[len(synth) - 2]
            checks.append(len(idx))
            assert [r.meta[i][2] for i in idx] == list(range(len(idx)))
            assert r.meta[idx[0]][3][2] == report and report[1] >= 1000
            for i, j in itertools.pairwise(idx):
                assert r.meta[j][3][:3] == r.meta[i][3][:3] and r.meta[j][3][3:] != r.meta[i][3][3:]
                assert 0.3 <= r.times[j] - r.times[i] <= 1.5
                if _same_day(r, i, j):
                    assert common(r.trace[i], r.trace[j]) == tokens(r.meta[i][3][:3]) // BLOCK
    assert max(checks) <= 15 and statistics.median(checks) >= 5


def test_users_come_back_hours_later_to_revise(smalls):
    backs, digs = [], 0
    for r in smalls:
        for s in (s for s in r.sessions if "revise" in s.sent):
            synth, first = r.meta[s.sent["synth"][0]][3], s.sent["revise"][0]
            revise = r.meta[first][3]
            assert revise[2:len(synth)] == synth[2:] and len(revise) == len(synth) + 2
            assert revise[len(synth)] == r.meta[s.sent["cite"][0]][3][2]  # the report
            backs.append(r.times[first] - r.times[s.sent["synth"][0]])
            for i, j in itertools.pairwise(s.sent["revise"]):
                assert r.meta[j][3][2:len(r.meta[i][3])] == r.meta[i][3][2:]
                digs += r.times[j] - r.times[i] < 1200  # the dig's sub-agents reported
    assert min(backs) >= 1200 and max(backs) > 3600 and digs >= 1


def _shared_tokens(r, m, k):
    """Tokens run ``k`` of monitor ``m`` shares with the run before: up to the first changed
    page's cut, or every page when none changed (the digest is new each run). A changed page
    keeps the old version's first ``cut`` tokens; an unchanged one is sent as before."""
    mon = r.monitors[m]
    shared = tokens(r.meta[mon.runs[k]][3][:3])
    for old, new, cut in zip(mon.sent[k - 1], mon.sent[k], mon.changes[k]):
        if cut is not None:
            assert shared_tokens(old, new) <= cut < tokens(old) and new[-1] not in old
            return shared + cut
        assert old == new
        shared += tokens(old)
    return shared


def test_a_changed_monitored_page_makes_later_blocks_new(run):
    seen, changed, unchanged = set(), 0, 0
    for i, m in enumerate(run.meta):
        if m[0] == "monitor" and m[2] > 0:
            mon = run.monitors[m[1]]
            prev = mon.runs[m[2] - 1]
            assert run.times[i] - run.times[prev] == pytest.approx(mon.every)
            if _same_day(run, prev, i):
                n = _shared_tokens(run, m[1], m[2]) // BLOCK
                assert common(run.trace[prev], run.trace[i]) == n
                assert not seen & set(run.trace[i][n:])  # from the change on: new content
                any_change = any(c is not None for c in mon.changes[m[2]])
                changed += any_change
                unchanged += not any_change
        seen.update(run.trace[i])
    every = Counter(mon.every for mon in run.monitors)
    assert every[3600.0] >= 2 and every[86400.0] >= 6 and changed >= 10 and unchanged >= 10


def test_pdf_questions_resend_the_document(run):
    more = 0
    for u, idx in by_kind(run, "pdf", lambda m: m[1]).items():
        doc = run.uploads[u].document
        assert 2000 <= doc[1] <= 100000
        for i, j in itertools.pairwise(idx):
            a, b = run.meta[i][3], run.meta[j][3]
            assert a[2] == doc and b[2:len(a)] == a[2:] and len(b) == len(a) + 2
            more += 1
    assert more >= 5 and all(run.meta[i][3].count(run.uploads[run.meta[i][1]].document) == 1
                             for i, m in enumerate(run.meta) if m[0] == "pdf")


def test_requests_mix_as_documented(run):
    kinds = Counter(m[0] for m in run.meta)
    n = len(run.trace)
    assert 0.45 < kinds["answer"] / n < 0.62 and 0.27 < kinds["related"] / n < 0.37
    assert 0.03 < kinds["monitor"] / n < 0.08 and kinds["agent"] >= 3 * kinds["plan"] > 0
    assert shape.RELATED - 0.06 < kinds["related"] / kinds["answer"] < shape.RELATED + 0.06


def test_size_at_scale_one_and_scaled_down():
    check_size(deep_research, (1_400_000, 2_000_000), (540_000, 660_000), (0.29, 0.42), 0.3)
