"""bench/heldout_tutoring.py: the held-out shape tutoring has the properties its docstring
names (bench.heldout replays it as one of SHAPES)."""

from __future__ import annotations

import itertools
import statistics
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench import heldout_tutoring_parts as parts
from bench.heldout_fewshot import BLOCK
from bench.heldout_tutoring import KINDS, generate, tutoring
from tests.bench.shape_sizes import check_size
from tests.bench.trace_parts import check_full_blocks, common, registered_small_runs, tokens

STUDENT = ("class", "homework", "reading", "review")
HOUR = 3600.0
MONDAY = parts.clock(4, 0.0, 0.0)  # Monday 00:00 on the clock: the week's unit lines change


@pytest.fixture(scope="module")
def run():
    r = generate(1, 0.25)
    assert r.times[-1] > MONDAY + 12 * HOUR > r.deploy  # spans the weekend and Monday
    return r


def _offset(r, i):
    """The zone of request ``i``'s school."""
    kind, key = r.meta[i][:2]
    if kind == "grade":
        return r.sections[r.assignments[r.jobs[key].assignment].section].offset
    return r.convs[key].offset


def _system(r, i):
    """The segments request ``i`` starts with (see the module docstring)."""
    kind, key, _, segs = r.meta[i]
    t, platform = r.times[i], r.platform[r.times[i] >= r.deploy]
    if kind == "grade":
        a = r.assignments[r.jobs[key].assignment]
        return [r.heads["grader"], a.rubric, a.task]
    if kind == "quick":
        return [*platform, r.heads["quick"]]
    conv = r.convs[key]
    course = r.courses[conv.course]
    system = [course.head, course.units[parts.week(t)]]
    return [r.heads[conv.tool], *system] if kind == "teacher" else [*platform, *system]


def _rest(r, i):
    """Request ``i``'s segments after its system part."""
    return r.meta[i][3][len(_system(r, i)):]


def _sent(r, conv):
    """A conversation's request indices in the trace (not before its start)."""
    return [i for i in conv.sent if i >= 0]


def test_registered_deterministic_and_seeded():
    runs = registered_small_runs("tutoring", tutoring, generate)
    kinds = [{m[0] for m in small.meta} for small in runs]
    assert all(k >= {"quick", "homework", "teacher"} for k in kinds)
    assert set().union(*kinds) == set(KINDS)  # 2 sections each: not every part in every one


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(1, 100_000), scale=st.sampled_from([0.02, 0.03, 0.05]))
def test_any_seed_and_scale_starts_every_prompt_with_its_head(seed, scale):
    r = generate(seed, scale)
    assert len(r.trace) == int(9000 * scale) and all(r.trace)
    assert r.times == sorted(r.times) and r.times[0] >= 0
    firsts = {}
    for i, m in enumerate(r.meta):
        head = _system(r, i)
        assert m[3][:len(head)] == head
        n = tokens(head[:1]) // BLOCK
        assert firsts.setdefault(head[0], r.trace[i][:n]) == r.trace[i][:n]
        if m[0] in STUDENT:
            assert m[3][len(head):][:len(r.convs[m[1]].material)] == r.convs[m[1]].material


def test_block_ids_are_the_full_blocks_of_the_segments(run):
    check_full_blocks(run)


def test_conversations_resend_themselves_turn_by_turn(run):
    for conv in run.convs:
        sent = _sent(run, conv)
        skipped = len(conv.sent) - len(sent)  # turns before the trace's start
        assert [run.meta[i][2] for i in sent] == list(range(skipped, len(conv.sent)))
        for i, j in itertools.pairwise(sent):
            a, b = _rest(run, i), _rest(run, j)  # + the reply, (a pasted text,) the message
            assert b[:len(a)] == a and len(b) - len(a) in (2, 3)
            assert run.times[j] > run.times[i]
            if _system(run, i) == _system(run, j):
                assert common(run.trace[i], run.trace[j]) == len(run.trace[i])


