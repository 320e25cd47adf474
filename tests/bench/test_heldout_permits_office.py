"""bench/heldout_permits_office.py: the held-out shape permits_office has the properties its
docstring names. Structure only: no policy, no hit rate."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from bench.heldout_fewshot import BLOCK
from bench.heldout_permit_desk import BURST, HOT, LANGS, ROUTE
from bench.heldout_permit_jobs import ACCEPT, NIGHTLY, NOTICES, OFFICE, RECORDS
from bench.heldout_permit_parts import DAY, END, HOUR, MINUTE
from bench.heldout_permits_office import KINDS, generate, permits_office
from tests.bench.trace_parts import (SmallRuns, check_chains, check_ordered, common, extends,
                                     shared_tokens, tokens)
from tests.bench.trace_parts import chats_of

SCALE = 0.2
SMALL = SmallRuns(generate, SCALE)  # each seed's run and first_seen, made once
_small, _first = SMALL.run, SMALL.first


def _hour(t):
    """The hour of the day (0..24) at ``t``."""
    return t % DAY / HOUR


def _new_from(r, first, i, k):
    """Whether every block of request ``i`` from block ``k`` on is first seen at ``i``."""
    return all(first[b] == i for b in r.trace[i][k:])


def test_deterministic_and_seeded():
    """Same seed, same trace; seeds differ in structure (the policy change, the contested
    project, the city's mix of permit types), not just in noise; requests are non-empty and
    in time order, and every kind is there."""
    assert permits_office(1, 0.05) == permits_office(1, 0.05) != permits_office(2, 0.05)
    assert generate(3, 0.05).trace == permits_office(3, 0.05)
    states = [_small(seed).state for seed in (1, 2, 3, 4)]
    assert len({s.change for s in states}) >= 2
    assert len({s.hot is None for s in states}) == 2
    assert len({tuple(k.weight for k in s.kinds) for s in states}) == 4
    for seed in (1, 2):
        check_ordered(_small(seed), KINDS)


@pytest.mark.parametrize("seed", [1, 2])
def test_sizes_and_span(seed):
    """At scale 0.2: 250K..500K blocks over the two days; every review and nightly walk that
    started before the last two hours finished (a review with its letter)."""
    r = _small(seed)
    assert 250_000 <= sum(map(len, r.trace)) <= 500_000
    assert 44 * HOUR < r.times[-1] < END and r.times[0] < 3 * HOUR
    s = r.state
    for w in [*s.reviews, *s.nights, *s.notice_walks, *(w for _, w in s.records)]:
        if r.times[w.sent[0]] < END - 2 * HOUR:
            assert w.pos == len(w.items) == len(w.sent)
    done = [w for w in s.reviews if r.times[w.sent[0]] < END - 2 * HOUR]
    letters = {(p, r.meta[i][2]) for i, p, what in s.letters if what != "notice"}
    assert all((w.owner, w.round) in letters for w in done)


def test_prefix_chains_are_well_formed():
    """A block id always follows the same parent; a request is the full blocks of its
    segments, the same segments always the same ids; two requests share exactly the blocks
    of the segments they start with."""
    check_chains(_small(1), 3)
    check_chains(_small(2), 5)


@pytest.mark.parametrize("seed", [1, 2])
def test_intake_checks_every_new_application(seed):
    """Every application made in the trace gets one intake check when it arrives: system
    prompt, the type's submittal requirements, the form, the sheet index (plan sets), cue."""
    r = _small(seed)
    s = r.state
    intake = {r.meta[i][1]: i for i in range(len(r.trace)) if r.meta[i][0] == "intake"}
    applied = [p for p, x in enumerate(s.permits) if 0 <= x.opened]
    assert sorted(intake) == applied and len(applied) > 15
    for p, i in intake.items():
        x = s.permits[p]
        segs = r.meta[i][3]
        assert r.times[i] == x.opened and segs[1:3] == [s.kinds[x.kind].requirements, x.form]
        assert len(segs) == 4 + bool(x.plans) and (x.plans or x.state == "issued")


def _review_prompt(s, w, sheet, t):
    x = s.permits[w.owner]
    d = x.discs[sheet]
    code = [s.chapters[c].at(t)[k] for c, k in s.digests[d]]
    prior = [w.prior[sheet]] if sheet in w.prior else []
    return [s.system["review"], s.kinds[x.kind].checklists[d], *code, x.form,
            x.plans.at(t)[sheet], *prior, s.cue["review"]]


@pytest.mark.parametrize("seed", [1, 2])
def test_plan_review_walks_each_set_sheet_by_sheet(seed):
    """An accepted plan set is reviewed in office hours (after the acceptance delay), sheet
    by sheet in discipline order: the checklist of the sheet's discipline, the code it quotes
    as it stands, the form, the sheet; sheets of one discipline share the head through the
    form. The letter lists the comments in sheet order."""
    r = _small(seed)
    s, shared = r.state, 0
    for w in s.reviews:
        x = s.permits[w.owner]
        t0 = r.times[w.sent[0]]
        assert x.discs == sorted(x.discs) and w.items[:len(w.sent)] == list(range(len(w.sent)))
        assert OFFICE[0] + ACCEPT[0] / 60 <= _hour(t0) < OFFICE[1] + ACCEPT[1] / 60
        assert (w.kind == "rereview") == (w.round > 0) and t0 >= x.opened
        assert len([v for v in x.plans.versions if v[0] <= t0]) == w.round + 1
        for i, sheet in zip(w.sent, w.items):
            assert r.meta[i] == (w.kind, w.owner, sheet, _review_prompt(s, w, sheet, r.times[i]))
        for (i, a), (j, b) in itertools.pairwise(zip(w.sent, w.items)):
            if x.discs[a] == x.discs[b]:
                k = r.meta[i][3].index(x.form) + 1
                assert r.meta[j][3][:k] == r.meta[i][3][:k]
                shared += common(r.trace[i], r.trace[j]) >= tokens(r.meta[i][3][:k]) // BLOCK
        for i, p, what in s.letters:
            if p == w.owner and r.meta[i][2] == w.round and what != "notice":
                segs = r.meta[i][3]
                assert segs[3:-1] == [w.found[k] for k in sorted(w.found)]
                assert (what == "corrections") == bool(w.found) and i > w.sent[-1]
    assert shared > 100


def test_a_resubmission_rereviews_the_set():
    """A resubmitted set is walked again: an unchanged sheet without a comment (and its code
    unchanged) sends exactly what the last round sent; a replaced sheet's blocks are new from
    the sheet on; a commented sheet carries the last comment before the cue."""
    same = fresh = commented = 0
    for seed in (1, 2):
        r, first = _small(seed), _first(seed)
        s = r.state
        last = {}
        for i, m in enumerate(r.meta):
            if m[0] not in ("review", "rereview"):
                continue
            x = s.permits[m[1]]
            k = m[3].index(x.form) + 1
            prev = last.get((m[1], m[2]))
            if m[0] == "rereview" and prev is not None:
                a = r.meta[prev][3]
                if a[:k + 1] == m[3][:k + 1] and len(a) == len(m[3]) == k + 2:
                    assert a == m[3] and r.trace[prev] == r.trace[i]
                    same += 1
                if a[k] != m[3][k]:
                    assert _new_from(r, first, i, tokens(m[3][:k]) // BLOCK)
                    fresh += 1
            if m[0] == "rereview":
                commented += len(m[3]) == k + 3
            last[(m[1], m[2])] = i
    assert same >= 10 and fresh >= 10 and commented >= 10


@pytest.mark.parametrize("seed", [1, 2])
def test_nightly_summary_of_the_days_applications(seed):
    """At 01:00..01:30 each night, the day before's applications in id order (system prompt,
    the type's summary template, the form), then each type's roll-up of those summaries."""
    r = _small(seed)
    s = r.state
    assert [w.owner for w in s.nights] == [0, 1]
    for w in s.nights:
        lo = w.owner * DAY
        assert NIGHTLY[0] <= (r.times[w.sent[0]] - lo) / HOUR < NIGHTLY[1]
        apps = [p for p in w.items if p >= 0]
        assert apps == [p for p, x in enumerate(s.permits) if lo - DAY <= x.opened < lo]
        for i, p in zip(w.sent, w.items):
            segs = r.meta[i][3]
            k = s.permits[p].kind if p >= 0 else -1 - p
            assert segs[:2] == [s.system["nightly"], s.kinds[k].template]
            if p < 0:
                assert segs[2:-1] == [s.summaries[q] for q in apps if s.permits[q].kind == k]


@pytest.mark.parametrize("seed", [1, 2])
def test_notice_letters_share_their_template(seed):
    """The afternoon's notice letters walk issued permits in id order from 16:00..16:30:
    system prompt, one of 3 templates, the permit's form; every letter adds to a file."""
    r = _small(seed)
    s = r.state
    for w in s.notice_walks:
        assert NOTICES[1][0] <= _hour(r.times[w.sent[0]]) < NOTICES[1][1]
        assert w.items == sorted(w.items) and len(w.items) >= 5
        for i, p in zip(w.sent, w.items):
            segs = r.meta[i][3]
            assert r.meta[i][:3] == ("letter", p, -1) and segs[1] in s.notices
            assert segs[2] == s.permits[p].form and s.permits[p].state == "issued"
    for i, p, what in s.letters:
        if what != "notice":
            assert r.times[i] in [t for t, _ in s.permits[p].log]


@pytest.mark.parametrize("seed", [1, 2])
def test_records_requests_read_each_archive_document_once(seed):
    """A records walk shares the system prompt and the request; every block from the
    document on is new, and steps share exactly the head."""
    r, first = _small(seed), _first(seed)
    s = r.state
    assert s.records
    for request, w in s.records:
        assert RECORDS[1][0] <= _hour(r.times[w.sent[0]]) < RECORDS[1][1]
        head = [s.system["records"], request]
        for i in w.sent:
            assert r.meta[i][3][:2] == head
            assert _new_from(r, first, i, tokens(head) // BLOCK)
        for i, j in itertools.pairwise(w.sent):
            assert common(r.trace[i], r.trace[j]) == tokens(head) // BLOCK


def _section_chapter(s):
    """Code section -> its chapter, over every version."""
    return {sec: c for c, ch in enumerate(s.chapters) for _, v in ch.versions for sec in v}


def test_applicant_chats_retrieve_code_into_each_turn():
    """An applicant turn sends the system prompt, the type's guide and fee section as they
    stand, (status questions) the permit's file, the history, 1..3 retrieved sections of the
    type's disciplines' chapters and the message; a turn extends the last one exactly while
    the fee section stays."""
    extended = status = 0
    for seed in (1, 2):
        r = _small(seed)
        s = r.state
        owner = _section_chapter(s)
        for n, chat in chats_of(r, "applicant"):
            kind = s.kinds[chat.owner]
            for k, i in enumerate(chat.sent):
                segs = r.meta[i][3]
                assert segs[:3] == [s.chat_system["applicant"], kind.guide,
                                    *kind.fees.at(r.times[i])]
                prev = len(r.meta[chat.sent[k - 1]][3]) + 1 if k else 3 + len(chat.fixed)
                got = segs[prev:-1]
                assert 1 <= len(got) <= 3
                assert all(s.discipline_of[owner[x]] in kind.discs for x in got)
            status += bool(chat.fixed)
            extended += extends(r, chat.sent, lambda i, j: r.meta[i][3][2] == r.meta[j][3][2])
    assert extended >= 50 and status >= 5


def test_policy_change_makes_later_blocks_new_and_bursts():
    """A fee change re-issues every type's fee section: applicant turns after it are new
    from the fee section on. The burst of policy chats starts after the change, most within
    three hours, each on the notice as it stands; the notice is translated into every
    language within three hours."""
    for seed in (1, 2):
        r, first = _small(seed), _first(seed)
        s = r.state
        t = s.changed[0]
        after = min(i for i, x in enumerate(r.times) if x >= t)
        if s.change != "code":
            assert all(k.fees.versions[1][0] == t for k in s.kinds)
            for n, chat in chats_of(r, "applicant"):
                for i in (i for i in chat.sent if r.times[i] >= t):
                    k = tokens(r.meta[i][3][:2]) // BLOCK
                    assert all(first[b] >= after for b in r.trace[i][k:])
        starts = [r.times[c.sent[0]] for _, c in chats_of(r, "policy")]
        assert min(starts) >= t + 5 * MINUTE and len(starts) >= BURST[0][0] * SCALE * 0.8
        assert sum(x < t + 3 * HOUR for x in starts) > 0.6 * len(starts)
        for n, chat in chats_of(r, "policy"):
            for i in chat.sent:
                assert r.meta[i][3][1:2] == s.notice.at(r.times[i])
        notice = {lang for i, lang, src in s.translations if src == "notice"
                  and t < r.times[i] < t + 3 * HOUR}
        assert notice == set(range(len(LANGS)))


def test_code_amendments_version_sections():
    """An amendment replaces sections of popular chapters: the old text is only sent before
    it, the new only after."""
    amended = 0
    for seed in (1, 2, 3, 4):
        r = _small(seed)
        s = r.state
        t = s.changed[0]
        assert bool(s.amended) == (s.change != "fee")
        for c, k in s.amended:
            old, new = s.chapters[c].at(t - 1)[k], s.chapters[c].at(t)[k]
            assert old != new
            sent = [i for i, m in enumerate(r.meta) if old in m[3] or new in m[3]]
            assert all((r.times[i] >= t) == (new in r.meta[i][3]) for i in sent)
            amended += any(r.times[i] >= t for i in sent)
    assert amended >= 3


@pytest.mark.parametrize("seed", [7, 12])
def test_a_corrected_notice_makes_later_policy_turns_new(seed):
    """On seeds whose notice is corrected (a fee change on 7, an amendment on 12), every
    policy turn after the correction sends it, new past the system prompt."""
    r, first = _small(seed), _first(seed)
    s = r.state
    assert len(s.changed) == 2 and s.changed[1] - s.changed[0] <= 3 * HOUR
    after = min(i for i, x in enumerate(r.times) if x >= s.changed[1])
    corrected = 0
    for i in (i for n, c in chats_of(r, "policy") for i in c.sent):
        if r.times[i] >= s.changed[1]:
            assert r.meta[i][3][1] == s.notice.versions[1][1][0]
            k = tokens(r.meta[i][3][:1]) // BLOCK
            assert all(first[b] >= after for b in r.trace[i][k:])
            corrected += 1
    assert corrected >= 5


def test_inspectors_chat_over_the_file_as_it_stands():
    """An inspection chat sends the type's inspection checklist and the permit's file with
    every entry so far; a result joins the file, so a re-inspection the next day shares the
    old file and adds to it."""
    again = 0
    for seed in (1, 2):
        r = _small(seed)
        s = r.state
        seen = {}
        for p, n, end in s.inspections:
            chat, x = s.chats[n], s.permits[p]
            for i in chat.sent:
                f = [x.form, *(e for w, e in x.log if w <= r.times[i])]
                head = [s.chat_system["inspect"], s.kinds[x.kind].inspection, *f]
                assert r.meta[i][3][:len(head)] == head and r.times[i] < end + HOUR
            i = chat.sent[0]
            if p in seen:
                j = seen[p]
                old = 3 + sum(w <= r.times[j] for w, _ in x.log)
                assert r.meta[i][3][:old] == r.meta[j][3][:old]
                assert common(r.trace[i], r.trace[j]) >= tokens(r.meta[j][3][:old]) // BLOCK
                again += sum(w <= r.times[i] for w, _ in x.log) > old - 3
            seen[p] = i
        days = Counter(int(r.times[s.chats[n].sent[0]] // DAY) for _, n, _ in s.inspections)
        assert days[0] > 20 and days[1] > 20
        assert min(_hour(r.times[s.chats[n].sent[0]]) for _, n, _ in s.inspections) >= ROUTE[1][0]
    assert again >= 3


def test_zoning_lookups_share_the_districts_regulations():
    """A zoning turn sends the district's regulations and the parcel record; on a seed with a
    contested project, lookups on its parcel (with the staff report) burst after it is
    published on day 1."""
    for seed in (1, 2):
        r = _small(seed)
        s = r.state
        for n, chat in chats_of(r, "zoning"):
            district, record = s.parcels[chat.owner]
            head = [s.chat_system["zoning"], *s.districts[district], record, *chat.fixed]
            assert all(r.meta[i][3][:len(head)] == head for i in chat.sent)
            extends(r, chat.sent, lambda i, j: True)
        if s.hot is None:
            continue
        parcel, report, published = s.hot
        hot = [r.times[c.sent[0]] for _, c in chats_of(r, "zoning") if c.fixed == [report]]
        assert len(hot) >= HOT[1][0] * SCALE * 0.7 and min(hot) >= published
        assert sum(x < published + 6 * HOUR for x in hot) > 0.6 * len(hot)


@pytest.mark.parametrize("seed", [1, 2])
def test_translation_desk(seed):
    """A translation sends the system prompt, the language's prompt and glossary, the text;
    Spanish the most asked; letters and code are translated again, fresh texts once."""
    r = _small(seed)
    s = r.state
    langs, sources = Counter(), Counter()
    for i, lang, src in s.translations:
        segs = r.meta[i][3]
        assert segs[:3] == [s.translate_system, *s.langs[lang]] and r.meta[i][1] == lang
        langs[lang] += 1
        sources[src] += 1
    assert max(langs, key=langs.__getitem__) == 0 and sources["fresh"] > sources["code"] > 0
    assert len(s.translations) > 30
