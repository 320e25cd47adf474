"""bench/heldout_city_311.py: the held-out shape city_311 has the properties its docstring
names. Structure only: no policy, no hit rate."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from bench.heldout_c311_desk import INCIDENTS
from bench.heldout_c311_jobs import NIGHT_HOURS
from bench.heldout_c311_world import DAY, END, FIELD_DEPTS, HOUR
from bench.heldout_city_311 import KINDS, city_311, generate
from bench.heldout_fewshot import BLOCK
from tests.bench.trace_parts import (SmallRuns, blocks_by_kind, check_chains, check_ordered,
                                     common, extends, of_kind, tokens)
from tests.bench.trace_parts import chats_of

SCALE = 0.2
SMALL = SmallRuns(generate, SCALE)  # each seed's run and first_seen, made once
_small, _first = SMALL.run, SMALL.first


def test_deterministic_and_seeded():
    """Same seed, same trace; seeds differ in structure (the scenario and its incident), not
    just in noise; requests are non-empty, in time order, every kind there."""
    assert city_311(1, 0.05) == city_311(1, 0.05) != city_311(2, 0.05)
    assert generate(3, 0.05).trace == city_311(3, 0.05)
    a, b = _small(1).state, _small(2).state
    assert (a.scenario, a.incident_depts) != (b.scenario, b.incident_depts)
    assert len(a.incident_cells) < len(b.incident_cells)
    for seed in (1, 2):
        check_ordered(_small(seed), KINDS)


@pytest.mark.parametrize("seed", [1, 2])
def test_sizes_span_and_chains(seed):
    """At scale 0.2: 250K..500K blocks over two days, resident chats the largest kind; the
    nightly walks finish; block ids form prefix chains of the requests' segments."""
    r = _small(seed)
    blocks = blocks_by_kind(r)
    assert 250_000 <= sum(blocks.values()) <= 500_000
    assert max(blocks, key=blocks.__getitem__) == "chat"
    assert 46 * HOUR < r.times[-1] < END and r.times[0] < 3 * HOUR
    assert all(w.pos == len(w.items) == len(w.sent) for w in r.state.nights)
    check_chains(r, 3)


def test_resident_chats_grow_behind_the_language_head():
    """A resident chat sends its language's system prompt, the catalog and its department's
    FAQ, then the history: each turn extends the last exactly; chats in another language
    share no block with English ones; about a fifth of chats are not in English."""
    for seed in (1, 2):
        r = _small(seed)
        s = r.state
        grown = 0
        for kind in ("chat", "lang"):
            for n, chat in chats_of(r, kind):
                head = [s.langs[chat.lang], *s.catalog, *s.depts[chat.owner].faq]
                assert (chat.lang == "en") == (kind == "chat")
                assert all(r.meta[i][3][:len(head)] == head for i in chat.sent)
                grown += extends(r, chat.sent, lambda i, j: True)
        en, es = (of_kind(r, k)[0] for k in ("chat", "lang"))
        assert common(r.trace[en], r.trace[es]) == 0 and grown > 200
        assert 0.1 < len(of_kind(r, "lang")) / len(of_kind(r, "chat")) < 0.4


@pytest.mark.parametrize("seed", [1, 2])
def test_intake_and_duplicate_checks(seed):
    """Every new ticket is routed behind the same prompt and taxonomy; a place-bound one is
    then compared with the latest open tickets of its department and neighborhood filed
    before it, whose texts come first; every block from the new text on is new."""
    r, first = _small(seed), _first(seed)
    s = r.state
    route = [s.system["intake"], *s.taxonomy]
    intakes = of_kind(r, "intake")
    for i in intakes:
        t = s.tickets[r.meta[i][1]]
        assert r.meta[i][3] == [*route, t.text, s.cue["intake"]]
    for i, j in itertools.pairwise(intakes):
        assert common(r.trace[i], r.trace[j]) >= tokens(route) // BLOCK
    for i in of_kind(r, "dedup"):
        _, t, k, segs = r.meta[i]
        near = segs[1:-2]
        assert len(near) == k and segs[-2] == s.tickets[t].text
        assert s.tickets[t].dept in FIELD_DEPTS and 1 <= k <= 6
        cut = tokens(segs[:-2]) // BLOCK
        assert all(first[b] == i for b in r.trace[i][cut:])
    assert len(s.duplicates) >= 5


