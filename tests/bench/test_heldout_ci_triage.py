"""bench/heldout_ci_triage.py: the held-out shape ci_triage has the properties its docstring
names. Structure only: no policy, no hit rate."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from bench.heldout import SHAPES
from bench.heldout_ci_desk import Desk
from bench.heldout_ci_jobs import NIGHTLY_FINISH, WEEKLY
from bench.heldout_ci_parts import DAY, END, HOUR, MINUTE, WINDOW
from bench.heldout_ci_triage import KINDS, ci_triage, generate
from bench.heldout_fewshot import BLOCK
from tests.bench.trace_parts import (SmallRuns, blocks_by_kind, check_chains, common, extends,
                                     of_kind, tokens)

SCALE = 0.2
SEEDS = (1, 2, 3, 4)

SMALL = SmallRuns(generate, SCALE)  # each seed's run and first_seen, made once
_small, _first = SMALL.run, SMALL.first


def _with(feature):
    """The seeds (of SEEDS) whose world has ``feature`` ("storm" or "guide_change")."""
    return [s for s in SEEDS if getattr(_small(s).state, feature) is not None]


def _new_from(r, first, i, head):
    """Whether every block of request ``i`` past the tokens of ``head`` is first seen there."""
    return all(first[b] == i for b in r.trace[i][tokens(head) // BLOCK:])


def test_deterministic_and_seeded():
    """Same seed, same trace; seeds differ in structure (monorepo or many repositories, a
    storm or none, a guide change or none), not just in noise; requests are non-empty and in
    time order, every kind present."""
    assert SHAPES["ci_triage"] is ci_triage  # registered in bench.heldout
    assert ci_triage(1, 0.05) == ci_triage(1, 0.05) != ci_triage(2, 0.05)
    assert generate(3, 0.05).trace == ci_triage(3, 0.05)
    states = [_small(s).state for s in SEEDS]
    assert {s.layout for s in states} == {"mono", "multi"}
    assert 0 < len(_with("storm")) < len(SEEDS) and 0 < len(_with("guide_change")) < len(SEEDS)
    for seed in SEEDS:
        r = _small(seed)
        assert r.times == sorted(r.times) and all(r.trace)
        assert {m[0] for m in r.meta} == set(KINDS) - ({"storm"} if not r.state.storm else set())
        assert isinstance(r.state, Desk)


@pytest.mark.parametrize("seed", SEEDS)
def test_sizes_and_span(seed):
    """At scale 0.2: 200K..600K blocks over two days, triage the largest kind; every walk
    finished."""
    r = _small(seed)
    blocks = blocks_by_kind(r)
    assert 200_000 <= sum(blocks.values()) <= 600_000
    assert max(blocks, key=blocks.__getitem__) == "triage"
    assert 44 * HOUR < r.times[-1] < END and r.times[0] < 4 * HOUR
    assert all(s.pos == len(s.items) == len(s.sent) for s in r.state.streams)


def test_prefix_chains_are_well_formed():
    """A block id always follows the same parent; a request is the full blocks of its
    segments, the same segments always the same ids; two requests share exactly the blocks
    of the segments they start with."""
    check_chains(_small(1), 3)
    check_chains(_small(2), 5)


@pytest.mark.parametrize("seed", [1, 2])
def test_triage_is_guide_log_diff(seed):
    """A triage is the system prompt, the repository's guide as it stands, the job's log
    tail, the diff under test, the cue; every block from the log on is new, and a
    repository's triages share the head."""
    r, first = _small(seed), _first(seed)
    s = r.state
    for i in of_kind(r, "triage"):
        _, p, n, segs = r.meta[i]
        repo = s.repos[s.prs[p].repo]
        head = [s.system["triage"], *repo.guide.at(r.times[i])]
        assert segs == [*head, *s.failures[n].log, segs[-2], s.cue["triage"]]
        assert segs[-2] in s.prs[p].diffs and s.failures[n].sent == i
        assert _new_from(r, first, i, head)
    heads = {}
    for i in of_kind(r, "triage"):
        key = (s.prs[r.meta[i][1]].repo, r.meta[i][3][1])
        k = tokens(r.meta[i][3][:2]) // BLOCK
        assert r.trace[heads.setdefault(key, i)][:k] == r.trace[i][:k]


