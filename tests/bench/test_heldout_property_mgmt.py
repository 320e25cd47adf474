"""bench/heldout_property_mgmt.py: the held-out shape property_mgmt has the properties its
docstring names. Structure only: no policy, no hit rate."""

from __future__ import annotations

import bisect
import itertools
from collections import Counter

from bench.heldout_fewshot import BLOCK
from bench.heldout_prop_jobs import PAGE, RENEW_AHEAD
from bench.heldout_prop_world import DAY, HOUR, WEEKS
from bench.heldout_property_mgmt import KINDS, generate, property_mgmt
from tests.bench.trace_parts import (SmallRuns, blocks_by_kind, check_chains, check_ordered,
                                     common, extends, shared_tokens, tokens)
from tests.bench.trace_parts import chats_of

SCALE = 0.2
SEEDS = (1, 2, 3, 4)  # a normal week, move-in season, an incident-heavy week, month-end
SMALL = SmallRuns(generate, SCALE)  # each seed's run and first_seen, made once
_small, _first = SMALL.run, SMALL.first


def _local(r, t, b):
    """Local hours since midnight of day 0 at ``t`` in building ``b``'s city."""
    return t / HOUR + r.state.cities[r.state.buildings[b].city].tz


def _new_from(r, first, i, seg, since):
    """Request ``i``'s blocks from the one holding segment ``seg`` on were first seen (by
    ``first``) at or after the first request at ``since`` (seconds)."""
    segs = r.meta[i][3]
    cut = tokens(segs[:segs.index(seg)]) // BLOCK
    start = bisect.bisect_left(r.times, since)
    return all(first[b] >= start for b in r.trace[i][cut:])


def test_deterministic_and_seeded_weeks():
    """Same seed, same trace; seeds 1..4 are the four weeks and differ in structure (cities,
    buildings), every kind in each, requests non-empty and in time order."""
    assert property_mgmt(1, 0.05) == property_mgmt(1, 0.05) != property_mgmt(2, 0.05)
    assert generate(3, 0.05).trace == property_mgmt(3, 0.05)
    states = [_small(seed).state for seed in SEEDS]
    assert [s.week for s in states] == list(WEEKS)
    assert len({tuple(c.tz for c in s.cities) for s in states}) > 1
    assert len({len(s.units) for s in states}) == len(SEEDS)
    for seed in SEEDS:
        check_ordered(_small(seed), KINDS)


def test_sizes_span_and_what_each_week_adds():
    """At scale 0.2: 150K..600K blocks over two days, every job walk finished; month-end
    walks reports, reminders and renewals, move-in lists and screens, the incident week has
    4..6 incidents (the first in the largest building) and their bursts."""
    count = {seed: Counter(m[0] for m in _small(seed).meta) for seed in SEEDS}
    for seed in SEEDS:
        r = _small(seed)
        assert 150_000 <= sum(blocks_by_kind(r).values()) <= 600_000
        assert r.times[0] < 2 * HOUR and 44 * HOUR < r.times[-1] < 2 * DAY
        assert all(w.pos == len(w.items) == len(w.sent) for w in r.state.streams)
    normal, move_in, incident, month_end = (count[seed] for seed in SEEDS)
    for kind in ("report", "reminder", "renewal"):
        assert month_end[kind] > 3 * normal[kind]
    assert move_in["listing"] + move_in["screening"] > 2 * (normal["listing"]
                                                           + normal["screening"])
    assert incident["incident"] > 3 * normal["incident"] > 0
    s = _small(3).state
    assert 4 <= len(s.incidents) <= 6
    assert s.incidents[0].building == max(range(len(s.buildings)),
                                          key=lambda b: len(s.buildings[b].units))


def test_prefix_chains_are_well_formed():
    """A block id always follows the same parent; a request is the full blocks of its
    segments, the same segments always the same ids; two requests share exactly the blocks
    of the segments they start with."""
    check_chains(_small(1), 3)
    check_chains(_small(4), 7)


def _tenant_head(s, chat, t):
    bld, unit = s.buildings[chat.building], s.units[chat.owner]
    return [s.chat_system["tenant"], s.cities[bld.city].rules, *bld.rules.at(t),
            *bld.alert.at(t), *unit.lease.abstract.at(t)]


