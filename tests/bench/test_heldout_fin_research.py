"""bench/heldout_finres.py: the held-out shape fin_research has the properties its docstring
names. Structure only: no policy, replay or hit rate."""

from __future__ import annotations

import itertools

import pytest

from bench.heldout_fewshot import BLOCK
from bench.heldout_finres import KINDS, fin_research, generate
from bench.heldout_finres_desk import MACRO, NOTE_HOURS, REVIEW_AFTER, SINCE
from bench.heldout_finres_filings import (BURST_HOURS, KIND, MODEL_AFTER, POSTED, SCREEN_START,
                                          SPEECH, STAGES)
from bench.heldout_finres_parts import DAY, END, FILING, HOUR, MINUTE, PRESS
from tests.bench.trace_parts import SmallRuns, check_chains, common, tokens

SCALE = 0.2
SEEDS = (1, 2)


SMALL = SmallRuns(generate, SCALE)  # each seed's run and first_seen, made once
_small, _first_seen = SMALL.run, SMALL.first


def _runs():
    return [_small(s) for s in SEEDS]


def _report(r, c):
    return next(rep for rep in r.reports if rep.company == c)


def test_deterministic_seeded_and_every_kind_present():
    assert fin_research(1, 0.05) == fin_research(1, 0.05) != fin_research(2, 0.05)
    assert generate(3, 0.05).trace == fin_research(3, 0.05)
    for r in _runs():
        assert r.times == sorted(r.times) and all(r.trace)
        assert {m[0] for m in r.meta} == set(KINDS)
    a, b = _runs()
    assert len(a.companies) != len(b.companies) and a.trace[:20] != b.trace[:20]
    assert [rep.company for rep in a.reports] != [rep.company for rep in b.reports]


@pytest.mark.parametrize("seed", SEEDS)
def test_sizes_and_span(seed):
    """At scale 0.2: 200K..500K blocks over two days, from the screening job after 01:00
    to the evening's transcripts; every request a whole number of its segments' blocks."""
    r = _small(seed)
    total = sum(len(q) for q in r.trace)
    assert 200_000 <= total <= 500_000
    assert SCREEN_START[0] * MINUTE <= r.times[0] and 40 * HOUR < r.times[-1] < END
    assert r.meta[0][0] == "screen"
    check_chains(r, 3)  # same content, same blocks; a block always follows the same parent


def _stage_head(r, d):
    doc = r.docs[d]
    return [r.state.system["ingest"], r.companies[doc.company].card, *doc.sections]


def _stage_prompt(r, d, stage):
    doc, st = r.docs[d], r.state
    extra = {"kpi": [st.schemas[r.companies[doc.company].sector]], "risk": [doc.risks],
             "compare": [doc.prior, doc.outputs.get("kpi")]}.get(stage, [])
    return [*_stage_head(r, d), *extra, st.cues[(doc.form, stage)]]


@pytest.mark.parametrize("seed", SEEDS)
def test_ingest_stages_fan_out_from_the_document(seed):
    """A document's stages run in order seconds after it arrives, each re-sending the
    system prompt, the card and the document exactly (their blocks shared, nothing more)
    before what the stage adds; a KPI stage's output becomes the company's KPI sheet."""
    r, forms = _small(seed), set()
    for d, doc in enumerate(r.docs):
        if not doc.sent:
            continue
        kind, stages = KIND[doc.form], STAGES[doc.form]
        first = [[i for i in doc.sent[s] if r.meta[i][0] == kind] for s in stages if s in doc.sent]
        assert all(len(f) == 1 for f in first) and len(first) == len(doc.sent)
        first = [f[0] for f in first]
        assert first == sorted(first) and 5 <= r.times[first[0]] - doc.time <= 40
        for k, i in enumerate(first):
            assert r.meta[i] == (kind, d, k, _stage_prompt(r, d, stages[k]))
        head = tokens(_stage_head(r, d)) // BLOCK
        assert all(common(r.trace[i], r.trace[j]) == head for i, j in itertools.pairwise(first))
        co = r.companies[doc.company]
        assert doc.prior == co.kpi.at(doc.time)[0]
        if "kpi" in doc.outputs:
            assert (r.times[doc.sent["kpi"][-1]], [doc.outputs["kpi"]]) in co.kpi.versions
        forms.add(doc.form)
    assert forms >= {"press", "transcript", "10-Q"}


def test_failed_stages_are_sent_again_exactly():
    """A stage whose output failed validation is re-sent, the same blocks, within minutes,
    and the next stage waits for it."""
    n = 0
    for r in _runs():
        for i, j in r.state.retries:
            assert r.meta[i][0] == "retry" and r.meta[i][1:] == r.meta[j][1:]
            assert r.trace[i] == r.trace[j] and 0 < r.times[i] - r.times[j] < 10 * MINUTE
            doc = r.docs[r.meta[i][1]]
            later = STAGES[doc.form][r.meta[i][2] + 1:]
            assert all(min(doc.sent[s]) > i for s in later if s in doc.sent)
            n += 1
    assert n >= 3


