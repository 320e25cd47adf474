"""bench/heldout_recruiting.py: the held-out shape recruiting has the properties its docstring
names. Structure only: no policy, no hit rate."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from bench.heldout_fewshot import BLOCK
from bench.heldout_recruit_desk import ORDERS
from bench.heldout_recruit_jobs import BATCH_HOURS, FAIR, MATCH_HOURS, MATCHES
from bench.heldout_recruit_parts import DAY, END, HOUR, local
from bench.heldout_recruiting import KINDS, generate, recruiting
from tests.bench.trace_parts import (SmallRuns, blocks_by_kind, check_chains, check_ordered,
                                     common, extends, of_kind, shared_tokens, tokens)
from tests.bench.trace_parts import chats_of

SCALE = 0.2


SMALL = SmallRuns(generate, SCALE)  # each seed's run and first_seen, made once
_small, _first = SMALL.run, SMALL.first


def _hour(r, t, e):
    """The local hour (0..24) at ``t`` of employer ``e``."""
    return local(t, r.state.employers[e].tz) % 24


def test_deterministic_and_seeded():
    """Same seed, same trace; seeds differ in structure (time zones, the fair's employer,
    how many requisitions), not just in noise; requests are non-empty and in time order."""
    assert recruiting(1, 0.05) == recruiting(1, 0.05) != recruiting(2, 0.05)
    assert generate(3, 0.05).trace == recruiting(3, 0.05)
    a, b = _small(1).state, _small(2).state
    assert [e.tz for e in a.employers] != [e.tz for e in b.employers]
    assert (a.fair_employer, len(a.reqs)) != (b.fair_employer, len(b.reqs))
    for seed in (1, 2):
        check_ordered(_small(seed), KINDS)


@pytest.mark.parametrize("seed", [1, 2])
def test_sizes_and_span(seed):
    """At scale 0.2: 200K..400K blocks over two days, screening the largest kind; every job
    walk finished."""
    r = _small(seed)
    blocks = blocks_by_kind(r)
    assert 200_000 <= sum(blocks.values()) <= 400_000
    assert max(blocks, key=blocks.__getitem__) == "screen"
    assert 44 * HOUR < r.times[-1] < END and r.times[0] < 3 * HOUR
    s = r.state
    walks = [*s.batches, *(w for _, w in s.rescreens), *s.nights, *(w for *_, w in s.campaigns)]
    assert all(w.pos == len(w.items) == len(w.sent) for w in walks)


def test_prefix_chains_are_well_formed():
    """A block id always follows the same parent; a request is the full blocks of its
    segments, the same segments always the same ids; two requests share exactly the blocks
    of the segments they start with."""
    check_chains(_small(1), 3)


@pytest.mark.parametrize("seed", [1, 2])
def test_screening_batches(seed):
    """Each employer's batch starts at local 05..07 and takes every application its open
    requisitions got since the last batch, in order; each is the system prompt, the job
    description, the rubric as it stands, the resume, the cue; requests of one requisition
    share that head, and every block from the resume on is new."""
    r, first = _small(seed), _first(seed)
    s, seen, done = r.state, set(), []
    for w in s.batches:
        t = r.times[w.sent[0]]
        assert BATCH_HOURS[0] <= _hour(r, t, w.owner) < BATCH_HOURS[1]
        assert all(s.reqs[s.apps[a].req].employer == w.owner and s.apps[a].time <= t
                   for a in w.items)
        done += w.items
        for i, a in zip(w.sent, w.items):
            app, req = s.apps[a], s.reqs[s.apps[a].req]
            head = [s.system["screen"], req.jd, *req.rubric.at(r.times[i])]
            assert r.meta[i] == ("screen", w.owner, a, [*head, app.resume, s.cue["screen"]])
            if (app.req, app.resume, head[2]) not in seen:
                seen.add((app.req, app.resume, head[2]))
                assert all(first[b] == i for b in r.trace[i][tokens(head) // BLOCK:])
    steady = [a for q, req in enumerate(s.reqs) if q not in s.fair_reqs for a in req.apps
              if s.apps[a].time < r.times[-1] - DAY]
    assert set(steady) <= set(done) and len(done) == len(set(done)) > 200
    by_req = [[a for a in done if s.apps[a].req == q] for q in range(len(s.reqs))]
    assert all(x == s.reqs[q].apps[:len(x)] for q, x in enumerate(by_req))


def test_a_rubric_edit_rescreens_every_screened_application():
    """After a rubric edit the requisition's applications screened so far are screened again
    in order: each shares the earlier screen's blocks up to the rubric, none after."""
    checked = 0
    for seed in (1, 2):
        r = _small(seed)
        s = r.state
        for t, w in s.rescreens:
            req = s.reqs[w.owner]
            assert w.items == req.apps[:len(w.items)] and w.items
            assert [v[0] for v in req.rubric.versions].count(t) == 1
            for i, a in zip(w.sent, w.items):
                assert r.meta[i][:3] == ("rescreen", w.owner, a) and r.times[i] >= t
                prev = max(j for j in range(i) if r.meta[j][0] in ("screen", "fair")
                           and r.meta[j][2] == a)
                cut = tokens([s.system["screen"], req.jd]) // BLOCK
                assert common(r.trace[prev], r.trace[i]) == cut
                checked += 1
    assert checked >= 5