def test_a_guide_change_makes_later_triage_blocks_new():
    """Where the guide changes, triages after the change share only the system prompt with
    those before, and the first triage after it has every block past the system prompt new."""
    for seed in _with("guide_change"):
        r, first = _small(seed), _first(seed)
        s = r.state
        done = max(v[0] for repo in s.repos for v in repo.guide.versions)
        before = [i for i in of_kind(r, "triage") if r.times[i] < s.guide_change]
        after = [i for i in of_kind(r, "triage") if r.times[i] >= done]
        assert before and after
        cut = tokens([s.system["triage"]]) // BLOCK
        for i, j in itertools.product(before[-20:], after[:20]):
            assert common(r.trace[i], r.trace[j]) == cut
        repos = {s.prs[r.meta[j][1]].repo for j in after}
        firsts = [min(j for j in after if s.prs[r.meta[j][1]].repo == q) for q in repos]
        assert all(_new_from(r, first, j, [s.system["triage"]]) for j in firsts)


def test_a_broken_main_is_a_storm_of_look_alike_failures():
    """While main is broken every push of the repository fails with the same log tail: storm
    triages share the head through it, all inside the storm, far denser than its triages."""
    for seed in _with("storm"):
        r = _small(seed)
        s, storm = r.state, r.state.storm
        idx = of_kind(r, "storm")
        assert idx and all(storm.start <= r.times[i] < storm.end + 50 * MINUTE for i in idx)
        for i in idx:
            segs = r.meta[i][3]
            assert s.prs[r.meta[i][1]].repo == storm.repo and segs[2] == storm.log
        for i, j in itertools.pairwise(idx):
            if r.meta[i][3][1] == r.meta[j][3][1]:
                assert common(r.trace[i], r.trace[j]) >= tokens(r.meta[i][3][:3]) // BLOCK
        span = (storm.end - storm.start) / HOUR + 1
        usual = [i for i in of_kind(r, "triage") if s.prs[r.meta[i][1]].repo == storm.repo]
        assert len(idx) / span > 2 * len(usual) / 48


def test_followup_chats_grow_on_the_triage():
    """A follow-up chat's first turn re-sends its failure's triage prompt exactly (then the
    answer); each later turn extends the last one exactly."""
    grew = 0
    for seed in (1, 2):
        r = _small(seed)
        s = r.state
        for chat in s.chats:
            f = s.failures[chat.failure]
            first = chat.sent[0]
            assert r.trace[first][:len(r.trace[f.sent])] == r.trace[f.sent]
            assert r.times[first] > r.times[f.sent]
            grew += extends(r, chat.sent, lambda i, j: True)
    assert grew >= 30


@pytest.mark.parametrize("seed", [1, 2])
def test_flaky_classification_reads_the_history_as_it_grows(seed):
    """The classifier sends the test's header, 30-day summary and newest run records; a later
    look at the same test re-sends the earlier records (while the window has not slid)."""
    r = _small(seed)
    s = r.state
    extended = 0
    by_test: dict[int, list[int]] = {}
    for t, i in s.flaky:
        test = s.tests[t]
        segs = r.meta[i][3]
        assert segs[:3] == [s.desk_system["flaky"], test.header, test.past]
        assert set(segs[3:-1]) <= set(test.records) and len(segs) - 4 <= WINDOW
        by_test.setdefault(t, []).append(i)
    for t, sent in by_test.items():
        for i, j in itertools.pairwise(sent):
            a, b = r.meta[i][3][:-1], r.meta[j][3][:-1]
            if len(b) - 3 < WINDOW:
                assert b[:len(a)] == a and common(r.trace[i], r.trace[j]) >= tokens(a) // BLOCK
                extended += 1
    assert extended >= 3