@pytest.mark.parametrize("seed", SEEDS)
def test_earnings_calendar_windows_and_sizes(seed):
    """Releases land at 06:00..08:00 on a 5-minute mark or 16:01..16:20, the call on a half
    hour after; the final transcript 1.5..4 h after the call (170..230 tokens a minute);
    the filing when the calendar says, reading the previous filing's risk factors."""
    r = _small(seed)
    for d in r.docs:
        if d.time < 0:
            continue
        rep, co = _report(r, d.company), r.companies[d.company]
        day, hour = d.time // DAY * DAY, d.time % DAY / HOUR
        if d.form == "press":
            assert d.time == rep.release and co.press.at(d.time) == d.sections
            assert PRESS[2] <= tokens(d.sections) <= PRESS[3]
            assert (6 <= hour <= 8 and round(d.time - day) % 300 == 0) or 16 < hour < 16.34
            assert rep.call > rep.release and rep.call % (HOUR / 2) == 0
        elif d.form == "transcript":
            end = rep.call + rep.length * MINUTE
            assert POSTED[0] * HOUR <= d.time - end <= POSTED[1] * HOUR
            lo, hi = (rep.length * s for s in SPEECH)
            assert lo - 1 <= tokens(d.sections) <= hi + 1
        else:
            assert d.time == rep.filed and d.form == rep.form
            assert d.risks == co.filing.versions[0][1][-1]
            assert FILING[d.form][2] <= tokens(d.sections) <= FILING[d.form][3]


@pytest.mark.parametrize("seed", SEEDS)
def test_live_call_notes_grow_with_the_transcript(seed):
    """A core name's call: notes every 4..6 minutes over the system prompt, the card, the KPI
    sheet at the call's start and every chunk so far; each extends the last up to its
    chunks, the last at the call's end."""
    r = _small(seed)
    assert r.calls
    for n, call in enumerate(r.calls):
        rep = r.reports[call.report]
        co = r.companies[rep.company]
        assert co.core and call.head == [r.state.system["call"], co.card, co.kpi.at(rep.call)[0]]
        assert call.end == rep.call + rep.length * MINUTE
        cue = r.state.cues[("call", "")]
        for k, i in enumerate(call.sent):
            assert r.meta[i] == ("call", n, k, [*call.head, *call.chunks[:k + 1], cue])
            assert rep.call < r.times[i] <= call.end
        assert r.times[call.sent[-1]] == call.end or call.end >= END
        for k, (i, j) in enumerate(itertools.pairwise(call.sent)):
            assert 0 < r.times[j] - r.times[i] <= 6 * MINUTE
            assert common(r.trace[i], r.trace[j]) == tokens([*call.head,
                                                             *call.chunks[:k + 1]]) // BLOCK


def test_the_screen_walks_the_universe_in_order():
    """Each night one template goes over every company in the universe's order (sector,
    then market cap), sharing the system prompt and template; a second night on the same
    template re-sends a company exactly unless its KPI sheet changed (then its blocks part
    at the sheet), on a new template only the system prompt is shared (seeds 1..8 hold
    both)."""
    seen = set()
    for r in map(_small, range(1, 9)):
        st = r.state
        for job in r.screens:
            assert [r.meta[i][1:3] for i in job.sent] == [(c, job.night) for c in
                                                         range(len(r.companies))]
            assert SCREEN_START[0] * MINUTE <= r.times[job.sent[0]] - job.night * DAY
            assert r.times[job.sent[0]] - job.night * DAY <= SCREEN_START[1] * MINUTE
            for c, i in enumerate(job.sent):
                co = r.companies[c]
                assert r.meta[i][3] == [st.system["screen"], job.template, co.card,
                                        *co.kpi.at(r.times[i]), st.cues[("screen", "")]]
        a, b = r.screens
        same = a.template == b.template
        for c, (i, j) in enumerate(zip(a.sent, b.sent)):
            changed = r.meta[i][3][3] != r.meta[j][3][3]
            head = [st.system["screen"], a.template, r.companies[c].card] if same else [
                st.system["screen"]]
            want = len(r.trace[i]) if same and not changed else tokens(head) // BLOCK
            assert common(r.trace[i], r.trace[j]) == want
            seen.add((same, changed) if same else "new")
    assert seen == {(True, True), (True, False), "new"}