def test_summaries_and_the_nightly_batch_reread_the_history():
    """An agent's case summary re-reads the ticket's history; coming back after a note
    extends the last summary's prompt exactly. The nightly batch walks every open ticket by
    department from NIGHT_HOURS; a ticket quiet since the first night re-sends the same
    prompt the second night."""
    for seed in (1, 2):
        r = _small(seed)
        s = r.state
        by_ticket = {}
        for i in of_kind(r, "summary"):
            by_ticket.setdefault(r.meta[i][1], []).append(i)
        again = 0
        for i, j in (p for sent in by_ticket.values() for p in itertools.pairwise(sent)):
            a, b = r.meta[i][3][:-1], r.meta[j][3]
            assert a[:3] == b[:3] and a[3:] == s.tickets[r.meta[i][1]].history[:len(a) - 3]
            if r.meta[j][2] == r.meta[i][2] + 1 and b[:len(a)] == a:
                again += common(r.trace[i], r.trace[j]) == tokens(a) // BLOCK
        assert again >= 5
        for night, w in enumerate(s.nights):
            t0 = r.times[w.sent[0]] - night * DAY
            assert NIGHT_HOURS[0] * HOUR <= t0 < NIGHT_HOURS[1] * HOUR
            assert w.items == sorted(w.items, key=lambda t: (s.tickets[t].dept, t))
        first = dict(zip(s.nights[0].items, s.nights[0].sent))
        same = sum(r.trace[first[t]] == r.trace[i] for t, i in
                   zip(s.nights[1].items, s.nights[1].sent) if t in first)
        assert same > 100


@pytest.mark.parametrize("seed", [2, 4])
def test_the_incident_is_a_burst_behind_a_revised_bulletin(seed):
    """The scenario's incident: reports within its window, each incident chat behind the
    chat head and the bulletin as it stands; a new bulletin version makes every later block
    new (the first request behind it for its head); incident tickets file in the incident's
    neighborhoods."""
    r, first = _small(seed), _first(seed)
    s = r.state
    start, span = s.incident
    sent = of_kind(r, "incident")
    assert len(sent) > INCIDENTS[s.scenario][3][0] * SCALE * 0.5
    fresh = 0
    for i in sent:
        chat = s.chats[r.meta[i][1]]
        head = [s.langs[chat.lang], *s.catalog, *s.depts[chat.owner].faq]
        bulletin = s.bulletin.at(r.times[i])
        assert r.meta[i][3][:len(head) + 1] == head + bulletin and r.times[i] >= start
        fresh += all(first[b] == i for b in r.trace[i][tokens(head) // BLOCK:])
    assert fresh >= 3
    assert all(s.tickets[t].cell in s.incident_cells for t in s.incident_tickets)
    hours = Counter(int(r.times[i] // HOUR) for i in sent)
    assert max(hours.values()) > 5 * len(sent) / (END / HOUR)


def test_an_ordinance_makes_later_sections_new():
    """A policy revision keeps the document's sections before the changed one: questions
    after it share the blocks up to there with questions before, every later block new."""
    checked = 0
    for seed in (1, 2):
        r, first = _small(seed), _first(seed)
        s = r.state
        for t, doc, k in s.revisions:
            old, new = s.policies[doc].at(t - 1e-6), s.policies[doc].at(t)
            assert new[:k] == old[:k] and new[k] != old[k]
            cut = tokens([s.policy_system, *new[:k]]) // BLOCK
            ts = [i for n, c in chats_of(r, "policy") if c.owner == doc for i in c.sent]
            before = [i for i in ts if r.times[i] < t]
            after = [i for i in ts if r.times[i] >= t]
            for i in after[:1]:
                assert common(r.trace[before[-1]], r.trace[i]) == cut
                assert all(first[b] >= i for b in r.trace[i][cut:])
                checked += 1
    assert checked >= 2


def test_holiday_notices():
    """Notice questions send the district's sweeping notice of the day or the holiday
    schedule; on the holiday seed they are about three times as many, mostly the holiday's."""
    counts = {}
    for seed in (1, 3):
        r = _small(seed)
        s = r.state
        for n, chat in chats_of(r, "notice"):
            doc = s.holiday if chat.owner < 0 else s.notices[chat.owner]
            for i in chat.sent:
                assert r.meta[i][3][:2] == [s.notice_system, *doc.at(r.times[i])]
        holiday = sum(c.owner < 0 for _, c in chats_of(r, "notice"))
        counts[s.scenario] = (len(chats_of(r, "notice")), holiday)
    assert counts["holiday"][0] > 2 * counts["quiet"][0]
    assert counts["holiday"][1] > 0.5 * counts["holiday"][0]