@pytest.mark.parametrize("seed", [1, 2])
def test_owner_routing_reads_the_ownership_file(seed):
    """The router sends the ownership file as it stands and the paths (new blocks)."""
    r, first = _small(seed), _first(seed)
    s = r.state
    for n, i in s.routed:
        _, q, _, segs = r.meta[i]
        head = [s.desk_system["owners"], *s.repos[q].owners.at(r.times[i])]
        assert segs[:-2] == head and _new_from(r, first, i, head)


@pytest.mark.parametrize("seed", [1, 2])
def test_nightly_runs_fail_in_bursts_over_the_configs(seed):
    """A branch's run starts at its fixed hour; its failures land within NIGHTLY_FINISH
    minutes, each the system prompt and the config files as of the run, then a new log; a
    backport makes the blocks from the changed file on new."""
    r, first = _small(seed), _first(seed)
    s = r.state
    for b, branch in enumerate(s.branches):
        for run, (start, sent) in enumerate(branch.runs):
            assert any(abs(start - d * DAY - h * HOUR) < 1 for d in (0, 1) for h in branch.hours)
            head = [s.system["nightly"], *branch.configs.at(start)]
            for i in sent:
                lag = (r.times[i] - start) / MINUTE
                assert NIGHTLY_FINISH[0] <= lag <= NIGHTLY_FINISH[1]
                assert r.meta[i][:3] == ("nightly", b, run) and r.meta[i][3][:-2] == head
                assert _new_from(r, first, i, head)
            assert sent
        for (t0, a), (t1, c) in itertools.pairwise(branch.runs):
            x, y = branch.configs.at(t0), branch.configs.at(t1)
            if a and c and x != y:
                same = next(k for k, (u, v) in enumerate(zip(x, y)) if u != v)
                cut = tokens([s.system["nightly"], *x[:same]]) // BLOCK
                assert common(r.trace[a[0]], r.trace[c[0]]) == cut


@pytest.mark.parametrize("seed", [1, 2])
def test_walks_bisect_report_and_bump(seed):
    """A bisect walks main's commits in order under one head (system prompt, the log); the
    weekly report walks the flakiest tests at its fixed hour; a bump run shares each release's
    notes across its manifests, and a bumped manifest is read as its new version."""
    r = _small(seed)
    s = r.state
    kinds = Counter(st.kind for st in s.streams)
    assert kinds["weekly"] == 1 and kinds["depbump"] == 2 and kinds["bisect"] >= 2
    for st in s.streams:
        for k, i in enumerate(st.sent):
            assert r.meta[i][:3] == (st.kind, st.index, k)
            assert r.meta[i][3][:len(st.head)] == st.head
        for i, j in itertools.pairwise(st.sent):
            assert r.times[i] < r.times[j] and common(r.trace[i], r.trace[j]) >= (
                tokens(st.head) // BLOCK)
        if st.kind == "bisect":
            commits = [d for _, d in s.repos[st.owner].commits]
            at = commits.index(st.items[0])
            assert commits[at:at + len(st.items)] == st.items
        if st.kind == "weekly":
            assert abs(r.times[st.sent[0]] - WEEKLY[0] * DAY - WEEKLY[1] * HOUR) < 1
            assert [s.tests[t].repo for t in st.items] == sorted(s.tests[t].repo
                                                                 for t in st.items)
        if st.kind == "depbump":
            notes = [r.meta[i][3][1] for i in st.sent]
            assert notes == [it[2] for it in st.items]
    read = Counter(r.meta[i][3][2] for i in of_kind(r, "depbump"))
    assert set(read.values()) == {1}


def test_oneoff_questions_are_new_past_the_system_prompt():
    """A one-off question: the system prompt, then pasted content and a question, all new."""
    r, first = _small(1), _first(1)
    s = r.state
    for i in of_kind(r, "oneoff"):
        assert r.meta[i][3][0] == s.desk_system["oneoff"]
        assert _new_from(r, first, i, r.meta[i][3][:1])