@pytest.mark.parametrize("seed", SEEDS)
def test_news_bursts_and_growing_digests(seed):
    """A burst (06..21) tags its articles one by one; every third and the last, the digest
    re-sends all of them in order, extending the previous digest."""
    r = _small(seed)
    st = r.state
    for n, b in enumerate(r.bursts):
        card = r.companies[b.company].card
        assert BURST_HOURS[0] * HOUR <= r.times[b.sent[0]] % DAY <= BURST_HOURS[1] * HOUR
        for k, i in enumerate(b.sent):
            assert r.meta[i] == ("news", n, k, [st.system["news"], card, b.seen[k],
                                                st.cues[("news", "")]])
        counts = [r.meta[i][2] for i in b.digests]
        assert counts == [k for k in range(1, b.articles + 1) if k % 3 == 0 or k == b.articles
                          ][:len(counts)]
        for i, c in zip(b.digests, counts):
            assert r.meta[i] == ("digest", n, c, [st.system["digest"], card, *b.seen[:c],
                                                  st.cues[("digest", "")]])
        for (i, c), j in zip(zip(b.digests, counts), b.digests[1:]):
            assert common(r.trace[i], r.trace[j]) == tokens([st.system["digest"], card,
                                                             *b.seen[:c]]) // BLOCK
        assert b.sent == sorted(b.sent) and len(b.sent) == b.articles or r.times[-1] > 45 * HOUR


def _chats(r, kind):
    return [(n, c) for n, c in enumerate(r.chats) if c.kind == kind]


def _turns_extend(r, chat, n):
    """A fixed-head session's turns: numbered, each the head, the history and the message,
    and each turn's blocks extend the previous turn's."""
    for k, i in enumerate(chat.sent):
        assert r.meta[i][:3] == (chat.kind, n, k) and r.meta[i][3][:len(chat.head)] == chat.head
        assert r.meta[i][3][len(chat.head):-1] == chat.history[:2 * k]
    for i, j in itertools.pairwise(chat.sent):
        assert r.trace[j][:len(r.trace[i])] == r.trace[i] and r.times[j] > r.times[i]


def _summary_time(r, d):
    return r.times[r.docs[d].sent["summary"][-1]] if r.docs[d].sent else r.docs[d].time


