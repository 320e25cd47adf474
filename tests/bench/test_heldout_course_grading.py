"""bench/heldout_course_grading.py: the held-out shape course_grading has the properties its
docstring names. Structure only: no policy, no hit rate."""

from __future__ import annotations

import itertools
from collections import defaultdict

import pytest

from bench.heldout_fewshot import BLOCK
from bench.heldout_course_jobs import EMAIL_HOURS, SUMMARY_DELAY, TRANSCRIPT
from bench.heldout_course_parts import DAY, END, HOUR, MINUTE
from bench.heldout_course_grading import KINDS, course_grading, generate
from tests.bench.trace_parts import SmallRuns, check_chains, common, shared_tokens, tokens
from tests.bench.trace_parts import chats_of

SCALE = 0.2
SEEDS = (1, 2, 3, 4)


SMALL = SmallRuns(generate, SCALE)  # each seed's run and first_seen, made once
_small, _first = SMALL.run, SMALL.first


def _runs(seeds=SEEDS):
    """(run, its generator, its first_seen) per seed."""
    return [(_small(seed), _small(seed).state, _first(seed)) for seed in seeds]


def _streams(r, kind):
    return [w for w in r.state.streams if w.kind == kind]


def _new_from(r, first, n, cut):
    """Whether every block of request ``n`` from token ``cut`` on is first seen there."""
    return all(first[b] == n for b in r.trace[n][cut // BLOCK:])


def test_deterministic_and_seeded():
    """Same seed, same trace; seeds differ in structure (deadline mix, instant share, modes,
    deadlines, extension); requests non-empty, in time order; every kind appears."""
    assert course_grading(1, 0.05) == course_grading(1, 0.05) != course_grading(2, 0.05)
    assert generate(3, 0.05).trace == course_grading(3, 0.05)
    a, b = _small(1).state, _small(2).state
    assert a.mix != b.mix and a.instant != b.instant
    assert [(c.mode, c.deadline) for c in a.courses] != [(c.mode, c.deadline) for c in b.courses]
    assert len({_small(s).state.extension is None for s in SEEDS}) == 2
    assert all(r.times == sorted(r.times) and all(r.trace) for r, _, _ in _runs())
    assert {m[0] for r, _, _ in _runs() for m in r.meta} == set(KINDS)


@pytest.mark.parametrize("seed", [1, 2])
def test_sizes_and_span(seed):
    """At scale 0.2: 150K..600K blocks over the two days, grading a tenth or more of them;
    every job walk begun before hour 40 finished, one request an item (and a reduce)."""
    r = _small(seed)
    total = sum(map(len, r.trace))
    assert 150_000 <= total <= 600_000
    graded = sum(len(q) for q, m in zip(r.trace, r.meta) if m[0] in ("grade", "late", "rescore"))
    assert graded > 0.1 * total
    assert r.times[0] < 3 * HOUR and 44 * HOUR < r.times[-1] < END
    for w in r.state.streams:
        if w.sent and r.times[w.sent[0]] < 40 * HOUR:
            assert w.pos == len(w.items) == len(w.sent) - (w.kind == "lecture") and not w.lanes


def test_prefix_chains_are_well_formed():
    """Parents fixed, full blocks of the segments, shared blocks = shared segments."""
    check_chains(_small(1), 2)


def test_submissions_rush_to_the_deadline():
    """A fifth or more of on-time work lands in the last hour; late work only where taken;
    resubmissions only on instant courses, before the deadline, some answer rewritten."""
    last = before = total = 0
    for _, s, _ in _runs():
        ext = s.extension[0] if s.extension else -1
        number = {(x.course, x.student, x.number): x for x in s.subs}
        for sub in s.subs:
            course = s.courses[sub.course]
            if sub.course == ext:
                continue
            assert sub.late == (sub.time > course.deadline) and (course.late_ok or not sub.late)
            lead = course.deadline - sub.time
            total += lead > 0
            last += 0 < lead < HOUR
            before += 24 * HOUR < lead < 25 * HOUR
            if sub.number > 1:
                prev = number[(sub.course, sub.student, sub.number - 1)]
                assert course.mode == "instant" and 0 < lead and prev.time < sub.time
                assert len(prev.answers) == len(sub.answers) and prev.answers != sub.answers
    assert last > 0.2 * total and last > 5 * before > 0


def _walk_items(s, w, t0):
    """What a batch walk started at ``t0`` should take: the latest on-time submissions in
    arrival order (per question in turn), then the late ones so far."""
    course = s.courses[w.owner]
    qs = range(len(course.rubric.current)) if course.mode == "question" else (-1,)
    base = [i for i in sorted(course.latest.values()) if s.subs[i].time < t0]
    want = [("grade", i, q) for q in qs for i in base if not s.subs[i].late]
    return want + [("late", i, q) for q in qs for i in base if s.subs[i].late]


def _grade_head(s, i, q, t):
    """The grading prompt's segments before the answers at ``t``."""
    course = s.courses[s.subs[i].course]
    rubric = course.rubric.at(t)
    return [s.system["grade"], course.statement, *(rubric if q < 0 else [rubric[q]])]


@pytest.mark.parametrize("seed", [1, 2])
def test_batch_walks_grade_every_latest_submission(seed):
    """A walk starts 0.5 h+ after the deadline, takes every latest submission in order (then
    rescores): system, statement, rubric (part), answer(s), cue; new from the answers on at
    first; requests of one question share the head while the rubric holds."""
    r, first = _small(seed), _first(seed)
    s, walks = r.state, _streams(r, "grade")
    for w in walks:
        course, t0 = s.courses[w.owner], r.times[w.sent[0]]
        assert course.mode != "instant" and t0 >= course.deadline + 0.5 * HOUR
        want = _walk_items(s, w, t0)
        assert w.items[:len(want)] == want
        assert all(k == "rescore" for k, _, _ in w.items[len(want):])
        for n, (kind, i, q) in zip(w.sent, w.items):
            head = _grade_head(s, i, q, r.times[n])
            answers = s.subs[i].answers if q < 0 else [s.subs[i].answers[q]]
            assert r.meta[n] == (kind, w.owner, (i, q), [*head, *answers, s.cue[kind]])
            if kind != "rescore":
                assert _new_from(r, first, n, tokens(head))
        for (n, x), (m, y) in itertools.pairwise(zip(w.sent, w.items)):
            a, b = _grade_head(s, x[1], x[2], r.times[n]), _grade_head(s, y[1], y[2], r.times[m])
            if a == b:
                assert common(r.trace[n], r.trace[m]) >= tokens(a) // BLOCK
    assert sum(len(w.sent) for w in walks) >= 20


def _check_edit(r, first, w, q):
    """The first request after a walk's edit is new from the rewritten part on; each rescored
    item shares its earlier grading exactly up to that part. The rescored count."""
    s = r.state
    n = w.sent[w.edit_at]
    course, t = s.courses[w.owner], r.times[n]
    pre = _grade_head(s, w.items[w.edit_at][1], -1, t)[:2 if course.mode == "question" else 2 + q]
    assert _new_from(r, first, n, tokens(pre))
    done = {(i, b): m for m, (_, i, b) in zip(w.sent[:w.edit_at], w.items)}
    again = [(done[(i, b)], m) for m, (k, i, b) in zip(w.sent, w.items) if k == "rescore"]
    assert all(common(r.trace[a], r.trace[b]) == tokens(pre) // BLOCK for a, b in again)
    return len(again)


def test_a_rubric_edit_makes_the_rest_of_the_walk_new():
    """A mid-walk edit rewrites one question's part: new from that part on; rescored items
    (at the walk's end) share their earlier grading exactly up to it."""
    edits = rescored = 0
    for r, _, first in _runs():
        for w in _streams(r, "grade"):
            for t, q, again in w.edits:
                old, new = [r.state.courses[w.owner].rubric.at(x) for x in (t - 1e-6, t)]
                assert old[q] != new[q] and old[:q] + old[q + 1:] == new[:q] + new[q + 1:]
                got = _check_edit(r, first, w, q)
                assert again or not got
                edits, rescored = edits + 1, rescored + got
    assert edits >= 2 and rescored >= 5


def test_instant_feedback_grades_each_submission_on_arrival():
    """Instant courses grade each submission as it lands (late cue if late); a resubmission
    shares the last prompt exactly up to its first rewritten answer while the rubric holds."""
    graded = resubmitted = 0
    for r, s, _ in _runs():
        at = {m[2]: n for n, m in reversed(list(enumerate(r.meta))) if m[0] in ("grade", "late")}
        mine = {(x.course, x.student, x.number): i for i, x in enumerate(s.subs)}
        for i, sub in enumerate(s.subs):
            if s.courses[sub.course].mode != "instant" or sub.time < 0:
                continue
            n = at[(i, -1)]
            assert r.meta[n][:3] == ("late" if sub.late else "grade", sub.course, (i, -1))
            assert r.times[n] == sub.time
            graded += 1
            j = mine.get((sub.course, sub.student, sub.number - 1))
            if j is None or s.subs[j].time < 0:
                continue
            a, b = r.meta[at[(j, -1)]][3], r.meta[n][3]
            k = next(x for x, (p, q) in enumerate(zip(s.subs[j].answers, sub.answers)) if p != q)
            head = _grade_head(s, i, -1, sub.time)
            if _grade_head(s, j, -1, s.subs[j].time) == head:
                assert shared_tokens(a, b) == tokens([*head, *sub.answers[:k]])
                assert common(r.trace[at[(j, -1)]], r.trace[n]) == shared_tokens(a, b) // BLOCK
                resubmitted += 1
    assert graded >= 50 and resubmitted >= 5


def test_regrades_resend_the_graded_work_with_its_feedback():
    """A regrade: grading prompt, feedback, request (round 2: + reply, request), cue; after a
    grading of that work, sharing its blocks through the answers while the rubric holds."""
    rounds = shared = 0
    for r, s, _ in _runs():
        last = {}
        for n, m in enumerate(r.meta):
            if m[0] in ("grade", "late", "rescore"):
                last[m[2]] = n
            if m[0] != "regrade":
                continue
            i, q, rnd = m[2]
            answers = s.subs[i].answers if q < 0 else [s.subs[i].answers[q]]
            head = [*_grade_head(s, i, q, r.times[n]), *answers]
            segs, prev = m[3], last[(i, q)]
            assert segs[:len(head)] == head and segs[-1] == s.cue["regrade"]
            assert len(segs) == len(head) + 1 + 2 * rnd and r.times[prev] < r.times[n]
            if r.meta[prev][3][:-1] == head:
                assert common(r.trace[prev], r.trace[n]) == tokens(head) // BLOCK
                shared += 1
            rounds += 1
    assert rounds >= 10 and shared >= 5


def test_similarity_compares_flagged_pairs_in_order():
    """Flagged pairs of latest on-time submissions by the first: system, statement, both
    answers, cue; pairs with the same first share everything through its answers."""
    pairs = 0
    for r, s, _ in _runs():
        for w in _streams(r, "similarity"):
            course, items = s.courses[w.owner], [(a, b) for _, a, b in w.items]
            assert items == sorted(set(items)) and all(a < b for a, b in items)
            for k, (n, (a, b)) in enumerate(zip(w.sent, items)):
                x, y = s.subs[a], s.subs[b]
                assert {a, b} <= set(course.latest.values()) and not (x.late or y.late)
                head = [s.system["similarity"], course.statement, *x.answers]
                assert r.meta[n] == ("similarity", w.owner, (a, b), [*head, *y.answers,
                                                                     s.cue["similarity"]])
                assert r.times[n] > course.deadline
                if k + 1 < len(items) and items[k + 1][0] == a:
                    assert common(r.trace[n], r.trace[w.sent[k + 1]]) >= tokens(head) // BLOCK
            pairs += len(items)
    assert pairs >= 10


@pytest.mark.parametrize("seed", [1, 2])
def test_nightly_emails_walk_the_roster(seed):
    """Nightly at 01..04, student by student: system, template, record, content, cue; a
    student's two nights share exactly the blocks through the record."""
    r = _small(seed)
    s, nights = r.state, defaultdict(dict)
    for w in _streams(r, "email"):
        night = w.items[0][2]
        assert EMAIL_HOURS[0] <= r.times[w.sent[0]] / HOUR - 24 * night < EMAIL_HOURS[1]
        assert [x for _, x, _ in w.items] == sorted({x for _, x, _ in w.items})
        course = s.courses[w.owner]
        for n, (_, x, k) in zip(w.sent, w.items):
            segs = r.meta[n][3]
            assert segs[:3] == [s.system["email"], course.template, course.records[x]]
            assert segs[-1] == s.cue["email"] and k == night
            nights[(w.owner, x)][night] = n
    both = [(i, j) for i, j in (x.values() for x in nights.values() if len(x) == 2)]
    assert all(common(r.trace[i], r.trace[j]) == tokens(r.meta[i][3][:3]) // BLOCK
               for i, j in both) and len(both) >= 20


def test_lecture_transcripts_are_summarized_after_class():
    """10..40 min after a recorded meeting: map each chunk (system, syllabus, chunk, cue),
    then reduce the chunks' summaries in order once all are done."""
    count = 0
    for r, s, _ in _runs((1, 2)):
        for w in _streams(r, "lecture"):
            if w.lanes:
                continue  # still running at the clock's end
            course, t0 = s.courses[w.owner], r.times[w.sent[0]]
            ends = [start + minutes * MINUTE for start, minutes in course.meetings]
            assert any(SUMMARY_DELAY[0] * MINUTE <= t0 - e <= SUMMARY_DELAY[1] * MINUTE
                       for e in ends)
            maps, reduce = w.sent[:-1], w.sent[-1]
            head = [s.system["lecture"], course.syllabus]
            assert [r.meta[n][2] for n in maps] == list(range(len(w.data)))
            assert all(x[1] <= 1.5 * TRANSCRIPT[1] for x in w.data)
            for n, chunk in zip(maps, w.data):
                assert r.meta[n][3] == [*head, chunk, s.cue["map"]]
            assert r.meta[reduce][2] == -1 and r.times[reduce] > max(r.times[n] for n in maps)
            assert r.meta[reduce][3] == [*head, *(w.made[k] for k in range(len(w.data))),
                                         s.cue["reduce"]]
            count += 1
    assert count >= 5


def test_tutor_chats_grow_over_the_notes():
    """Tutor: system, syllabus, statement, covered notes + newest summary (or retrieved
    sections), history, message; stuffed turns extend the last unless a summary came."""
    extended = retrieved = 0
    for r, s, _ in _runs((1, 2)):
        for n, chat in chats_of(r, "tutor"):
            course = s.courses[chat.owner]
            notes = [x for k in course.covers for x in course.notes[k]]
            fixed = [s.chat_system["tutor"], course.syllabus, course.statement]
            times = [r.times[w.sent[-1]] for w in _streams(r, "lecture")
                     if w.owner == chat.owner and not w.lanes]  # its summaries, made
            for i in chat.sent:
                segs, newest = r.meta[i][3], sum(t < r.times[i] for t in times)
                assert segs[:3] == fixed
                if not s.rag[chat.owner]:
                    tail = course.summaries[newest - 1:newest] if newest else []
                    assert segs[3:3 + len(notes) + len(tail)] == [*notes, *tail]
                else:
                    ret = segs[3:-1 - 2 * chat.sent.index(i)]
                    assert ret and set(ret) <= {x for note in course.notes for x in note}
            for i, j in itertools.pairwise(chat.sent):
                a, b = r.meta[i][3], r.meta[j][3]
                if s.rag[chat.owner]:
                    assert common(r.trace[i], r.trace[j]) >= tokens(fixed) // BLOCK
                    retrieved += 1
                elif sum(t < r.times[i] for t in times) == sum(t < r.times[j] for t in times):
                    assert b[:len(a)] == a and r.trace[j][:len(r.trace[i])] == r.trace[i]
                    extended += 1
    assert extended >= 20 and retrieved >= 5


def test_students_chat_more_as_the_deadline_nears():
    """Tutor and FAQ sessions come faster 0..6 h before a day-1 deadline than a day earlier."""
    near = far = 0
    for r, s, _ in _runs():
        ext = s.extension[0] if s.extension else -1
        for kind in ("tutor", "faq"):
            for n, chat in chats_of(r, kind):
                d = s.courses[chat.owner].deadline
                if chat.owner == ext or d < 30 * HOUR:
                    continue
                lead = d - r.times[chat.sent[0]]
                near += 0 < lead <= 6 * HOUR
                far += 24 * HOUR < lead <= 30 * HOUR
    assert near > 1.5 * far > 0


def test_office_hours_are_bursts_over_the_statement_and_rubric():
    """Tickets open in a session, most in its first 40 %: system, statement, rubric, work."""
    early = total = 0
    for r, s, _ in _runs():
        for n, chat in chats_of(r, "office"):
            t, course = r.times[chat.sent[0]], s.courses[chat.owner]
            inside = [(t - a) / b for c, a, b in s.sessions if c == chat.owner and a <= t <= a + b]
            early, total = early + (min(inside) < 0.4), total + 1
            for i in chat.sent:
                head = [s.chat_system["office"], course.statement,
                        *course.rubric.at(r.times[i]), chat.fixed[0]]
                assert r.meta[i][3][:len(head)] == head
    assert total >= 30 and early > 0.5 * total


def test_faq_heads_change_with_announcements():
    """FAQ turns send the FAQ as it stands: new from a rewritten section on after a change."""
    seen = 0
    for r, s, first in _runs():
        for c, t in [*s.announcements, *([s.extension] if s.extension else [])]:
            course = s.courses[c]
            old, new = course.faq.at(t - 1e-6), course.faq.at(t)
            k = next(x for x in range(len(new)) if old[x] != new[x])
            later = [n for n, m in enumerate(r.meta)
                     if m[0] == "faq" and m[1] == c and r.times[n] >= t]
            if later:
                segs = r.meta[later[0]][3]
                assert segs[2:2 + len(new)] == course.faq.at(r.times[later[0]])
                assert _new_from(r, first, later[0], tokens(segs[:2 + k]))
                seen += 1
    assert seen >= 2


def test_an_extension_moves_the_deadline_and_replans():
    """An extension (2..10 h ahead) moves a day-1 deadline 24 h: nothing late, no rush before
    the old deadline, no grading walk or similarity check before the new one."""
    checked = 0
    for r, s, _ in _runs():
        if not s.extension:
            continue
        c, t = s.extension
        course, old = s.courses[c], s.courses[c].deadline - DAY
        assert DAY <= old < END and old - 10 * HOUR <= t <= old - 2 * HOUR
        subs = [x for x in s.subs if x.course == c]
        assert not any(x.late for x in subs)
        assert sum(old - HOUR < x.time <= old for x in subs) <= max(2, 0.08 * course.size)
        assert not any(w.owner == c and w.sent and r.times[w.sent[0]] < course.deadline
                       for w in [*_streams(r, "grade"), *_streams(r, "similarity")])
        checked += 1
    assert checked >= 2


def test_essay_uploads_are_one_off():
    """Each essay session's upload is its own: new from it on; later turns extend the last."""
    for r, s, first in _runs((1, 2)):
        essays = chats_of(r, "essay")
        assert len({c.fixed[0] for _, c in essays}) == len(essays) >= 10
        for n, chat in essays:
            segs = r.meta[chat.sent[0]][3]
            assert segs[:3] == [s.chat_system["essay"], s.guide, chat.fixed[0]]
            assert _new_from(r, first, chat.sent[0], tokens(segs[:2]))
            for i, j in itertools.pairwise(chat.sent):
                assert r.trace[j][:len(r.trace[i])] == r.trace[i]
