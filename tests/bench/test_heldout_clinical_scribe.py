"""bench/heldout_clinical_scribe.py: the held-out shape clinical_scribe has the structure its
docstring names. Structure only: no policy, no hit rate."""

from __future__ import annotations

import functools
import itertools
from collections import Counter, defaultdict

import pytest

from bench.heldout_clinic_parts import (DAY, END, FIXED, HOUR, MINUTE, NOTE_SUMMARY,
                                        SPECIALTIES, WINDOW, Chart)
from bench.heldout_clinic_visits import AUTH_HOURS, BATCHES, PRECHART, REVIEW
from bench.heldout_clinic_wards import ADMIT, CODING, STAY_WINDOW
from bench.heldout_clinical_scribe import KINDS, clinical_scribe, generate
from bench.heldout_fewshot import BLOCK
from tests.bench.trace_parts import (SmallRuns, blocks_by_kind, check_chains, common, of_kind,
                                     shared_tokens, tokens)

SCALE = 0.2


SMALL = SmallRuns(generate, SCALE)  # each seed's run and first_seen, made once
_small, _first = SMALL.run, SMALL.first


@functools.cache
def _holder(seed):
    """Segment -> the index of the first request of ``_small(seed)`` that sends it."""
    out = {}
    for i, m in enumerate(_small(seed).meta):
        for seg in m[3]:
            out.setdefault(seg, i)
    return out


def _local(r, t, site):
    """Local hour of the day of network time ``t`` at ``site``."""
    return (t / HOUR + r.state.sites[site].zone) % 24


def _sys(r, tool, *middle):
    """A tool's system prompt, ``middle``, its cue: the frame of a request."""
    tx = r.state.texts
    return [tx["system"][tool], *middle, tx["cue"][tool]] if middle else tx["system"][tool]


def test_deterministic_and_seeded():
    assert clinical_scribe(1, 0.05) == clinical_scribe(1, 0.05) != clinical_scribe(2, 0.05)
    assert generate(3, 0.05).trace == clinical_scribe(3, 0.05)
    kinds = set()
    for seed in (1, 2):
        r = _small(seed)
        assert r.times == sorted(r.times) and all(r.trace)
        assert 0 <= r.times[0] and r.times[-1] < END
        kinds |= {m[0] for m in r.meta}
        assert set(KINDS) - {m[0] for m in r.meta} <= {"prior_auth"}  # rare at scale 0.2
    assert kinds == set(KINDS)
    a, b = _small(1).state, _small(2).state
    assert [s.zone for s in a.sites] != [s.zone for s in b.sites]
    assert [sorted(s.clinics) for s in a.sites] != [sorted(s.clinics) for s in b.sites]
    assert _small(1).trace[:20] != _small(2).trace[:20]


@pytest.mark.parametrize("seed", [1, 2])
def test_sizes_and_span(seed):
    """At scale 0.2: 200K..400K blocks over two days, the scribe and its revisions 30..65 %;
    transcripts and chart sections within their ranges."""
    r = _small(seed)
    blocks = blocks_by_kind(r)
    total = sum(blocks.values())
    assert 200_000 <= total <= 400_000 and r.times[-1] > 40 * HOUR
    assert 0.3 < (blocks["scribe"] + blocks["revise"]) / total < 0.65
    assert all(SPECIALTIES[enc.spec][1][2] <= enc.transcript[1] <= SPECIALTIES[enc.spec][1][3]
               for enc in r.state.encounters)
    for p in r.state.patients:
        start = p.chart.versions[0][1]
        assert all(lo <= n <= hi for (_, n), (_, _, lo, hi) in zip(start, FIXED.values()))
        assert all(NOTE_SUMMARY[2] <= n <= NOTE_SUMMARY[3] for _, n in start[len(FIXED):])
        assert len(p.chart.notes) <= WINDOW and len(start) <= len(FIXED) + WINDOW


def test_prefix_chains_are_well_formed():
    """A block id always follows the same parent; each request is the full blocks of its
    segments, and two requests share exactly the blocks of the segments they start with."""
    check_chains(_small(1), 3)