@pytest.mark.parametrize("seed", [1, 2])
def test_the_job_fair_is_a_burst_screened_on_arrival(seed):
    """On day 1 the fair employer's new requisitions get a burst of applications in local
    10..16, each screened the moment it arrives with the screening prompt."""
    r = _small(seed)
    s = r.state
    fair = of_kind(r, "fair")
    assert len(fair) >= FAIR[1][0] * SCALE * 0.9 and len(s.fair_reqs) >= FAIR[0][0]
    for i in fair:
        _, q, a, segs = r.meta[i]
        assert q in s.fair_reqs and s.apps[a].time == r.times[i] and s.apps[a].req == q
        assert segs[0] == s.system["screen"] and segs[-2] == s.apps[a].resume
        h = local(r.times[i], s.employers[s.fair_employer].tz)
        assert 24 + FAIR[2][0] <= h < 24 + FAIR[2][1]
    assert r.times[fair[-1]] - r.times[fair[0]] < 6 * HOUR


@pytest.mark.parametrize("seed", [1, 2])
def test_the_nightly_match_walks_alert_candidates_in_id_order(seed):
    """Each night from 02..03 UTC every candidate with alerts on, in id order: the system
    prompt, the profile, the MATCHES open requisitions of the family nearest its seniority;
    the second night re-sends a candidate's prompt exactly when neither changed."""
    r = _small(seed)
    s = r.state
    same = 0
    for night, w in enumerate(s.nights):
        assert MATCH_HOURS[0] <= (r.times[w.sent[0]] - night * DAY) / HOUR < MATCH_HOURS[1]
        assert w.items == sorted(w.items) and len(w.items) > 100
        assert all(s.cands[c].alerts for c in w.items)
        for i, c in zip(w.sent, w.items):
            segs, t = r.meta[i][3], r.times[i]
            assert r.meta[i][:3] == ("match", c, night) and segs[1] == s.cands[c].cv.at(t)[1]
            fam = [q for q, req in enumerate(s.reqs) if req.opened <= t
                   and req.field == s.cands[c].field]
            fam.sort(key=lambda q: (abs(s.reqs[q].level - s.cands[c].level), q))
            assert segs[2:-1] == [s.reqs[q].summary for q in fam[:MATCHES]]
    for i, j in zip(s.nights[0].sent, s.nights[1].sent):
        assert r.meta[i][1] == r.meta[j][1]
        same += r.meta[i][3] == r.meta[j][3]
        assert (r.trace[i] == r.trace[j]) == (r.meta[i][3] == r.meta[j][3])
    assert same > 50


