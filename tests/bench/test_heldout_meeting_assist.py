"""bench/heldout_meeting_assist.py: the held-out shape meeting_assist has the properties its
docstring names (bench.heldout replays it as one of SHAPES). Structure only: no hit rate."""

from __future__ import annotations

import itertools
import math
from collections import Counter

import pytest

from bench import heldout_meeting_parts as parts
from bench.heldout_fewshot import BLOCK
from bench.heldout_meeting_assist import KINDS, LIVE, generate, meeting_assist
from bench.heldout_meeting_jobs import MEMORY, NIGHT_AT, RECENT
from bench.heldout_meeting_live import CAPTION_SPAN, HIGHLIGHT_SPAN
from tests.bench.trace_parts import (by_kind, check_full_blocks, common, registered_small_runs,
                                     shared_tokens, tokens)

HOUR, DAY = 3600.0, 86400.0
MEETING_KINDS = set(KINDS) - {"search", "digest", "rollup"}


@pytest.fixture(scope="module")
def run():
    return generate(5, 0.25)  # a seed whose orgs have every feature on somewhere


def _org(r, i):
    """The org request ``i`` is for."""
    kind, key, step, _ = r.meta[i]
    if kind in MEETING_KINDS:
        return r.meetings[key].org
    if kind == "search":
        return r.teams[r.searches[key].team].org
    night = r.nights[key]
    return r.meetings[night.meetings[step]].org if kind == "digest" else \
        night.orgs[step - len(night.meetings)]


def _meeting_requests(r, mid, kinds):
    return [i for i in r.meetings[mid].sent if r.meta[i][0] in kinds]


def _prompt_head(r, m, t):
    """What a meeting's prompt at ``t`` starts with, from the meeting's record: system
    prompt, glossary, header, then every line that reached the transcript by ``t``."""
    lines = [s for e, s in m.said if e + parts.ASR_LAG <= t]
    return [r.system, *m.glossary, *m.head, *lines]


def _window(m, t, span):
    """The lines that reached a meeting's transcript in the ``span`` seconds before ``t``."""
    return [s for e, s in m.said if t - span < e + parts.ASR_LAG <= t]


def test_registered_deterministic_and_seeded():
    runs = registered_small_runs("meeting_assist", meeting_assist, generate)
    kinds = [{m[0] for m in small.meta} for small in runs]
    assert all(k >= {"summary", "qa", "final", "email", "search", "digest", "rollup"}
               for k in kinds)
    assert set().union(*kinds) == set(KINDS)
    assert all(small.times == sorted(small.times) for small in runs)


@pytest.mark.parametrize("seed", [1, 2])
def test_request_and_block_counts(seed):
    """A quarter-scale trace (4 orgs, 14 teams): a quarter of the requests, about a quarter
    of the 2.3M..2.7M blocks a full one has (0.5M..0.85M over seeds 1..5), most blocks sent
    more than once, over more than a week."""
    r = generate(seed, 0.25)
    blocks = sum(map(len, r.trace))
    distinct = len({b for q in r.trace for b in q})
    assert len(r.trace) == 2250
    assert 300_000 <= blocks <= 1_000_000
    assert 0.1 < distinct / blocks < 0.4
    assert r.times[-1] > 8 * DAY


def test_block_ids_are_the_full_blocks_of_the_segments(run):
    check_full_blocks(run)
    for i, j in itertools.pairwise(range(0, len(run.trace), 7)):
        a, b = run.meta[i][3], run.meta[j][3]
        assert common(run.trace[i], run.trace[j]) == shared_tokens(a, b) // BLOCK


def test_every_prompt_starts_with_the_system_prompt_and_its_orgs_glossary(run):
    heads: dict[tuple, list[int]] = {}
    for i, (kind, key, _, segs) in enumerate(run.meta):
        org = run.orgs[_org(run, i)]
        when = run.meetings[key].start if kind in MEETING_KINDS else run.times[i]
        gloss = org.glossary_at(when)
        head = [run.system, *gloss]
        assert segs[:len(head)] == head
        n = tokens(head) // BLOCK
        assert heads.setdefault((id(org), tuple(gloss)), run.trace[i][:n]) == run.trace[i][:n]
    orgs = {k[0] for k in heads}
    assert len(orgs) == len(run.orgs) and len(heads) > len(orgs)  # glossaries were edited


def test_a_meetings_requests_extend_its_transcript_so_far(run):
    """Live summaries and questions hold the header and the transcript so far; each later
    one (and the final summary, action items, emails, translations) extends it."""
    grown = 0
    for mid, m in enumerate(run.meetings):
        live = _meeting_requests(run, mid, {"summary", "qa"})
        after = _meeting_requests(run, mid, {"final", "actions", "email", "translate"})
        assert all(run.times[i] < m.end for i in live) and all(m.end < run.times[i]
                                                                for i in after)
        for i in live + after:
            head = _prompt_head(run, m, run.times[i])
            assert run.meta[i][3][:len(head)] == head
            assert i in live or head[-1] == m.said[-1][1]  # after the end: all of it
        for i, j in itertools.pairwise(live + after):
            head = _prompt_head(run, m, run.times[i])
            assert common(run.trace[i], run.trace[j]) >= tokens(head) // BLOCK
            grown += len(_prompt_head(run, m, run.times[j])) > len(head)
    assert grown > 200