def test_resident_and_prospectchats_of():
    """A tenant's turn is the system prompt, the city's rules, the house rules and alert,
    the lease abstract, the history, 2..3 handbook sections retrieved, the message; a turn
    over the same head extends the last; some chats come back 10..30 h later. A prospect's
    turn holds the marketing text, the house rules and the listing as it stood."""
    back = extended = 0
    for seed in (1, 3):
        r = _small(seed)
        s = r.state
        for n, chat in chats_of(r, "tenant"):
            for k, i in enumerate(chat.sent):
                t, segs = r.times[i], r.meta[i][3]
                head = _tenant_head(s, chat, t)
                assert r.meta[i][:3] == ("tenant", n, k) and segs[:len(head)] == head
                assert all(x in s.handbook.at(t) for x in segs[-3:-1])
            extended += extends(r, chat.sent, lambda i, j, c=chat: _tenant_head(
                s, c, r.times[i]) == _tenant_head(s, c, r.times[j]))
            if chat.back is not None and chat.back < 2 * DAY:
                k = [r.times[i] for i in chat.sent].index(chat.back)
                assert 10 * HOUR <= chat.back - r.times[chat.sent[k - 1]] <= 31 * HOUR
                back += 1
        for n, chat in chats_of(r, "prospect"):
            bld = s.buildings[chat.building]
            listing = s.units[chat.owner].listing
            assert listing is None or chat.fixed in [v for _, v in listing.text.versions]
            for i in chat.sent:
                head = [s.chat_system["prospect"], bld.marketing, *bld.rules.at(r.times[i]),
                        *chat.fixed]
                assert r.meta[i][3][:len(head)] == head
    assert back >= 10 and extended >= 100


def test_an_incident_bursts_near_identical_questions():
    """Residents of the incident's building ask from its start (from the first notice for
    planned work): the resident head with the latest notice, the incident's handbook
    sections, the question; quick-reply questions between two notices are the same request;
    most questions come in the first two hours."""
    r = _small(3)
    s = r.state
    same = early = total = 0
    for inc in s.incidents:
        bld = s.buildings[inc.building]
        assert len(inc.chats) <= 0.35 * len(bld.units) + 1
        firsts = {}
        for c in inc.chats:
            i = s.chats[c].sent[0]
            t, segs = r.times[i], r.meta[i][3]
            assert t >= (inc.notices[0][0] if inc.planned else inc.start)
            posted = [seg for when, seg in inc.notices if when <= t]
            head = [s.chat_system["incident"], s.cities[bld.city].rules, *bld.rules.at(t),
                    *bld.alert.at(t)]
            assert segs[:len(head)] == head and s.chats[c].building == inc.building
            if posted and t <= inc.end:
                assert bld.alert.at(t) == posted[-1:]
            hb = s.handbook.at(t)
            assert segs[len(head):-1] == [hb[min(k, len(hb) - 1)] for k in inc.topics]
            if segs[-1] == inc.button:
                key = tuple(segs)
                same += key in firsts
                assert firsts.setdefault(key, r.trace[i]) == r.trace[i]
            early += inc.start <= t < inc.start + 2 * HOUR
            total += 1
    assert same >= 10 and early > total / 2


def test_policy_updates_make_later_blocks_new():
    """A house-rules edit keeps the leading sections and rewrites the rest: every block of a
    later resident prompt from the first new section on is new; a handbook update likewise
    for the emails' drafts; a lease form revision is the form of every lease signed after it
    while older leases keep theirs."""
    edits = updates = 0
    for seed in SEEDS:
        r, first = _small(seed), _first(seed)
        s = r.state
        for bld in s.buildings:
            for (_, old), (t, now) in itertools.pairwise(bld.rules.versions):
                k = next(k for k, (a, b) in enumerate(zip(old, now)) if a != b)
                assert k >= 1 and old[:k] == now[:k]
                later = [i for i, m in enumerate(r.meta) if r.times[i] >= t and now[k] in m[3]]
                assert all(_new_from(r, first, i, now[k], t) for i in later)
                edits += bool(later)
        for (_, old), (t, now) in itertools.pairwise(s.handbook.versions):
            k = next(k for k, (a, b) in enumerate(zip(old, now)) if a != b)
            mails = [i for i, m in enumerate(r.meta) if m[0] == "email" and r.times[i] >= t]
            assert mails and all(_new_from(r, first, i, now[k], t) for i in mails)
            updates += 1
    assert edits >= 3 and updates >= 2
    r = _small(2)
    s = r.state
    (c, city), = [(c, x) for c, x in enumerate(s.cities) if x.form.versions[-1][0] >= 0]
    t = city.form.versions[-1][0]
    new = [s.units[m[1]].lease for i, m in enumerate(r.meta) if m[0] == "abstract"
           and m[2] == 0 and r.times[i] > t and s.buildings[s.units[m[1]].building].city == c]
    assert new and all(lease.form == city.form.current for lease in new)
    forms = set()
    for m in r.meta:
        if m[0] == "lease":
            city = s.cities[s.buildings[s.chats[m[1]].building].city]
            forms |= {(id(city), k) for k, (_, v) in enumerate(city.form.versions)
                      if m[3][1:1 + len(v)] == v}
    assert len(forms) >= 4