def test_a_class_period_is_a_burst_on_the_teachers_activity(run):
    lessons = [les for les in run.lessons if les.convs and les.end < run.times[-1]
               and run.convs[les.convs[0]].sent[0] >= 0]
    assert len(lessons) >= 5
    for les in lessons:
        sec = run.sections[les.section]
        assert 17 <= len(les.convs) <= 35 and les.end - les.launch <= 48 * 60
        firsts = [run.convs[c].sent[0] for c in les.convs]
        idx = [i for c in les.convs for i in run.convs[c].sent]
        assert all(les.launch < run.times[i] < les.end for i in idx)
        assert statistics.median(run.times[i] - les.launch for i in firsts) < 240
        assert parts.weekday(les.launch, sec.offset) < 5
        assert 7.3 < parts.hour(les.launch, sec.offset) < 15.9
        shared = tokens([*_system(run, firsts[0]), *les.material]) // BLOCK
        for i, j in itertools.pairwise(firsts):
            if _system(run, i) == _system(run, j):
                assert common(run.trace[i], run.trace[j]) == shared


def test_the_timetable_and_the_week_have_a_rhythm(run):
    days, lunch = Counter(), 0
    for i, m in enumerate(run.meta):
        off = _offset(run, i)
        day, hour = parts.weekday(run.times[i], off), parts.hour(run.times[i], off)
        days[day] += 1
        if m[0] == "class":
            assert day < 5 and 7.3 < hour < 16
            sec = run.sections[run.convs[m[1]].section]
            lunch += sec.bell + 4 * 55 / 60 - 5 / 60 < hour < sec.bell + 4 * 55 / 60 + 35 / 60
    assert lunch == 0
    assert days[5] < 0.6 * days[0] and days[5] < days[6] < days[0]  # Saturday, Sunday, Monday


def _sittings(r, kinds):
    """(conversation, first request index of each sitting in the trace) for ``kinds``."""
    for conv in r.convs:
        if conv.kind in kinds and conv.sent[0] >= 0:
            yield conv, [conv.sent[k] for k in conv.sittings]


def test_homework_starts_the_evening_before_and_resumes_before_the_deadline(run):
    leads, evening, backs, n = [], 0, [], 0
    for conv, starts in _sittings(run, ("homework", "reading")):
        assert all(run.times[i] < conv.until for i in conv.sent)
        leads.append((conv.until - run.times[starts[0]]) / HOUR)
        evening += 15 <= parts.hour(run.times[starts[0]], conv.offset) < 24
        n += 1
        for k, i in zip(conv.sittings[1:], starts[1:]):
            prev = conv.sent[k - 1]
            backs.append((run.times[i] - run.times[prev]) / HOUR)
            assert _rest(run, i)[:len(_rest(run, prev))] == _rest(run, prev)
    assert evening > 0.6 * n and statistics.median(leads) < 16
    assert sum(lead > 30 for lead in leads) < 0.15 * n
    assert min(backs) >= 0.5 and len(backs) > 0.2 * n


def test_a_reading_is_cited_by_many_students_of_its_course_over_days(run):
    docs = [r[0] for c in run.courses for r in c.readings.values() if r]
    spread = []
    for doc in docs:
        idx = [i for i, m in enumerate(run.meta) if doc in m[3]]
        convs = {run.meta[i][1] for i in idx if run.meta[i][0] != "grade"}
        secs = {run.convs[c].section for c in convs}
        if idx:
            assert 1200 <= doc[1] <= 30000
            assert len({run.convs[c].course for c in convs}) == 1
            spread.append((len(convs), len(secs), (run.times[idx[-1]] - run.times[idx[0]]) / HOUR))
    assert any(c >= 20 and s >= 2 and h >= 24 for c, s, h in spread), spread