def test_rolling_summaries_come_at_the_orgs_interval(run):
    """Every ``every`` seconds from the start (5 minutes in an all-hands), none in an org
    that has them off, the last a minute or more before the end."""
    seen = 0
    for mid, m in enumerate(run.meetings):
        every = run.orgs[m.org].every
        if m.kind == "allhands":
            every = min(every or 300.0, 300.0)
        times = [run.times[i] for i in _meeting_requests(run, mid, {"summary"})]
        if every is None:
            assert not times
            continue
        expect = [m.start + every * k for k in range(1, len(times) + 1)]
        assert times == pytest.approx(expect) and all(t < m.end - 60 for t in times)
        seen += len(times) > 1
    assert seen > 20


def test_recurring_meetings_start_from_the_last_summary(run):
    """A series' instance has the series' fixed head after the glossary, then the previous
    instance's final summary (one from before the trace for the first), so instances share
    the org head and the series head; standups come every weekday, weekly ones a week on."""
    weekly = standup = 0
    made = {m.summary for m in run.meetings}
    for s in run.series:
        tz = run.orgs[run.teams[s.team].org].tz
        for k, mid in enumerate(s.meetings):
            m = run.meetings[mid]
            assert m.head[0] == s.head and parts.weekday(m.start, tz) in s.days
            assert 0 <= (parts.local_hour(m.start, tz) - s.at) * HOUR <= 121
            if k == 0:
                assert m.head[1] not in made
                continue
            prev = run.meetings[s.meetings[k - 1]]
            assert m.head[1] == prev.summary
            if prev.glossary == m.glossary:
                n = tokens([run.system, *m.glossary, s.head]) // BLOCK
                a = _meeting_requests(run, s.meetings[k - 1], {"summary", "qa", "final"})
                b = _meeting_requests(run, mid, {"summary", "qa", "final"})
                assert not b or common(run.trace[a[0]], run.trace[b[0]]) >= n
            gap = (m.start - prev.start) / DAY
            if s.kind == "standup":
                assert 0.9 < gap < 8
            else:
                assert round(gap) in (7, 14, 21) and abs(gap - round(gap)) < 0.01
            weekly += s.kind == "weekly"
            standup += s.kind == "standup"
    assert weekly >= 3 and standup >= 20


def test_post_meeting_notes_actions_and_emails(run):
    """One final request (summary and action items, or the summary where the org asks for
    action items apart, then an "actions" one) seconds after the end; emails re-send the
    action items then the org's note; translations the summary."""
    emails = 0
    for mid, m in enumerate(run.meetings):
        kinds = [run.meta[i][0] for i in m.sent]
        separate = run.orgs[m.org].separate
        assert kinds.count("final") <= 1 and kinds.count("actions") <= int(separate)
        for i in _meeting_requests(run, mid, {"final", "actions"}):
            assert m.end + 3 <= run.times[i] <= m.end + 15
        for i in _meeting_requests(run, mid, {"email"}):
            segs = run.meta[i][3]
            assert segs[-4] == run.tasks["actions" if separate else "notes"]
            assert segs[-3] == m.actions and segs[-2] == run.tasks["email"]
            emails += 1
        for i in _meeting_requests(run, mid, {"translate"}):
            assert run.meta[i][3][-2] == m.summary
    assert emails > 20


@pytest.mark.parametrize(("kind", "span"), [("caption", CAPTION_SPAN),
                                            ("highlight", HIGHLIGHT_SPAN)])
def test_captions_and_highlights_slide_a_window(run, kind, span):
    """Glossary, an instruction (a caption's per language), then only the lines of the last
    ``span`` seconds: the window moves on, so two in a row mostly share only the head."""
    moved = pairs = 0
    groups = by_kind(run, kind, lambda m: (m[1], m[3][1 + len(run.meetings[m[1]].glossary)]))
    for (mid, _), ids in groups.items():
        m = run.meetings[mid]
        for i in ids:
            window = _window(m, run.times[i], span)
            assert window and run.meta[i][3][-len(window):] == window
            assert len(run.meta[i][3]) == 2 + len(m.glossary) + len(window)
        for i, j in itertools.pairwise(ids):
            head = 2 + len(m.glossary)
            assert run.meta[i][3][:head] == run.meta[j][3][:head]
            moved += run.meta[i][3][head] != run.meta[j][3][head]
            pairs += 1
    assert pairs > 10 and moved > 0.8 * pairs


