"""bench/heldout_travel_agent.py: the held-out shape travel_agent has the structure its
docstring names. Structure only: no policy, no hit rate."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from bench.heldout_fewshot import BLOCK
from bench.heldout_travel_agent import KINDS, generate, travel_agent
from bench.heldout_travel_chat import CHANGE, SEARCH, STATE, STEP_GAP, STEPS
from bench.heldout_travel_jobs import (DIGEST_HOUR, DIGEST_WINDOW, GONE, REBOOK_STREAMS, STORM,
                                       STORM_START)
from bench.heldout_travel_parts import (DAY, END, EVENING, FLIGHTS, HOUR, MINUTE, OFFICE,
                                        REGIONS)
from tests.bench.trace_parts import SmallRuns, check_chains, check_ordered, common, of_kind, tokens

SCALE = 0.2
SEEDS = (1, 2)
RESULT = (min(s[1][2] for s in SEARCH.values()), max(s[1][3] for s in SEARCH.values()))


SMALL = SmallRuns(generate, SCALE)  # each seed's run and first_seen, made once
_small, _first = SMALL.run, SMALL.first


def _local(t, region):
    """The local hour of UTC time ``t`` in ``region``."""
    return (t / HOUR + REGIONS[region][0]) % 24


def _tools(r, t):
    return r.state.tools.at(t)


def test_deterministic_and_seeded():
    assert travel_agent(1, 0.05) == travel_agent(1, 0.05) != travel_agent(2, 0.05)
    assert generate(3, 0.05).trace == travel_agent(3, 0.05)
    storms = set()
    for seed in SEEDS:
        r = _small(seed)
        check_ordered(r, KINDS)
        storms.add((r.storm.hub, round(r.storm.start), len(r.storm.waves)))
    assert len(storms) == 2 and _small(1).trace[:20] != _small(2).trace[:20]


@pytest.mark.parametrize("seed", SEEDS)
def test_sizes_span_and_chains(seed):
    """At scale 0.2: 200K..400K blocks over two days; the storm's itineraries all got a
    rebooking request and its queue ran dry; the trace ends before END. A block id always
    follows the same parent, each request is the full blocks of its segments, the same
    segments are always the same ids, and two requests share exactly the blocks of the
    segments they start with."""
    r = _small(seed)
    assert 200_000 <= sum(map(len, r.trace)) <= 400_000
    assert 40 * HOUR < r.times[-1] < END and r.times[0] < 2 * HOUR
    cancelled = [b for _, got in r.storm.waves for b in got]
    assert STORM[0] * SCALE <= len(cancelled) <= STORM[1] * SCALE
    assert set(r.storm.tries) == set(cancelled)
    assert not r.state.jobs["rebook"].queue and r.state.jobs["rebook"].idle == REBOOK_STREAMS
    check_chains(r, 3)


def _trip_head(r, trip, i):
    """A planner request's head at request ``i``: system prompt, tools, the trip's head and
    the trip state of its last date change at or before ``i``."""
    state = trip.states[sum(1 for j in trip.changes if j <= i)]
    return [r.state.system["plan"], *_tools(r, r.times[i]), *trip.head, state]


def test_planning_turns_extend_the_conversation():
    """A planner request is the system prompt, the tools as they stand, the head (a
    corporate traveller's company policy and profile), the trip state, the history; the
    next request of the trip extends it exactly unless the dates or the tools changed. A
    search request appends the call and its JSON result to the message's request."""
    pairs, searches = 0, 0
    for seed in SEEDS:
        r = _small(seed)
        for n, trip in enumerate(r.trips):
            if trip.kind == "corporate":
                co = r.state.companies[trip.company]
                assert trip.head[:-1] == co.policy and trip.head[-1] in co.profiles
                assert trip.region == co.region
            else:
                assert trip.head == [] and trip.company is None
            assert all(STATE[2] <= s[1] <= STATE[3] for s in trip.states)
            for k, i in enumerate(trip.sent):
                head = _trip_head(r, trip, i)
                assert r.meta[i][:3] == (trip.kind, n, k) and r.meta[i][3][:len(head)] == head
            for i, j in itertools.pairwise(trip.sent):
                a, b = r.meta[i][3], r.meta[j][3]
                if j in trip.changes or _tools(r, r.times[i]) != _tools(r, r.times[j]):
                    continue
                assert b[:len(a)] == a and r.trace[j][:len(r.trace[i])] == r.trace[i]
                pairs += 1
                if j in trip.searches:  # the call and its result
                    assert len(b) == len(a) + 2
                    assert RESULT[0] <= b[-1][1] <= RESULT[1]
                    assert r.times[j] - r.times[i] < 15
                    searches += 1
    assert pairs >= 40 and searches >= 15


def test_a_date_change_rewrites_the_trip_state():
    """When the traveller changes the dates, the trip state is new and the old search
    results are gone: every block after the tools and the head is new, and a search
    follows."""
    checked = dropped = 0
    for seed in SEEDS:
        r, first = _small(seed), _first(seed)
        for trip in r.trips:
            for j in trip.changes:
                p = trip.sent[trip.sent.index(j) - 1]
                a, b = r.meta[p][3], r.meta[j][3]
                fixed = [r.state.system["plan"], *_tools(r, r.times[j]), *trip.head]
                cut = tokens(fixed) // BLOCK
                assert b[:len(fixed)] == fixed and b[len(fixed)] not in a
                assert all(first[x] == j for x in r.trace[j][cut:])
                results = {r.meta[i][3][-1] for i in trip.searches if i < j}
                assert not results & set(b) and all(RESULT[0] <= x[1] for x in results)
                dropped += bool(results)
                nxt = trip.sent[trip.sent.index(j) + 1]
                assert nxt in trip.searches and r.meta[nxt][3][:-2] == b
                assert r.times[nxt] - r.times[j] < 15
                checked += 1
    assert checked >= 5 and dropped >= 3 and 0 < CHANGE < 0.5


def test_booking_flows_send_the_fare_rules():
    """A booking flow is the booking agent's system prompt, the tools, the company's policy
    (corporate), the fare family's rules, the hotel's policy (if any), the offer and the
    steps so far, each step 20..120 s after the last and extending it; the last makes the
    booking, departing later."""
    flows = 0
    for seed in SEEDS:
        r = _small(seed)
        st = r.state
        for f, flow in enumerate(r.flows):
            trip = r.trips[flow.trip]
            pol = st.companies[trip.company].policy if trip.company is not None else []
            assert flow.parts[:len(pol)] == pol
            assert flow.parts[len(pol)] == st.fares[flow.airline][flow.family]
            extra = len(flow.parts) - len(pol)
            assert extra == 2 or extra == 3 and flow.parts[-2] in st.hotels
            assert len(flow.sent) == len(STEPS) and r.times[flow.sent[0]] > r.times[trip.sent[-1]]
            for k, i in enumerate(flow.sent):
                segs = [st.system["book"], *_tools(r, r.times[i]), *flow.parts, *flow.steps[:k + 1]]
                assert r.meta[i] == ("book", f, k, segs)
            for i, j in itertools.pairwise(flow.sent):
                assert STEP_GAP[0] <= r.times[j] - r.times[i] <= STEP_GAP[1]
            bk = r.bookings[flow.booking]
            assert bk.made == r.times[flow.sent[-1]] and bk.depart > bk.made + 11 * HOUR
            assert (bk.company, bk.airline, bk.destination) == (trip.company, flow.airline,
                                                                 trip.destination)
            flows += 1
    assert flows >= 4


def test_service_chats_resend_the_booking_record_exactly():
    """A service message is the service agent's system prompt, the tools, the booking
    record as it stands, the history; two requests on one booking with the same record and
    tools share every block up to the record's end (a return chat re-sends it exactly). A
    storm chat is on a cancelled itinerary, after its advisory."""
    causes, resent = Counter(), 0
    for seed in SEEDS:
        r = _small(seed)
        heads = {}
        for c, chat in enumerate(r.chats):
            if chat.kind != "service":
                continue
            causes[chat.cause] += 1
            t0 = r.times[chat.sent[0]]
            for k, i in enumerate(chat.sent):
                head = [r.state.system["service"], *_tools(r, r.times[i]),
                        *r.bookings[chat.subject].record.at(r.times[i])]
                assert r.meta[i][:3] == ("service", c, k) and r.meta[i][3][:len(head)] == head
                cut = tokens(head) // BLOCK
                if k == 0 and tuple(head) in heads:  # a chat re-sends the record
                    resent += 1
                assert heads.setdefault(tuple(head), r.trace[i][:cut]) == r.trace[i][:cut]
            if chat.cause == "storm":
                wave = next(t for t, got in r.storm.waves if chat.subject in got)
                assert r.bookings[chat.subject].storm and t0 >= wave
            if chat.cause == "return":
                before = [r.times[o.sent[0]] for o in r.chats[:c] if o.kind == "service"
                          and o.subject == chat.subject]
                assert before and t0 - max(before) < 24 * HOUR
    assert min(causes.values()) >= 2 and len(causes) == 3 and resent >= 3


def test_a_rebooking_makes_the_record_new_from_its_flights():
    """After the rebooking agent writes the new flights into a record, the first request
    that sends that record holds no block from the flights part on that was requested
    before; the rebooking request itself sent the old record."""
    checked = 0
    for seed in SEEDS:
        r, first = _small(seed), _first(seed)
        sends = {}
        for i, (kind, owner, _, segs) in enumerate(r.meta):
            b = r.chats[owner].subject if kind == "service" else owner
            if kind in ("service", "digest") and r.bookings[b].storm:
                sends.setdefault((b, tuple(r.bookings[b].record.at(r.times[i]))), i)
        for (b, rec), j in sends.items():
            versions = r.bookings[b].record.versions
            if list(rec) != versions[-1][1] or len(versions) < 2:
                continue
            last = r.storm.tries[b][-1]
            assert r.times[last] == versions[-1][0] <= r.times[j]
            assert r.meta[last][3][2:2 + len(versions[-2][1])] == versions[-2][1]
            segs = r.meta[j][3]
            cut = tokens(segs[:segs.index(rec[FLIGHTS])]) // BLOCK
            assert all(first[x] == j for x in r.trace[j][cut:])
            checked += 1
    assert checked >= 10


@pytest.mark.parametrize("seed", SEEDS)
def test_the_storm_walks_the_cancelled_itineraries_in_departure_order(seed):
    """The storm hits its hub in the local afternoon; each advisory (a new version) cancels
    the next bank of departures, booked before the trace; the rebooking agent's first tries
    follow the cancelled itineraries in departure order, each after its wave, and send the
    system prompt, the advisory and the record as they stand, an availability search, the
    instruction. Four streams: four first tries go the instant a wave lands."""
    r = _small(seed)
    st, storm = r.state, r.storm
    assert STORM_START[0] <= _local(storm.start, st.hub_regions[storm.hub]) <= STORM_START[1]
    assert storm.start == storm.waves[0][0] and len(storm.waves) >= 3
    order = [b for _, got in storm.waves for b in got]
    departs = [r.bookings[b].depart for b in order]
    assert departs == sorted(departs) and departs[0] >= storm.start + 30 * MINUTE
    assert all(r.bookings[b].hub == storm.hub and r.bookings[b].made < 0 for b in order)
    for (t, got), nxt in itertools.zip_longest(storm.waves, storm.waves[1:]):
        assert all(r.bookings[b].depart - 30 * MINUTE >= t for b in got)
        assert nxt is None or all(r.bookings[b].depart - 30 * MINUTE < nxt[0] for b in got)
        assert storm.advisory.at(t) != storm.advisory.at(t - 1)
    first = of_kind(r, "rebook")
    assert [r.meta[i][1] for i in first] == order
    wave_of = {b: t for t, got in storm.waves for b in got}
    for i in first:
        b, t = r.meta[i][1], r.times[i]
        assert t >= wave_of[b] and r.meta[i][2] == 1
        segs = r.meta[i][3]
        rec = r.bookings[b].record.versions[0][1]  # as booked: a first try precedes any change
        assert segs[:2 + len(rec)] == [st.system["rebook"], *storm.advisory.at(t), *rec]
        assert segs[-1] == st.cues["rebook"] and len(segs) == 4 + len(rec)
    at_once = Counter(wave_of[r.meta[i][1]] for i in first if r.times[i] == wave_of[r.meta[i][1]])
    assert max(at_once.values()) == REBOOK_STREAMS


@pytest.mark.parametrize("seed", SEEDS)
def test_a_gone_seat_is_offered_again(seed):
    """A try whose seat is gone leaves the record as it was; the booking is tried again
    (a reoffer) 5..20 minutes later, at most three tries in all, sharing the previous try's
    blocks up to the record's end while the advisory stands. A try that books writes a new
    record version at its time."""
    r = _small(seed)
    again = shared = 0
    for b, tries in r.storm.tries.items():
        assert len(tries) <= GONE[2]
        assert [r.meta[i][:3] for i in tries] == [("rebook" if k == 1 else "reoffer", b, k)
                                                  for k in range(1, len(tries) + 1)]
        versions = r.bookings[b].record.versions
        for i, j in itertools.pairwise(tries):
            assert r.times[j] - r.times[i] >= GONE[1][0] * MINUTE
            assert r.meta[i][3][-2] != r.meta[j][3][-2]  # a fresh availability search
            if r.meta[i][3][1] == r.meta[j][3][1]:
                assert common(r.trace[i], r.trace[j]) == tokens(r.meta[i][3][:-2]) // BLOCK
                shared += 1
            again += 1
        assert len(versions) <= 2
        assert versions[-1][0] == r.times[tries[-1]] if len(versions) == 2 else len(
            tries) == GONE[2]
    assert again >= 10 and shared >= 5


@pytest.mark.parametrize("seed", SEEDS)
def test_price_alerts_compare_with_the_last_results(seed):
    """A saved search re-runs every 4..12 hours (on the hour, then the job's queue): the
    alert agent's system prompt, the spec, the last run's results exactly, new results, the
    instruction; two runs share exactly the blocks up to the spec's end."""
    r = _small(seed)
    runs = 0
    for a, al in enumerate(r.alerts):
        assert [r.meta[i][:3] for i in al.sent] == [("alert", a, k) for k in range(len(al.sent))]
        assert len(al.sent) >= int(48 // al.interval) - 1
        for i, j in itertools.pairwise(al.sent):
            x, y = r.meta[i][3], r.meta[j][3]
            assert y[:2] == x[:2] == [r.state.system["alert"], al.spec] and y[2] == x[3]
            assert common(r.trace[i], r.trace[j]) == tokens(x[:2]) // BLOCK
            gap = r.times[j] - r.times[i]
            assert (al.interval - 1) * HOUR < gap < (al.interval + 1) * HOUR
            runs += 1
        assert r.meta[al.sent[-1]][3][3] == al.last
    assert runs >= 50


@pytest.mark.parametrize("seed", SEEDS)
def test_nightly_itinerary_emails(seed):
    """At 03:00 local each night, each region's bookings (on this replica's shard)
    departing 6..30 hours later get an email, in departure order: the digest agent's system
    prompt, the destination's brief for the day, the record as it stands, the instruction."""
    r = _small(seed)
    st = r.state
    assert len(st.digests) == 2 * len(REGIONS)
    order = []
    for t, region, got in st.digests:
        assert _local(t, region) == DIGEST_HOUR
        lo, hi = (t + h * HOUR for h in DIGEST_WINDOW)
        want = [b for b, bk in enumerate(r.bookings) if bk.region == region and bk.shard
                and lo <= bk.depart < hi and bk.made < t]
        assert got == sorted(want, key=lambda b: r.bookings[b].depart) and got
        order += got
    sent = of_kind(r, "digest")
    assert [r.meta[i][1] for i in sent] == order
    briefs = {}
    for i in sent:
        b, segs = r.meta[i][1], r.meta[i][3]
        key = (r.bookings[b].destination, int(r.times[i] // DAY))
        assert segs[0] == st.system["digest"] and segs[2:-1] == r.bookings[b].record.at(r.times[i])
        assert briefs.setdefault(key, segs[1]) == segs[1] and segs[-1] == st.cues["digest"]
    assert len(briefs) < len(sent)


def test_destination_questions_and_guide_edits():
    """A destination question is the guide agent's system prompt, the guide as it stands,
    the history; a session's next question extends the last. After the content team
    rewrites a guide's section, the destination's next question holds no block from that
    section on that was requested before."""
    edits = sessions = 0
    for seed in SEEDS:
        r, first = _small(seed), _first(seed)
        st = r.state
        for c, chat in enumerate(r.chats):
            if chat.kind != "guide":
                continue
            sessions += 1
            for k, i in enumerate(chat.sent):
                head = [st.system["guide"], *st.guides[chat.subject].at(r.times[i])]
                assert r.meta[i][:3] == ("guide", c, k) and r.meta[i][3][:len(head)] == head
            for i, j in itertools.pairwise(chat.sent):
                if st.guides[chat.subject].at(r.times[i]) == st.guides[chat.subject].at(r.times[j]):
                    assert r.trace[j][:len(r.trace[i])] == r.trace[i]
        for t, d, k in st.guide_edits:
            nxt = [i for i, m in enumerate(r.meta) if m[0] == "guide"
                   and r.chats[m[1]].subject == d and r.times[i] >= t][:1]
            for j in nxt:
                cut = tokens([st.system["guide"], *st.guides[d].at(r.times[j])[:k]]) // BLOCK
                assert all(first[x] == j for x in r.trace[j][cut:])
                edits += 1
    assert sessions >= 15 and edits >= 1


def test_a_deploy_changes_the_tool_schemas():
    """A deploy on day 1 rewrites the hotel search's schema: every later request with the
    tools sends the new ones, and the first holds no block from there on that was requested
    before."""
    deploys = 0
    for seed in SEEDS:
        r, first = _small(seed), _first(seed)
        if len(r.state.tools.versions) == 1:
            continue
        (_, old), (t, tools) = r.state.tools.versions
        assert DAY < t < END and old[0] == tools[0] and old[1] != tools[1] and old[2:] == tools[2:]
        with_tools = [i for i, m in enumerate(r.meta) if old[0] in m[3]]
        after = [i for i in with_tools if r.times[i] >= t]
        assert all(tools[1] in r.meta[i][3] and old[1] not in r.meta[i][3] for i in after)
        assert all(old[1] in r.meta[i][3] for i in with_tools if r.times[i] < t)
        cut = tokens(r.meta[after[0]][3][:2]) // BLOCK
        assert all(first[x] == after[0] for x in r.trace[after[0]][cut:])
        deploys += 1
    assert deploys >= 1


def test_sessions_follow_local_hours():
    """Consumers' sessions start by the evening curve of their region's local hours,
    corporate ones in office hours; the nights are quiet."""
    starts = [(t.kind, int(_local(_small(seed).times[t.sent[0]], t.region)))
              for seed in SEEDS for t in _small(seed).trips]
    assert all((OFFICE if k == "corporate" else EVENING)[h] > 0 for k, h in starts)
    evening = sum(k == "plan" and 17 <= h <= 23 for k, h in starts)
    assert evening > sum(k == "plan" and 1 <= h <= 6 for k, h in starts)
    assert sum(k == "corporate" for k, _ in starts) >= 4