def test_grading_walks_the_submissions_in_roster_order(run):
    jobs = [j for j in run.jobs if j.sent and j.sent[0] >= 0]
    assert len(jobs) >= 3 and any(j.criteria for j in run.jobs)
    for job in jobs:
        a = run.assignments[job.assignment]
        per = max(1, len(job.criteria))
        places = [p for p, _ in job.submissions]
        assert places == sorted(places) and len(places) >= 0.8 * run.sections[a.section].roster - 1
        assert run.times[job.sent[0]] >= a.deadline + 300
        assert [run.meta[i][2] for i in job.sent] == list(range(len(job.sent)))
        for n, (i, j) in enumerate(itertools.pairwise(job.sent)):
            assert run.times[j] - run.times[i] >= 0.1 + 40 / parts.RATE
            sub = job.submissions[n // per][1]
            assert run.meta[i][3][3] == sub
            same = (n + 1) // per == n // per
            shared = tokens(run.meta[i][3][:4 if same else 3]) // BLOCK
            assert common(run.trace[i], run.trace[j]) == shared


def test_exam_review_is_hammered_before_the_exam(run):
    exam = next(iter(run.exams.values()))
    times = []
    for conv, _ in _sittings(run, ("review",)):
        assert conv.material == exam.material and conv.until == exam.starts[conv.section]
        times += [(conv.until - run.times[i]) / HOUR for i in conv.sent]
    assert len(times) > 100 and min(times) > 0
    assert sum(t < 24 for t in times) > 0.5 * len(times)
    reviews = [les for les in run.lessons if les.material == exam.material]
    assert reviews and all(les.day == 1 for les in reviews)  # the Friday before a Monday exam


def test_the_unit_line_changes_on_monday_and_a_deploy_rewrites_the_platform(run):
    idx = [i for i, m in enumerate(run.meta) if m[0] in STUDENT]
    before = [i for i in idx if run.deploy < run.times[i] < MONDAY]
    after = [i for i in idx if run.times[i] > MONDAY]
    early = [i for i in idx if run.times[i] < run.deploy]
    platform = tokens(run.platform[1])
    for i, j in zip(before, after):
        same = run.meta[i][3][len(run.platform[1])] == run.meta[j][3][len(run.platform[1])]
        head = platform + (run.meta[i][3][2][1] if same else 0)
        assert common(run.trace[i], run.trace[j]) == head // BLOCK
    kept = run.platform[1][0][1]
    assert run.platform[0][0][0] == run.platform[1][0][0] and kept < run.platform[0][0][1]
    for i, j in zip(early, before):
        assert common(run.trace[i], run.trace[j]) == kept // BLOCK


def test_teachers_work_at_off_hours_and_quick_questions_are_one_off(run):
    teacher = [(c, s[0]) for c, s in _sittings(run, ("teacher",))]
    off = sum(not (parts.weekday(run.times[i], c.offset) < 5 and
                   8 <= parts.hour(run.times[i], c.offset) < 15) for c, i in teacher)
    assert off > 0.6 * len(teacher)
    seen = Counter(s for m in run.meta for s in set(m[3]))
    quick = [c for c, _ in _sittings(run, ("quick",))]
    for conv in quick:
        first = _rest(run, conv.sent[0])
        assert all(seen[s] == len(conv.sent) for s in first)
    assert sum(len(c.sent) > 1 for c in quick) > 0.05 * len(quick)


def test_requests_mix_as_documented(run):
    kinds = Counter(m[0] for m in run.meta)
    n = len(run.trace)
    assert 0.1 < kinds["class"] / n < 0.4 and 0.1 < kinds["homework"] / n < 0.4
    assert 0.12 < kinds["quick"] / n < 0.3 and 0.02 < kinds["teacher"] / n < 0.07
    assert 0.03 < kinds["grade"] / n < 0.2 and kinds["review"] and kinds["reading"]


def test_size_at_scale_one_and_scaled_down():
    check_size(tutoring, (1_900_000, 3_200_000), (125_000, 170_000), (0.04, 0.08), 0.45)