def test_search_asks_over_the_teams_recent_summaries(run):
    """A thread's context is the team's newest MEMORY summaries oldest first, or 3..5 of
    its newest RECENT; a follow-up re-sends the thread after them."""
    modes = Counter()
    for s in run.searches:
        first = s.sent[0]
        past = [x for t, x in run.teams[s.team].summaries if t < run.times[first]]
        if s.mode == "memory":
            assert s.context == past[-MEMORY:]
        else:
            assert 3 <= len(s.context) <= 5 and set(s.context) <= set(past[-RECENT:])
        segs = run.meta[first][3]
        assert segs[-1 - len(s.context):-1] == s.context
        org = run.orgs[run.teams[s.team].org]
        for i, j in itertools.pairwise(s.sent):
            a, b = (run.meta[k][3][run.meta[k][3].index(run.tasks["search"]):] for k in (i, j))
            assert b[:len(a)] == a and len(b) == len(a) + 2  # the question, its answer, a new one
            if org.glossary_at(run.times[i]) == org.glossary_at(run.times[j]):  # not edited
                assert common(run.trace[i], run.trace[j]) >= tokens(run.meta[i][3][:-1]) // BLOCK
        modes[s.mode] += 1
    assert modes["memory"] > 50 and modes["retrieval"] > 30
    assert sum(len(s.sent) > 1 for s in run.searches) > 20


def test_the_nightly_job_walks_every_meeting_of_the_day_in_order(run):
    """At NIGHT_AT UTC each day: every meeting ended since the last run (orgs with digests
    on), by start time, one at a time over its full transcript and tonight's glossary; then
    one roll-up an org over those meetings' summaries. No meeting is missed or walked twice."""
    walked: list[int] = []
    for n, night in enumerate(run.nights):
        assert night.start == (NIGHT_AT + 24 * n) * HOUR
        assert night.meetings == sorted(night.meetings, key=lambda k: run.meetings[k].start)
        digests, rollups = night.sent[:len(night.meetings)], night.sent[len(night.meetings):]
        assert [run.meta[i][0] for i in digests] == ["digest"] * len(digests)
        assert {run.meta[i][0] for i in rollups} <= {"rollup"}
        assert all(run.times[a] < run.times[b] for a, b in itertools.pairwise(night.sent))
        for k, i in zip(night.meetings, digests):
            m = run.meetings[k]
            assert m.end < night.start and run.orgs[m.org].digest
            ctx = m.context(run.system, math.inf, run.orgs[m.org].glossary_at(run.times[i]))
            assert run.meta[i][3] == [*ctx, run.tasks["digest"]]
        for o, i in zip(night.orgs, rollups):
            sums = [run.meetings[k].summary for k in night.meetings if run.meetings[k].org == o]
            assert run.meta[i][3][-len(sums):] == sums
        walked += night.meetings
    assert len(walked) == len(set(walked)) > 30
    last = run.nights[-1].start
    missed = [k for k, m in enumerate(run.meetings) if m.end < last - HOUR
              and run.orgs[m.org].digest and k not in set(walked)]
    assert not missed


def test_meetings_start_in_time_zone_waves(run):
    """Booked meetings start on the hour or half hour (the bot 0..2 minutes late) in the
    org's working hours, so time zones 3 hours or more apart peak at other UTC hours."""
    booked = [m for m in run.meetings if m.kind != "allhands"]
    local = [(parts.local_hour(m.start, run.orgs[m.org].tz), run.orgs[m.org].tz)
             for m in booked]
    assert sum(8 <= h < 18 for h, _ in local) > 0.9 * len(local)
    on_slot = sum((h * 60) % 30 < 2.01 for h, _ in local)
    assert on_slot > 0.8 * len(local)
    peaks = {}
    for tz in {tz for _, tz in local}:
        hours = Counter(int(h) for h, z in local if z == tz)
        peaks[tz] = hours.most_common(1)[0][0]
        assert 9 <= peaks[tz] <= 16
    far = [(a, b) for a, b in itertools.combinations(peaks, 2) if abs(a - b) >= 3]
    assert far and all((peaks[a] - a) % 24 != (peaks[b] - b) % 24 for a, b in far)


def test_allhands_are_long_with_bursts_of_questions(run):
    """A finished all-hands ran long, with hundreds listening; 6 or more questions came
    within 3 minutes at least once (10 in one of them), all behind the transcript so far."""
    halls = [mid for mid, m in enumerate(run.meetings)
             if m.kind == "allhands" and m.end < run.times[-1]]
    assert halls
    bursts = []
    for mid in halls:
        m = run.meetings[mid]
        assert m.end - m.start > 50 * 60 and m.people >= 100
        qa = _meeting_requests(run, mid, {"qa"})
        bursts.append(max(sum(run.times[i] <= run.times[j] < run.times[i] + 180 for j in qa)
                          for i in qa))
        assert bursts[-1] >= 6
        head = _prompt_head(run, m, run.times[qa[0]])
        assert all(common(run.trace[qa[0]], run.trace[j]) >= tokens(head) // BLOCK for j in qa)
    assert max(bursts) >= 10


def test_requests_mix_as_documented(run):
    kinds = Counter(m[0] for m in run.meta)
    n = len(run.trace)
    live = sum(kinds[k] for k in LIVE)
    assert 0.35 < live / n < 0.8
    assert 0.04 < kinds["final"] / n < 0.15 and 0.05 < kinds["search"] / n < 0.2
    assert 0.02 < kinds["digest"] / n < 0.15 and 0.01 < kinds["email"] / n < 0.08
