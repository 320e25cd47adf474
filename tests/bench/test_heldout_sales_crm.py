"""bench/heldout_sales_crm.py: the held-out shape sales_crm has the properties its docstring
names. Structure only: no policy, no hit rate."""

from __future__ import annotations

import itertools

from bench.heldout_crm_desk import RUSH
from bench.heldout_crm_jobs import RECENT, REVIEW
from bench.heldout_crm_world import DAY, END, HOUR, MINUTE, PRODUCTS, PROMO_AT, SCENARIOS, local
from bench.heldout_fewshot import BLOCK
from bench.heldout_sales_crm import KINDS, generate, sales_crm
from tests.bench.trace_parts import (SmallRuns, blocks_by_kind, by_kind, check_chains,
                                     check_ordered, common, extends, of_kind, shared_tokens,
                                     tokens)

SCALE = 0.2
SMALL = SmallRuns(generate, SCALE)  # each seed's run and first_seen, made once
_small, _first = SMALL.run, SMALL.first


def _new_from(r, first, i, k):
    """Whether every block of request ``i`` from block ``k`` on is first seen there."""
    return all(first[b] == i for b in r.trace[i][k:])


def test_deterministic_and_seeds_differ_in_structure():
    """Same seed, same trace; seeds 1..4 are a normal week, a launch week, a quarter's end
    and a trade-show week, which differ in what they hold, not just in noise."""
    assert sales_crm(1, SCALE) == _small(1).trace != _small(2).trace
    normal, launch, qe, event = (_small(seed).state for seed in (1, 2, 3, 4))
    assert [s.scenario for s in (normal, launch, qe, event)] == list(SCENARIOS)
    assert len(launch.sheets) == PRODUCTS + 1 and launch.launch is not None
    assert all(len(s.sheets) == PRODUCTS and s.launch is None for s in (normal, qe, event))
    assert [len(s.pricing.versions) for s in (normal, launch, qe, event)] == [1, 1, 2, 1]
    assert {x.source for x in event.leads} == {"inbound", "list", "badge"}
    assert {x.source for x in qe.leads} == {"inbound"}
    assert [t.tz for t in normal.teams] != [t.tz for t in event.teams]


def test_sizes_span_and_walks():
    """At scale 0.2: 0.2M..0.5M blocks over two days, every kind there, in time order; a
    job's walk that started two hours before the end has finished."""
    for seed in (1, 2, 3, 4):
        r = _small(seed)
        assert 200_000 <= sum(blocks_by_kind(r).values()) <= 500_000
        check_ordered(r, KINDS)
        assert r.times[0] < 2 * HOUR and 46 * HOUR < r.times[-1] < END
        s = r.state
        for w in [*s.walks, *s.batches, *s.campaigns, *(w for _, w in s.calls)]:
            if w.sent and r.times[w.sent[0]] < END - 2 * HOUR:
                assert w.pos == len(w.items) == len(w.sent)


def test_prefix_chains_are_well_formed():
    """A block id always follows the same parent; a request is the full blocks of its
    segments, the same segments the same ids; two requests share exactly the blocks of the
    segments they start with."""
    check_chains(_small(1), 3)
    check_chains(_small(2), 7)