def test_a_chart_keeps_its_latest_notes_and_names_the_first_change():
    chart = Chart([(1, 40), (2, 40)], [(3, 40)], 2)
    assert chart.add(10.0, (4, 40), {}) == 3
    assert chart.add(20.0, (5, 40), {}) == 2  # (3, 40) drops out of the window
    assert chart.add(30.0, None, {1: (6, 40)}) == 1
    assert chart.at(15.0) == [(1, 40), (2, 40), (3, 40), (4, 40)]
    assert chart.current == [(1, 40), (6, 40), (4, 40), (5, 40)]
    assert chart.at(-5.0) == [(1, 40), (2, 40), (3, 40)]


@pytest.mark.parametrize("seed", [1, 2])
def test_scribe_drafts_and_revisions(seed):
    """A draft is the scribe's system prompt, the specialty's template, the chart as it
    stands, the transcript, the cue: drafts of one specialty share exactly the blocks before
    the chart, of two the system prompt's. Each revision re-sends the one before with its
    draft and a new instruction: its blocks extend the last request's."""
    r, tx, revised, first = _small(seed), _small(seed).state.texts, 0, {}
    for e, enc in ((e, enc) for e, enc in enumerate(r.state.encounters) if enc.sent):
        i, t = enc.sent[0], r.times[enc.sent[0]]
        chart = r.state.patients[enc.patient].chart.at(t)
        assert r.meta[i] == ("scribe", e, 0, _sys(r, "scribe", tx["template"][enc.spec],
                                                  *chart, enc.transcript))
        assert t > enc.begin and len(enc.sent) <= enc.revisions + 1
        j = first.setdefault(enc.spec, i)
        assert i == j or common(r.trace[i], r.trace[j]) == tokens(r.meta[j][3][:2]) // BLOCK
        for k, (a, b) in enumerate(itertools.pairwise(enc.sent), 1):
            assert r.meta[b][:3] == ("revise", e, k)
            assert r.meta[b][3][:len(r.meta[a][3])] == r.meta[a][3]
            assert r.trace[b][:len(r.trace[a])] == r.trace[a]
            assert r.times[b] - r.times[a] > REVIEW[0] * MINUTE
            revised += 1
    a, b, *_ = first.values()
    assert common(r.trace[a], r.trace[b]) == _sys(r, "scribe")[1] // BLOCK and revised >= 20