@pytest.mark.parametrize("seed", [1, 2])
def test_outreach_shares_the_campaign_head(seed):
    """A campaign drafts one email per sourced candidate of the requisition's family: the
    system prompt, the company profile, the template, the summary, then the profile."""
    r = _small(seed)
    s = r.state
    for n, (q, k, w) in enumerate(s.campaigns):
        req = s.reqs[q]
        emp = s.employers[req.employer]
        head = [s.system["outreach"], emp.company, emp.templates[k], req.summary]
        assert len(set(w.items)) == len(w.items) >= 10
        for i, c in zip(w.sent, w.items):
            assert s.cands[c].field == req.field
            assert r.meta[i] == ("outreach", n, c, [*head, s.cands[c].cv.at(r.times[i])[1],
                                                    s.cue["outreach"]])
            assert 9 <= _hour(r, r.times[w.sent[0]], req.employer) < 18
        for i, j in itertools.pairwise(w.sent):
            assert common(r.trace[i], r.trace[j]) >= tokens(head) // BLOCK
    assert len(s.campaigns) >= 2


def test_feedback_summaries_grow_note_by_note():
    """Each interviewer's notes land after the interview ends and the summary is re-run: the
    prompt re-sends the last one's notes exactly and adds the new note before the cue."""
    loops = 0
    for seed in (1, 2):
        r = _small(seed)
        s = r.state
        for n, loop in enumerate(s.loops):
            assert [r.meta[i][2] for i in loop.sent] == list(range(1, len(loop.sent) + 1))
            assert len(loop.sent) <= len(loop.ends) and s.apps[loop.app].score is not None
            for k, i in enumerate(loop.sent):
                assert r.times[i] > sorted(loop.ends)[k]
                assert r.meta[i][3][3:-1] == loop.notes[:k + 1]
            for i, j in itertools.pairwise(loop.sent):
                a = r.meta[i][3][:-1]
                assert r.meta[j][3][:len(a)] == a
                assert common(r.trace[i], r.trace[j]) == shared_tokens(r.meta[i][3],
                                                                       r.meta[j][3]) // BLOCK
            loops += len(loop.sent) > 1
    assert loops >= 5


def test_shortlist_sessions_resend_profiles_in_the_recruiters_order():
    """A session holds the requisition's best-scored screened applications, sorted one of
    ORDERS' ways; a re-sort re-sends the same profiles in the new order (new blocks from the
    first that moved), otherwise a turn extends the last one exactly."""
    resorts = extended = 0
    for seed in (1, 2):
        r = _small(seed)
        s = r.state
        for n, chat in chats_of(r, "shortlist"):
            req = s.reqs[chat.owner]
            assert 9 <= _hour(r, r.times[chat.sent[0]], req.employer) < 18
            assert set(chat.order) <= set(req.apps) and len(chat.order) >= 3
            assert chat.order == s.ordered(chat.order, chat.sort) and chat.sort in ORDERS
            moved = {k for k, _ in chat.resorts}
            for k, i in enumerate(chat.sent):
                segs = r.meta[i][3]
                assert r.meta[i][:3] == ("shortlist", n, k) and segs[1] == req.jd
                assert sorted(segs[3:3 + len(chat.order)]) == sorted(
                    s.apps[a].profile for a in chat.order)
            for k, sort in chat.resorts:
                prev = r.meta[chat.sent[k - 1]][3][3:3 + len(chat.order)]
                now = r.meta[chat.sent[k]][3][3:3 + len(chat.order)]
                resorts += prev != now
            extended += extends(r, chat.sent, lambda i, j, c=chat, m=moved: c.sent.index(j) not in m
                                 and r.meta[i][3][2] == r.meta[j][3][2])
    assert resorts >= 3 and extended >= 20