def test_batch_walks():
    """Reminders at local 08:00..08:30 are the template of the tenant's language and notice
    and a one-off note (month-end's first day: most tenants without autopay); renewal offers
    walk the leases ending RENEW_AHEAD days on (month-end's 1st: a month of them); a report
    walks every unit of the owner's buildings in pages, each building's head shared."""
    r, first = _small(4), _first(4)
    s = r.state
    kinds = Counter()
    for w in s.streams:
        t0, c = r.times[w.sent[0]], w.owner
        kinds[w.kind] += 1
        if w.kind == "reminder":
            assert 8.0 <= _local(r, t0, s.cities[c].buildings[0]) % 24 < 8.5
            for i, u in zip(w.sent, w.items):
                lease = s.units[u].lease
                segs = [s.system["reminder"], s.templates[(lease.lang, w.notice)]]
                assert r.meta[i][3][:2] == segs and len(r.meta[i][3]) == 4
                assert all(first[b] == i for b in r.trace[i][tokens(segs) // BLOCK:])
            if w.notice == 0:  # leases signed since may differ
                due = {u for u in s.city_tenants(c) if not s.units[u].lease.autopay}
                assert len(set(w.items) - due) <= 0.02 * len(due) + 1
                kinds["due"] += len(due)
                kinds["reminded"] += len(w.items)
        elif w.kind == "renewal":
            lo = t0 / DAY + RENEW_AHEAD
            ends = {u: s.units[u].lease.end for u in s.city_tenants(c)}
            hi = lo + (31 if _local(r, t0, s.cities[c].buildings[0]) >= 24 else 1)
            assert w.items == [u for u in s.city_tenants(c) if lo <= ends[u] < hi]
        elif w.kind == "report":
            units = [u for b in s.owners[c][1] for u in s.buildings[b].units]
            assert [u for _, page in w.items for u in page] == units
            assert all(len(page) <= PAGE for _, page in w.items)
            for (i, (b, _)), (j, (b2, _)) in itertools.pairwise(zip(w.sent, w.items)):
                head = r.meta[i][3][:3]
                assert (common(r.trace[i], r.trace[j]) >= tokens(head) // BLOCK) == (b == b2)
    assert kinds["reminder"] >= 6 and kinds["renewal"] >= 6 and kinds["report"] >= 3
    assert 0.75 * kinds["due"] <= kinds["reminded"] <= 0.95 * kinds["due"]


def test_growing_tickets_threads_listings_and_screenings():
    """A ticket is re-read with each text that lands, an email thread with each tenant's
    email (each extends the last but for the cue, when the head is unchanged); a listing's
    long and short texts differ only in the cue; a screening re-run shares the prompt up to
    the documents it had."""
    r = _small(1)
    s = r.state
    grew = 0
    for things in (s.tickets, s.threads):
        for x in things:
            for i, j in itertools.pairwise(x.sent):
                a, b = r.meta[i][3], r.meta[j][3]
                assert common(r.trace[i], r.trace[j]) == shared_tokens(a, b) // BLOCK
                if b[:len(a) - 1] == a[:-1]:
                    grew += 1
    assert grew >= 50 and all(len(t.texts) >= len(t.sent) for t in s.tickets)
    for w in (w for w in s.streams if w.kind == "listing"):
        for i, j in zip(w.sent[::2], w.sent[1::2]):
            a, b = r.meta[i][3], r.meta[j][3]
            assert a[:-1] == b[:-1] and a[-1] != b[-1]
            assert common(r.trace[i], r.trace[j]) == tokens(a[:-1]) // BLOCK
    reruns = 0
    for app in s.apps:
        for i, j in itertools.pairwise(app.sent):
            a = r.meta[i][3]
            assert r.meta[j][3][:len(a) - 2] == a[:-2] and r.meta[j][3][-2] == a[-2]
            reruns += 1
    assert reruns >= 3