def _brief_pairs(r, first):
    """Consecutive briefs of an account: the later one re-sends the earlier's history and
    adds the entries landed between, all of their blocks new. How many grew."""
    s, grown = r.state, 0
    for a, sent in by_kind(r, "brief", lambda m: m[1]).items():
        acc = s.accounts[a]
        for i in sent:
            hist = acc.history(r.times[i])
            assert r.meta[i][3] == [s.desk["brief"], acc.profile, *hist, s.desk_cues["brief"][0]]
        for i, j in itertools.pairwise(sent):
            a_segs, b_segs = r.meta[i][3], r.meta[j][3]
            assert b_segs[:len(a_segs) - 1] == a_segs[:-1]
            if len(b_segs) > len(a_segs):
                grown += _new_from(r, first, j, tokens(a_segs[:-1]) // BLOCK)
    return grown


def test_history_grows_in_briefs_threads_and_chats():
    """Briefs re-send an account's history and add what landed; a thread's suggestions re-send
    the thread as it grew (a rewrite differs only in its cue); a chat's turn extends the last
    one exactly."""
    grown = rewrites = grew = chats = 0
    for seed in (1, 3):
        r, first = _small(seed), _first(seed)
        s = r.state
        grown += _brief_pairs(r, first)
        for th in s.threads:
            for i, j in itertools.pairwise(th.sent):
                a, b = r.meta[i][3][:-1], r.meta[j][3][:-1]
                if r.meta[j][2] in (1, 2, 3):
                    assert a == b and common(r.trace[i], r.trace[j]) == tokens(a) // BLOCK
                    rewrites += 1
                elif r.meta[i][2] != 4:
                    assert b[:len(a)] == a and len(b) > len(a)
                    grew += 1
        for n, chat in enumerate(s.chats):
            if chat.kind == "chat":
                assert all(r.meta[i][3][1:1 + len(chat.fixed)] == chat.fixed for i in chat.sent)
                chats += extends(r, chat.sent, lambda i, j: True)
    assert grown >= 10 and rewrites >= 5 and grew >= 20 and chats >= 50


def _prep_checks(r):
    """Each prep before its meeting; a regenerated prep differs in the cue only and a second
    attendee's is the first's again, when nothing landed between. Counts of each."""
    s, cue_only, same = r.state, 0, 0
    for m in s.meetings:
        for i in m.sent:
            segs = r.meta[i][3]
            assert r.times[i] <= m.start and segs[0] == s.desk["prep"] and segs[-2] == m.agenda
            assert s.accounts[m.account].profile in segs
        by = {r.meta[i][2]: i for i in m.sent}
        if 0 in by and 1 in by and r.meta[by[0]][3][:-1] == r.meta[by[1]][3][:-1]:
            cue_only += common(r.trace[by[0]], r.trace[by[1]]) == tokens(
                r.meta[by[0]][3][:-1]) // BLOCK
        if 0 in by and 2 in by and r.meta[by[0]][3] == r.meta[by[2]][3]:
            same += r.trace[by[0]] == r.trace[by[2]]
    return cue_only, same


def test_meeting_prep_and_call_summaries():
    """Preps re-send the account's documents (see _prep_checks). A recorded call's tasks
    share everything but the cue, its transcript new at the first; an AE's summary joins the
    account's history and the fields task rewrites the opportunity."""
    cue_only = same = calls = 0
    for seed in (1, 2):
        r, first = _small(seed), _first(seed)
        s = r.state
        c, k = _prep_checks(r)
        cue_only, same = cue_only + c, same + k
        for call, w in s.calls:
            if not w.sent:
                continue
            i = w.sent[0]
            assert MINUTE <= r.times[i] - call.ended <= 4 * MINUTE + 1
            for k, j in zip(w.items, w.sent):
                assert r.meta[j][3] == [s.system["call"], *call.head, call.transcript,
                                        s.cues["call"][k]]
            for a, b in itertools.pairwise(w.sent):
                assert common(r.trace[a], r.trace[b]) == tokens(r.meta[a][3][:-1]) // BLOCK
            assert _new_from(r, first, i, tokens(r.meta[i][3][:-2]) // BLOCK)
            if call.account is not None:
                assert r.times[i] in s.accounts[call.account].times
            if 2 in w.items[:len(w.sent)]:
                t = r.times[w.sent[2]]
                assert t in [v[0] for v in s.opps[call.opp].record.versions]
            calls += 1
    assert cue_only >= 5 and same >= 2 and calls >= 100


def _walk_requests(r, w):
    s = r.state
    for o, i in zip(w.items, w.sent):
        opp, t = s.opps[o], r.times[i]
        acc = s.accounts[opp.account]
        assert r.meta[i][3] == [s.system["pipeline"], s.rubric, acc.profile,
                                *acc.history(t)[-RECENT:], *opp.record.at(t),
                                s.cues["pipeline"][0]]


def test_pipeline_walks():
    """A normal week: each team's review at local 08:00..09:30 of its review day walks its
    AEs' opportunities by rep then close; a one-on-one re-sends an AE's exactly where nothing
    changed. A quarter's end: a forecast walk every workday over the deals closing by its
    end, a commit walk on its last day."""
    r = _small(1)
    s = r.state
    reviewed, same, differ = {}, 0, 0
    for w in s.walks:
        t, label, rep = w.about
        team, start = s.teams[t], r.times[w.sent[0]]
        _walk_requests(r, w)
        keys = [(team.reps.index(s.accounts[s.opps[o].account].rep), s.opps[o].close)
                for o in w.items]
        assert keys == sorted(keys)
        if label == "review":
            h = local(start, team.tz)
            assert REVIEW[0] <= h % 24 < REVIEW[1] and (s.weekday + int(h // 24)) % 7 == 0
            reviewed.update({o: i for o, i in zip(w.items, w.sent)})
        else:
            for o, j in zip(w.items, w.sent):
                if o in reviewed:
                    a, b = r.meta[reviewed[o]][3], r.meta[j][3]
                    same += a == b and r.trace[reviewed[o]] == r.trace[j]
                    differ += a != b
    assert same >= 20 and differ >= 3
    q = _small(3)
    labels = {(w.about[0], w.about[1]) for w in q.state.walks}
    assert {lab for _, lab in labels} == {"forecast", "commit"}
    for w in q.state.walks:
        _walk_requests(q, w)
        assert all(q.state.opps[o].close <= END for o in w.items)


def test_enrichment_batches_and_outreach_campaigns():
    """Inbound leads are enriched by the next half-hourly batch, every block from the
    record on new; a campaign writes to each enriched lead of its segment once, its
    requests sharing the head; at the show the badge scans are one walk, and day 1's
    campaigns go to them first."""
    for seed in (1, 4):
        r, first = _small(seed), _first(seed)
        s, head = r.state, tokens([r.state.system["enrich"], r.state.icp]) // BLOCK
        for w in s.batches:
            t = r.times[w.sent[0]]
            if w.about == ("inbound",):
                assert t % (30 * MINUTE) >= 29 * MINUTE
                assert all(t - 30 * MINUTE < s.leads[n].time <= t for n in w.items)
            assert all(_new_from(r, first, i, head) for i in w.sent)
        written = [n for w in s.campaigns for n in w.items]
        assert len(written) == len(set(written)) > 30
        for w in s.campaigns:
            product, template, rep = w.about
            seg = s.teams[s.reps[rep].team].segment
            assert all(s.leads[n].segment == seg for n in w.items)
            k = tokens(r.meta[w.sent[0]][3][:-2]) // BLOCK
            assert all(r.trace[i][:k] == r.trace[w.sent[0]][:k] for i in w.sent)
            assert r.meta[w.sent[0]][3][-2] == s.leads[w.items[0]].enriched
    s = _small(4).state
    badge = [w for w in s.batches if w.about == ("badge",)]
    assert len(badge) == 1 and len(badge[0].items) >= 900 * SCALE * 0.9
    day1 = [n for w in s.campaigns for n in w.items if s.leads[n].time > DAY]
    assert sum(s.leads[n].source == "badge" for n in day1) > 0.6 * len(day1)


def test_a_launch_makes_later_blocks_new():
    """The launch revises playbooks and sheets from a section on: enablement after it shares
    the kept sections' blocks, the rest new; the new product appears only after; the
    enablement rush doubles the questions."""
    r, first = _small(2), _first(2)
    s = r.state
    t0 = s.launch
    after = next(i for i, t in enumerate(r.times) if t >= t0)
    new_sheet = set(s.sheets[-1].current)
    for i, m in enumerate(r.meta):
        assert (r.times[i] >= t0) or not new_sheet & set(m[3])
    checked = 0
    for i in of_kind(r, "enablement"):
        if r.times[i] < t0:
            continue
        book = s.playbooks[s.teams[s.reps[s.chats[r.meta[i][1]].owner].team].segment]
        old, now = book.versions[0][1], book.at(r.times[i])
        kept = shared_tokens(old, now)
        assert r.meta[i][3][1:1 + len(now)] == now and kept < tokens(now)
        k = tokens([r.meta[i][3][0]]) + kept
        assert all(first[b] >= after for b in r.trace[i][k // BLOCK:])
        checked += 1
    rush = [r.times[i] for i in of_kind(r, "enablement")]
    late = sum(t0 <= t < t0 + RUSH[1] for t in rush)
    assert checked >= 20 and late > 2 * sum(t0 - RUSH[1] <= t < t0 for t in rush)


def test_quarter_end_promotion_and_proposal_burst():
    """A quarter's end: proposals after the promotion carry the price book's addendum after
    the unchanged base; day 1 drafts more than day 0; a revision changes the terms on."""
    r = _small(3)
    s = r.state
    base = s.pricing.versions[0][1]
    drafts = of_kind(r, "proposal")
    for i in drafts:
        pricing = s.pricing.at(r.times[i])
        assert r.meta[i][3][1:1 + len(pricing)] == pricing
        assert len(pricing) == 1 + (r.times[i] >= PROMO_AT) and pricing[0] == base[0]
    assert sum(r.times[i] >= DAY for i in drafts) > 1.5 * sum(r.times[i] < DAY for i in drafts)
    revised = 0
    for n, (o, sent) in enumerate(s.proposals):
        for i, j in itertools.pairwise(sent):
            a, b = r.meta[i][3], r.meta[j][3]
            if a[:-2] == b[:-2]:
                assert common(r.trace[i], r.trace[j]) == tokens(a[:-2]) // BLOCK
                revised += 1
    assert revised >= 10