def test_debriefs_hold_the_days_loops():
    """A hiring manager's debrief at local 16:30..18:00 on the loops' day holds each loop's
    candidate profile and a summary the feedback runs wrote, after the JD and rubric."""
    checked = 0
    for seed in (1, 2):
        r = _small(seed)
        s = r.state
        for n, chat in chats_of(r, "debrief"):
            req = s.reqs[chat.owner]
            t = r.times[chat.sent[0]]
            assert 16.5 <= _hour(r, t, req.employer) < 18
            loops = [x for x in s.loops if x.req == chat.owner and r.times[x.sent[0]] <= t]
            pairs = list(zip(chat.fixed[::2], chat.fixed[1::2]))
            assert pairs and all(any(p == s.apps[x.app].profile and m in x.summaries
                                     for x in loops) for p, m in pairs)
            for i in chat.sent:
                assert r.meta[i][3][:2] == [s.chat_system["debrief"], req.jd]
            checked += extends(r, chat.sent, lambda i, j: r.meta[i][3][2] == r.meta[j][3][2])
    assert checked >= 5


def test_scheduling_chats_see_the_hours_availability():
    """A scheduling turn sends the employer's availability of that hour: turns in one hour
    extend the last exactly; in a new hour every block from the availability on is new."""
    fresh = same = 0
    for seed in (1, 2):
        r, first = _small(seed), _first(seed)
        s = r.state
        for n, chat in chats_of(r, "schedule"):
            for i in chat.sent:
                assert r.meta[i][3][1] == s.slots[(chat.owner, int(r.times[i] // HOUR))]
            same += extends(r, chat.sent, lambda i, j: r.times[i] // HOUR == r.times[j] // HOUR)
            for i, j in itertools.pairwise(chat.sent):
                if r.times[i] // HOUR != r.times[j] // HOUR:
                    k = tokens(r.meta[j][3][:1]) // BLOCK
                    fresh += all(first[b] == j for b in r.trace[j][k:])
    assert same >= 50 and fresh >= 3


def test_faq_sessions_share_the_employers_head():
    """Every FAQ turn of an employer starts with the same system prompt, company profile and
    FAQ; the fair's applicants add sessions during the fair."""
    for seed in (1, 2):
        r = _small(seed)
        s = r.state
        heads = {}
        for n, chat in chats_of(r, "faq"):
            emp = s.employers[chat.owner]
            head = [s.chat_system["faq"], emp.company, *emp.faq]
            for i in chat.sent:
                assert r.meta[i][3][:len(head)] == head
                k = heads.setdefault(chat.owner, r.trace[i][:tokens(head) // BLOCK])
                assert r.trace[i][:len(k)] == k
        e, tz = s.fair_employer, s.employers[s.fair_employer].tz

        def count(day):
            return sum(1 for n, c in chats_of(r, "faq") if c.owner == e and FAIR[2][0] <= local(
                r.times[c.sent[0]], tz) - 24 * day < FAIR[2][1])
        assert count(1) > count(0) + 3


def test_offer_revisions_change_only_the_terms():
    """An offer is the system prompt, the offer template, the JD, the profile, the terms, the
    cue; a revision shares everything before the terms, every block after is new."""
    revised = 0
    for seed in (1, 2):
        r, first = _small(seed), _first(seed)
        s = r.state
        assert len({a for a, _ in s.offers}) == len(s.offers)
        for n, (a, sent) in enumerate(s.offers):
            req = s.reqs[s.apps[a].req]
            head = [s.offer_system, s.employers[req.employer].offer, req.jd, s.apps[a].profile]
            for k, i in enumerate(sent):
                assert r.meta[i][:3] == ("offer", n, k) and r.meta[i][3][:4] == head
            for i, j in itertools.pairwise(sent):
                assert common(r.trace[i], r.trace[j]) == tokens(head) // BLOCK
                assert all(first[b] == j for b in r.trace[j][tokens(head) // BLOCK:])
                revised += 1
    assert revised >= 3


def test_applications_follow_the_local_day():
    """Applications arrive by the candidates' local evening peak: more in 18..22 than 02..06."""
    r = _small(1)
    s = r.state
    hours = Counter(int(_hour(r, a.time, s.reqs[a.req].employer)) for a in s.apps
                    if a.req not in s.fair_reqs)
    assert sum(hours[h] for h in range(18, 22)) > 5 * sum(hours[h] for h in range(2, 6)) > 0