@pytest.mark.parametrize("seed", SEEDS)
def test_morning_notes_read_the_nights_outputs(seed):
    """At 05:30..06:15 each sector with news drafts a note: system prompt, house style, the
    summaries of the sector's releases and transcripts since the previous close in arrival
    order, then last night's screen hits; each finished note goes to compliance."""
    r = _small(seed)
    st, days = r.state, set()
    for n, chat in _chats(r, "note"):
        t, s = r.times[chat.sent[0]], chat.about[0]
        day = int(t // DAY)
        assert NOTE_HOURS[0] * HOUR <= t - day * DAY <= NOTE_HOURS[1] * HOUR
        docs = [d for d, doc in enumerate(r.docs) if r.companies[doc.company].sector == s
                and day * DAY - SINCE <= doc.time and "summary" in doc.outputs
                and _summary_time(r, d) <= t]
        hits = [o for c, o in sorted(r.screens[day].hits.items()) if r.companies[c].sector == s]
        assert chat.head == [st.system["note"], *st.style,
                             *(r.docs[d].outputs["summary"] for d in docs), *hits]
        _turns_extend(r, chat, n)
        assert [rev.chat for rev in r.reviews].count(n) == 1
        days.add(day)
    assert days == {0, 1}


def test_compliance_reviews_the_note_behind_the_manual():
    """A review starts 5..25 minutes after the note's session: system prompt, manual,
    the restricted list as it stands, the note, a cue; the second step extends the first
    with its finding. After the list changes, the next review's blocks from it on are new."""
    changes = 0
    for seed in SEEDS:
        r, first = _small(seed), _first_seen(seed)
        st = r.state
        for n, rev in enumerate(r.reviews):
            a, b = rev.sent
            gap = r.times[a] - r.times[r.chats[rev.chat].sent[-1]]
            assert REVIEW_AFTER[0] * MINUTE <= gap <= REVIEW_AFTER[1] * MINUTE
            head = [st.system["compliance"], *st.policy, *st.restricted.at(r.times[a])]
            assert r.meta[a] == ("compliance", n, 0, [*head, rev.note, st.review_cues[0]])
            assert r.meta[b][3] == [*head, rev.note, st.review_cues[0], rev.finding,
                                    st.review_cues[1]]
            assert r.trace[b][:len(r.trace[a])] == r.trace[a]
        cut = tokens([st.system["compliance"], *st.policy]) // BLOCK
        for t, _ in st.restricted.versions[1:]:
            nxt = [rev.sent[0] for rev in r.reviews if r.times[rev.sent[0]] >= t][:1]
            for j in nxt:
                assert all(first[x] == j for x in r.trace[j][cut:])
                changes += 1
    assert changes >= 1


@pytest.mark.parametrize("seed", SEEDS)
def test_peer_sessions_resend_releases_in_varied_orders(seed):
    """An analyst compares a company (a recent reporter or any) with 1..4 of its peers in the
    tool's order or their own: each one's card and latest release, the company first."""
    r = _small(seed)
    orders = set()
    for n, chat in _chats(r, "peer"):
        t, (c, *peers) = r.times[chat.sent[0]], chat.about
        listed = r.companies[c].peers[:len(peers)]
        assert 8 * HOUR <= t % DAY < 19 * HOUR and sorted(peers) == sorted(listed)
        head = [r.state.system["peer"]]
        for p in chat.about:
            head += [r.companies[p].card, *r.companies[p].press.at(t)]
        assert chat.head == head
        _turns_extend(r, chat, n)
        if n in r.state.tool_order:
            assert peers == listed
            orders.add("tool")
        elif peers != listed:
            orders.add("analyst")
    assert orders == {"tool", "analyst"}


def test_model_updates_follow_guidance_and_edit_the_model():
    """A core name's model update starts 20..120 minutes after a guidance stage: system
    prompt, the model's tabs as they stand, the guidance output; it rewrites 1..3 tabs, so
    the company's next update holds no block from the first rewritten tab on."""
    later = 0
    for seed in SEEDS:
        r, first = _small(seed), _first_seen(seed)
        for n, chat in _chats(r, "model"):
            d, t = chat.about[0], r.times[chat.sent[0]]
            doc = r.docs[d]
            co = r.companies[doc.company]
            wait = t - r.times[doc.sent["guidance"][-1]]
            assert MODEL_AFTER[0] * MINUTE <= wait <= MODEL_AFTER[1] * MINUTE and co.core
            assert doc.form == "transcript" or _report(r, doc.company).guidance
            assert chat.head == [r.state.system["model"], *co.tabs.at(t), doc.outputs["guidance"]]
            _turns_extend(r, chat, n)
            edits = [e for e in r.state.tab_edits if e[0] == r.times[chat.sent[-1]]]
            assert len(edits) == 1 and edits[0][1] == doc.company and 1 <= len(edits[0][2]) <= 3
            nxt = [c for c in r.chats[n + 1:] if c.kind == "model"
                   and r.docs[c.about[0]].company == doc.company][:1]
            for c in nxt:
                j = c.sent[0]
                cut = tokens(c.head[:1 + min(edits[0][2])]) // BLOCK
                assert all(first[x] == j for x in r.trace[j][cut:])
                later += 1
    assert later >= 1


def test_the_risk_bot_reads_each_funds_snapshot_as_it_stands():
    """A risk question: system prompt, the fund's daily report and its snapshot as they
    stand (refreshed every half hour 09:30..16:00), history, question. Turns under one
    snapshot extend each other; the fund's first question after a refresh holds no block
    from the snapshot on that was requested before. A macro shock's day has more."""
    refreshed = 0
    for seed in SEEDS:
        r, first = _small(seed), _first_seen(seed)
        for n, chat in _chats(r, "risk"):
            f = r.funds[chat.about[0]]
            assert 8 * HOUR <= r.times[chat.sent[0]] % DAY < 17 * HOUR
            for k, i in enumerate(chat.sent):
                t = r.times[i]
                head = [r.state.system["risk"], *f.report.at(t), *f.snapshot.at(t)]
                assert r.meta[i] == ("risk", n, k, [*head, *chat.history[:2 * k + 1]])
            for i, j in itertools.pairwise(chat.sent):
                if r.meta[i][3][2] == r.meta[j][3][2]:
                    assert r.trace[j][:len(r.trace[i])] == r.trace[i]
        for fi, f in enumerate(r.funds):
            times = [t for t, _ in f.snapshot.versions[1:]]
            assert [t % DAY / HOUR for t in times] == [9.5 + k / 2 for k in range(14)] * 2
            mine = [i for c in r.chats if c.kind == "risk" and c.about[0] == fi for i in c.sent]
            for t in times:
                j = min((i for i in mine if r.times[i] >= t), default=None)
                if j is not None and r.meta[j][3][2] == f.snapshot.at(t)[0]:
                    cut = tokens(r.meta[j][3][:2]) // BLOCK
                    assert all(first[x] == j for x in r.trace[j][cut:])
                    refreshed += 1
        if r.state.macro:
            days = [int(r.times[c.sent[0]] // DAY) for _, c in _chats(r, "risk")]
            assert days.count(1) >= days.count(0)
            assert sum(8.5 * HOUR <= r.times[b.sent[0]] - DAY <= 10 * HOUR
                       for b in r.bursts) >= MACRO[2]
    assert refreshed >= 10 and any(_small(s).state.macro for s in SEEDS)