def test_clinic_visits_keep_clinic_hours_and_the_er_runs_all_night():
    """A clinic's drafts fall in its local 08..17 (plus the last visit's overrun) on both
    days, chart Q&A before a visit opens 2..20 minutes ahead; the emergency department
    drafts around the clock."""
    night = 0
    for seed in (1, 2):
        r = _small(seed)
        for enc in (enc for enc in r.state.encounters if enc.sent):
            hour = _local(r, r.times[enc.sent[0]], enc.site)
            if enc.clinician >= 0:
                assert 7.9 <= hour <= 17.6 and enc.spec != "emergency"
            else:
                assert enc.spec == "emergency" and r.state.sites[enc.site].hospital
                night += hour < 7
        days = {int(r.times[i] // DAY) for i in of_kind(r, "scribe")}
        zones = {r.state.sites[enc.site].zone for enc in r.state.encounters if enc.clinician >= 0}
        assert days == {0, 1} and len(zones) >= 2
        begins = {enc.patient: enc.begin for enc in r.state.encounters}
        for ses in r.state.sessions:
            if ses.kind == "chart":
                ahead = begins[ses.about] - r.times[ses.sent[0]]
                assert PRECHART[1][0] * MINUTE <= ahead <= PRECHART[1][1] * MINUTE
    assert night >= 3


def test_signing_adds_the_note_and_makes_later_chart_blocks_new():
    """A signed note's summary joins the chart at the signature (the oldest past the window
    drops; problems, medications, results may change); the first request that sends the new
    chart holds only new blocks from the changed section on."""
    checked, dropped = 0, 0
    for seed in (1, 2):
        r, first, holder = _small(seed), _first(seed), _holder(seed)
        for enc in (enc for enc in r.state.encounters if enc.note is not None):
            chart = r.state.patients[enc.patient].chart
            t, k = next(c for c in chart.changes if c[0] == enc.signed)
            new, old = chart.at(t), chart.at(t - 1e-6)
            assert enc.note == enc.history[-1] and new[-1] not in old and new[:k] == old[:k]
            assert new[k] != old[k] if k < len(old) else len(new) == len(old) + 1
            dropped += len(old) == len(new)
            i = holder.get(new[-1])  # the new note's summary: only in the new chart on
            segs = r.meta[i][3] if i is not None else []
            at = segs.index(new[-1]) + 1 - len(new) if segs else 0
            if segs[at:at + len(new)] != new:
                continue  # never sent, or changed again before it was
            assert r.times[i] >= t
            cut = tokens(segs[:at + k]) // BLOCK
            assert all(first[b] == i for b in r.trace[i][cut:])
            checked += 1
    assert checked >= 5 and dropped >= 3


def test_the_first_batches_take_the_waiting_messages_more_on_a_monday():
    """Messages waiting when the trace starts go in each clinician's first batch; after a
    weekend (a Monday) there are about four times as many."""
    per = {}
    for seed in (1, 2):
        st = _small(seed).state
        waiting = {m for m, msg in enumerate(st.messages) if msg.arrived == 0.0}
        firsts = {c: todo for c, _, todo in reversed(st.batches)}
        assert waiting <= {m for todo in firsts.values() for m in todo}
        per[st.weekday0 == 0] = len(waiting) / len(st.clinicians)
    assert per[True] > 2 * per[False] > 0


@pytest.mark.parametrize("seed", [1, 2])
def test_inbox_batches_walk_the_queue_in_arrival_order(seed):
    """At each batch (07:30, 12:15, 16:45 local, +20 min) a clinician drafts replies to the
    messages waiting, in arrival order: system prompt, the chart as it stands, the thread,
    the message, the cue; a regenerated draft extends it exactly, before the next message."""
    r, st = _small(seed), _small(seed).state
    drafted = 0
    for c, t, todo in st.batches:
        site = st.clinicians[c][0]
        assert any(0 <= _local(r, t, site) - h <= 1 / 3 for h in BATCHES)
        msgs = [st.messages[m] for m in todo]
        assert all(m.clinician == c and m.arrived <= t for m in msgs)
        assert [m.arrived for m in msgs] == sorted(m.arrived for m in msgs)
        sent = [i for m in msgs for i in m.sent]
        assert sent == sorted(sent) and all(r.times[i] >= t for i in sent)
        for m in msgs:
            i = m.sent[0]
            chart = st.patients[m.patient].chart.at(r.times[i])
            assert r.meta[i][3] == _sys(r, "inbox", *chart, *m.thread, m.body)
            if len(m.sent) > 1:
                assert r.meta[m.sent[1]][0] == "regen" and m.regen
                assert r.trace[m.sent[1]][:len(r.trace[i])] == r.trace[i]
            drafted += 1
    assert drafted >= 40 and sum(len(m.thread) > 0 for m in st.messages) >= 5


def test_prior_authorization_letters():
    """A letter is drafted at the site's desk hours after the note is signed: system prompt,
    the payer's template, the chart as it stands (with the note's summary), the signed note,
    the order, the cue; letters to one payer share exactly the head."""
    letters = 0
    for seed in (1, 2, 3):
        r, st, heads = _small(seed), _small(seed).state, {}
        for e, payer, order, i in st.auths:
            enc, t = st.encounters[e], r.times[i]
            chart = st.patients[enc.patient].chart.at(t)
            assert r.meta[i] == ("prior_auth", e, 0, _sys(
                r, "prior_auth", st.texts["payer"][payer], *chart, enc.note, order))
            assert t > enc.signed and AUTH_HOURS[0] <= _local(r, t, enc.site) < 17
            if payer in heads:
                n = tokens(r.meta[i][3][:2]) // BLOCK
                assert common(r.trace[heads[payer]], r.trace[i]) == n
            heads.setdefault(payer, i)
            letters += 1
    assert letters >= 5


@pytest.mark.parametrize("seed", [1, 2])
def test_handoff_jobs_walk_the_beds_in_order(seed):
    """Before each shift change (07:00, 19:00 local) the job walks the unit's occupied beds
    in order, 20..30 minutes ahead: system prompt, the unit's protocol, the record as it
    stands (with this shift's nursing note), the cue; one unit's hand-offs share exactly
    that head. The incoming nurse re-opens some: exact re-sends."""
    r, st = _small(seed), _small(seed).state
    for h, job in enumerate(st.handoffs):
        unit = st.units[job.unit]
        assert round(_local(r, job.change, unit.site), 6) in (7.0, 19.0)
        assert [r.meta[i][:3] for i in job.sent] == [("handoff", h, k) for k in
                                                     range(len(job.stays))]
        assert [st.stays[s].bed for s in job.stays] == sorted(st.stays[s].bed
                                                              for s in job.stays)
        assert 20 * MINUTE <= job.change - r.times[job.sent[0]] <= 30 * MINUTE
        for s, i in zip(job.stays, job.sent):
            stay, t = st.stays[s], r.times[i]
            assert r.meta[i][3] == _sys(r, "handoff", unit.protocol, *stay.record.at(t))
            if stay.admitted < job.change - HOUR:
                since = max(v[0] for v in stay.record.versions if v[0] <= t)
                assert job.change - HOUR <= since <= job.change - 35 * MINUTE
        head = tokens(r.meta[job.sent[0]][3][:2]) // BLOCK
        for a, b in itertools.pairwise(job.sent):
            assert common(r.trace[a], r.trace[b]) == head
    assert len({job.unit for job in st.handoffs}) == len(st.units) >= 2
    jobs = {i: job for job in st.handoffs for i in job.sent}
    for j, i in st.reopens:  # a quarter re-opened, exactly, in the shift's first 45 minutes
        assert r.meta[j] == ("reopen", *r.meta[i][1:]) and r.trace[j] == r.trace[i]
        late = max(jobs[i].change + 45 * MINUTE, r.times[i] + 60)
        assert r.times[i] + 60 <= r.times[j] <= late
    assert len(st.reopens) == len(of_kind(r, "reopen")) > 0.1 * len(of_kind(r, "handoff"))
    assert len(st.reopens) < 0.4 * len(of_kind(r, "handoff"))


def test_a_stays_next_handoff_extends_its_record_until_the_window_drops_a_note():
    """A stay's hand-offs at consecutive shift changes: the later record is the earlier one
    with the new notes after it (its blocks extend the earlier request's, less the cue's),
    or, once the window is full, the same up to the notes, whose blocks are all new."""
    grown, dropped = 0, 0
    for seed in (1, 2):
        r, first = _small(seed), _first(seed)
        by_stay = defaultdict(list)
        for i in of_kind(r, "handoff"):
            by_stay[r.state.handoffs[r.meta[i][1]].stays[r.meta[i][2]]].append(i)
        for s, idx in by_stay.items():
            fixed = len(r.state.stays[s].record.fixed)
            for a, b in itertools.pairwise(idx):
                ra, rb = r.meta[a][3][2:-1], r.meta[b][3][2:-1]  # the records sent
                share = shared_tokens(r.meta[a][3], r.meta[b][3]) // BLOCK
                assert common(r.trace[a], r.trace[b]) == share
                if rb[:len(ra)] == ra:
                    assert share >= tokens(r.meta[a][3][:-1]) // BLOCK
                    grown += 1
                else:
                    assert len(rb) == fixed + STAY_WINDOW and len(ra) >= len(rb) - 1
                    assert ra[:fixed] == rb[:fixed] and ra[fixed] != rb[fixed]
                    assert share == tokens(r.meta[b][3][:2 + fixed]) // BLOCK
                    assert all(first[x] > a for x in r.trace[b][share:])
                    dropped += 1
    assert grown >= 20 and dropped >= 20


def test_discharge_summaries_free_the_bed():
    """A discharge summary (system prompt, template, the record as it stands, the cue) at
    10..15 local; each revision extends the last request; then the summary joins the chart,
    the coding job takes the stay and a new patient takes the bed 1..8 hours later."""
    revised, admitted = 0, 0
    for seed in (1, 2):
        r, st = _small(seed), _small(seed).state
        for s, stay in ((s, stay) for s, stay in enumerate(st.stays) if stay.sent):
            i, site = stay.sent[0], st.units[stay.unit].site
            record = stay.record.at(r.times[i])
            assert r.meta[i] == ("discharge", s, 0, _sys(r, "discharge", st.template, *record))
            assert 10 <= _local(r, r.times[i], site) < 15.5
            for a, b in itertools.pairwise(stay.sent):
                assert r.trace[b][:len(r.trace[a])] == r.trace[a]
                revised += 1
            if stay.discharged < END:
                assert stay.discharged == r.times[stay.sent[-1]]
                assert st.patients[stay.patient].chart.changes[-1][0] == stay.discharged
                nxt = [x for x in st.stays if (x.unit, x.bed) == (stay.unit, stay.bed)
                       and x.admitted > stay.discharged]
                if nxt:
                    gap = nxt[0].admitted - stay.discharged
                    assert ADMIT[0] * HOUR <= gap <= ADMIT[1] * HOUR
                    admitted += 1
    assert revised >= 5 and admitted >= 5


@pytest.mark.parametrize("seed", [1, 2])
def test_chat_sessions_extend_their_turns(seed):
    """Chart Q&A, on-call and lookup sessions: each turn re-sends the head, the history and
    a new question, so its blocks extend the last turn's. Chart sessions open on the chart as
    it stands (maybe with results after it), on-call ones on a stay's record at 19..07
    local, lookups on a popular document; lookups of one document share it whole."""
    r, st = _small(seed), _small(seed).state
    docs, kinds, pairs = defaultdict(list), Counter(), Counter()
    for n, ses in enumerate(st.sessions):
        i, t = ses.sent[0], r.times[ses.sent[0]]
        assert r.meta[i][:3] == (ses.kind, n, 0) and r.meta[i][3][:len(ses.head)] == ses.head
        if ses.kind == "chart":
            chart = st.patients[ses.about].chart.at(t)
            assert ses.head[1:1 + len(chart)] == chart and len(ses.head) - len(chart) <= 2
        elif ses.kind == "oncall":
            stay = st.stays[ses.about]
            assert ses.head == [_sys(r, "chart"), *stay.record.at(t)]
            assert not 7 <= _local(r, t, st.units[stay.unit].site) < 19
        else:
            assert ses.head == [_sys(r, "lookup"), *st.texts["doc"][ses.about]]
            docs[ses.about].append(i)
        for a, b in itertools.pairwise(ses.sent):
            assert r.trace[b][:len(r.trace[a])] == r.trace[a]
            pairs[ses.kind] += 1
        kinds[ses.kind] += 1
    assert min(kinds.values()) >= 5 and len(kinds) == 3
    assert pairs["chart"] >= 10 and pairs["oncall"] >= 3
    a, b, *_ = max(docs.values(), key=len)
    assert common(r.trace[a], r.trace[b]) >= tokens(r.meta[a][3][:-1]) // BLOCK


@pytest.mark.parametrize("seed", [1, 2])
def test_the_coding_job_walks_the_signed_notes_in_order(seed):
    """Each night at 23:00..23:30 the coding job takes every note signed since the last
    run (visits and discharges) in signing order: system prompt, the specialty's coding
    guideline, the note, the cue; two notes of one specialty share exactly the guideline."""
    r, st = _small(seed), _small(seed).state
    signed = sorted([(enc.signed, "visit", e) for e, enc in enumerate(st.encounters)
                     if enc.note is not None] +
                    [(s.discharged, "stay", k) for k, s in enumerate(st.stays) if s.sent
                     and s.discharged < END])
    runs = defaultdict(list)
    for i, kind, n in st.coded:
        runs[int(r.times[i] // DAY)].append((i, kind, n))
    last = 0.0
    for day in (0, 1):
        run = runs[day]
        start = r.times[run[0][0]]
        assert CODING[0] <= start / HOUR - 24 * day < CODING[1]
        assert [(k, n) for _, k, n in run] == [(k, n) for t, k, n in signed if last <= t < start]
        last = start
        by_spec = {}
        for i, kind, n in run:
            spec, note = ((st.encounters[n].spec, st.encounters[n].note) if kind == "visit"
                          else ("inpatient", st.stays[n].history[-1]))
            head = [_sys(r, "coding"), *st.texts["guideline"][spec]]
            assert r.meta[i] == ("coding", n, kind == "stay", _sys(r, "coding", *head[1:], note))
            if spec in by_spec:
                assert common(r.trace[by_spec[spec]], r.trace[i]) == tokens(head) // BLOCK
            by_spec.setdefault(spec, i)
        assert len(run) >= 20 and "inpatient" in by_spec
