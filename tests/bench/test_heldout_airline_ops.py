"""bench/heldout_airline_ops.py: the held-out shape airline_ops has the properties its
docstring names. Structure only: no policy, no hit rate."""

from __future__ import annotations

import itertools

import pytest

from bench.heldout_air_desk import REBOOK_SECTIONS
from bench.heldout_air_ops import BIG_CHANGE, BRIEF_AT, MX_RUN, OUTAGE, WEATHER
from bench.heldout_air_world import DAY, END, HOUR, WINDOW
from bench.heldout_airline_ops import KINDS, airline_ops, generate
from bench.heldout_fewshot import BLOCK
from tests.bench.trace_parts import (SmallRuns, blocks_by_kind, check_chains, check_ordered,
                                     common, extends, of_kind, tokens)
from tests.bench.trace_parts import chats_of

SCALE = 0.2

SMALL = SmallRuns(generate, SCALE)  # each seed's run and first_seen, made once
_small, _first = SMALL.run, SMALL.first


def _new_from(run, first, i, cut):
    """Whether every block of request ``i`` from token ``cut`` on is first seen there."""
    return all(first[b] == i for b in run.trace[i][cut // BLOCK:])


def test_deterministic_and_seeded():
    """Same seed, same trace; seed % 4 picks the scenario, so seeds 1..4 differ in
    structure: only mechanical cancellations, a hub's weather event, a big schedule change,
    an airline-wide outage; requests are non-empty and in time order, every kind there."""
    assert airline_ops(1, 0.05) == airline_ops(1, 0.05) != airline_ops(2, 0.05)
    assert generate(3, 0.05).trace == airline_ops(3, 0.05)
    states = [_small(seed).state for seed in (1, 2, 3, 4)]
    assert [s.scenario for s in states] == ["normal", "weather", "schedule", "holiday"]
    kinds = [{x.kind for x in s.irrops} for s in states]
    assert kinds == [{"mechanical"}, {"mechanical", "weather"}, {"mechanical"},
                     {"mechanical", "outage"}]
    assert len(states[2].changes[0].moves) >= BIG_CHANGE[1][0]
    assert all(len(s.changes[0].moves) <= 5 for s in states if s.scenario != "schedule")
    for seed in (1, 2, 3, 4):
        check_ordered(_small(seed), KINDS)


@pytest.mark.parametrize("seed", [1, 2])
def test_sizes_and_span(seed):
    """At scale 0.2: 200K..500K blocks over two days; every walk finished."""
    r = _small(seed)
    blocks = blocks_by_kind(r)
    assert 200_000 <= sum(blocks.values()) <= 500_000
    assert 46 * HOUR < r.times[-1] < END and r.times[0] < HOUR
    assert all(w.pos == len(w.items) == len(w.sent) for w in r.state.walks)
    assert max(blocks.values()) < 0.4 * sum(blocks.values())


def test_prefix_chains_are_well_formed():
    """A block id always follows the same parent; a request is the full blocks of its
    segments, the same segments always the same ids; two requests share exactly the blocks
    of the segments they start with."""
    check_chains(_small(2), 3)


@pytest.mark.parametrize("seed,kind", [(2, "weather"), (4, "outage")])
def test_a_disruption_is_a_burst_over_one_context(seed, kind):
    """The disruption's conversations come in a burst; each turn is the agent's system
    prompt, the irrops sections, the notice as last issued, the flight's status and the PNR
    now; a turn under an unchanged head extends the last one exactly. After-call summaries
    surge at the hubs it hits (against the same hours the day before)."""
    r = _small(seed)
    s = r.state
    x = next(x for x in s.irrops if x.kind == kind)
    convs = (WEATHER if kind == "weather" else OUTAGE)[3]
    assert len(x.chats) >= convs[0] * SCALE * 0.9
    starts = sorted(r.times[s.chats[c].sent[0]] for c in x.chats)
    assert max(sum(a <= t < a + 2 * HOUR for t in starts) for a in starts) > 0.75 * len(starts)
    head = [s.chat_system["agent"], *s.policies["irrops"][:REBOOK_SECTIONS]]
    same = 0
    for c in x.chats:
        chat = s.chats[c]
        for i in chat.sent:
            segs, t = r.meta[i][3], r.times[i]
            assert r.meta[i][0] == "rebook" and segs[:len(head)] == head
            assert segs[len(head)] == x.notice.at(t)[0]
            assert segs[len(head) + 2] in [v[1][0] for v in s.pnrs[chat.owner].record.versions]
        cut = len(head) + 3  # the head: through the notice, the status and the PNR
        same += extends(r, chat.sent, lambda i, j: r.meta[i][3][:cut] == r.meta[j][3][:cut])
    assert same >= 20
    calls = [r.times[i] for i in of_kind(r, "acw") if r.meta[i][1] in x.hubs]
    during = sum(x.start <= t < x.end + 3 * HOUR for t in calls)
    assert during > 2 * sum(x.start - DAY <= t < x.end + 3 * HOUR - DAY for t in calls) + 5


def _head(r, i, chat):
    """Request ``i``'s segments before the chat's first history entry (the PNR)."""
    segs = r.meta[i][3]
    return segs[:segs.index(chat.history[0])]


def test_agent_chats_grow_and_come_back_with_the_new_record():
    """An agent turn is the system prompt, the retrieved sections, the history starting
    with the PNR, the message; a turn over the same sections extends the last exactly; a
    chat back after its rebooking adds the new record, every block from it on new."""
    extended = back = 0
    for seed in (1, 3):
        r, first = _small(seed), _first(seed)
        s = r.state
        library = {*sum(s.fare_rules, []), *sum(s.policies.values(), []),
                   *(seg for _, v in s.terms.versions for seg in v)}
        for n, chat in chats_of(r, "agent"):
            records = [v[1][0] for v in s.pnrs[chat.owner].record.versions]
            assert chat.history[0] in records
            for i in chat.sent:
                head = _head(r, i, chat)
                assert head[0] == s.chat_system["agent"] and set(head[1:]) <= library
            extended += extends(r, chat.sent, lambda i, j, c=chat: _head(r, i, c) ==
                                _head(r, j, c))
            for k in chat.returns:
                i = chat.sent[k]
                segs = r.meta[i][3]
                assert segs[-2] in records[1:] and segs[-2] != chat.history[0]
                back += _new_from(r, first, i, tokens(segs[:-2]))
    assert extended >= 50 and back >= 5


def test_versions_make_later_blocks_new():
    """The loyalty terms' new version replaces the sections from the cut on; the first crew
    check under newly published pairings and the first ops turn under a re-rendered board
    are new from the first section that changed."""
    crew = board = terms = 0
    for seed in (1, 2):
        r, first = _small(seed), _first(seed)
        s = r.state
        terms += _loyalty_turns(r, first)
        seen = set()
        for i in of_kind(r, "crew"):
            hub, version, segs = r.meta[i][1], r.meta[i][2], r.meta[i][3]
            p = s.hubs[hub].pairings
            assert segs[1:-2] == [*s.hubs[hub].rules, *p.at(r.times[i])]
            if version > 0 and (hub, version) not in seen:
                old, now = p.versions[version - 1][1], p.versions[version][1]
                k = next(k for k, (a, b) in enumerate(zip(old, now)) if a != b)
                crew += _new_from(r, first, i, tokens(segs[:1 + len(s.hubs[hub].rules) + k]))
            seen.add((hub, version))
        board += _first_ops_turns(r, first)
    assert crew >= 5 and board >= 5 and terms >= 3


def _loyalty_turns(r, first) -> int:
    """Loyalty turns read the summary and the picked sections as they stand; the first to
    hold a section of the new version is new from it on. How many such."""
    s, seen = r.state, set()
    change = s.terms.versions[1][0]
    for i in of_kind(r, "loyalty"):
        segs, t = r.meta[i][3], r.times[i]
        picks = s.chats[r.meta[i][1]].picks
        assert segs[1:2 + len(picks)] == [*s.terms_summary.at(t), *(s.terms.at(t)[k]
                                                                      for k in picks)]
        fresh = [k for k in picks if k >= s.terms_cut and t >= change]
        if fresh and fresh[0] not in seen:
            at = 2 + picks.index(fresh[0])
            assert _new_from(r, first, i, tokens(segs[:at]))
            seen.add(fresh[0])
    return len(seen)


def _first_ops_turns(r, first) -> int:
    """Ops turns that are the first under their board version, new from the first group
    that changed (each checked)."""
    s, seen, out = r.state, set(), 0
    for i in of_kind(r, "ops"):
        hub, t = s.chats[r.meta[i][1]].owner, r.times[i]
        versions = s.hubs[hub].board.versions
        v = max(k for k, (when, _) in enumerate(versions) if when <= t)
        assert r.meta[i][3][1:2 + len(versions[v][1])] == [s.hubs[hub].head, *versions[v][1]]
        if v > 0 and (hub, v) not in seen:
            k = next(k for k, (a, b) in enumerate(zip(versions[v - 1][1], versions[v][1]))
                     if a != b)
            assert _new_from(r, first, i, tokens(r.meta[i][3][:2 + k]))
            out += 1
        seen.add((hub, v))
    return out


@pytest.mark.parametrize("seed", [1, 2])
def test_nightly_briefs_and_maintenance_runs_walk_in_order(seed):
    """The briefing walk takes every departure of the next local day by station, then time,
    each station's notes shared by its flights; every 3 h the maintenance walk takes the
    tails with new write-ups, each prompt the header and the five-day window."""
    r = _small(seed)
    s = r.state
    briefs = [w for w in s.walks if w.kind == "brief"]
    assert [w.owner for w in briefs] == [0, 1]
    for w in briefs:
        assert BRIEF_AT[0] <= (r.times[w.sent[0]] - w.owner * DAY) / HOUR < BRIEF_AT[1]
        day = sorted((f for f, x in enumerate(s.flights) if x.day == w.owner + 1),
                     key=lambda f: (s.flights[f].station, s.flights[f].dep))
        assert w.items == day and len(day) > 30
        for i, j in itertools.pairwise(w.sent):
            if s.flights[r.meta[i][1]].station == s.flights[r.meta[j][1]].station:
                assert common(r.trace[i], r.trace[j]) >= tokens(r.meta[i][3][:3]) // BLOCK
    runs = [w for w in s.walks if w.kind == "mx"]
    assert len(runs) >= 10
    for w in runs:
        t = r.times[w.sent[0]]
        assert round((t - MX_RUN[0]) / MX_RUN[1]) == w.owner and w.items == sorted(w.items)
        for i, tail in zip(w.sent, w.items):
            entries = [e for when, e in s.tails[tail].entries
                       if r.times[i] - WINDOW <= when <= r.times[i]]
            assert r.meta[i][3][1:-1] == [s.tails[tail].header, *entries]


def test_a_schedule_change_walks_every_moved_pnr():
    """On the schedule-change seed the day-0 change walks each moved departure's PNRs in
    turn: the notice and both plans shared, the PNR as booked; each then sits on the new
    flight, and some ask the agent about it with the new record."""
    r = _small(3)
    s = r.state
    change = s.changes[0]
    w = next(w for w in s.walks if w.kind == "reaccom" and w.owner == 0)
    assert len(w.items) == len(set(w.items)) >= len(change.moves) * 2
    assert [change.move_of[p] for p in w.items] == sorted(change.move_of[p] for p in w.items)
    for i, p in zip(w.sent, w.items):
        old, new = change.moves[change.move_of[p]]
        assert r.meta[i][3][:4] == [s.system["reaccom"], change.notice, s.flights[old].plan,
                                    s.flights[new].plan]
        assert s.flights[old].cancelled <= r.times[i] < s.flights[old].dep
    for i, j in itertools.pairwise(w.sent):
        if change.move_of[r.meta[i][2]] == change.move_of[r.meta[j][2]]:
            assert common(r.trace[i], r.trace[j]) >= tokens(r.meta[i][3][:4]) // BLOCK
    follow = [c for _, c in chats_of(r, "agent") if c.owner in change.move_of and
              c.history[0] != s.pnrs[c.owner].record.versions[0][1][0]]
    assert len(follow) >= 3


def test_one_offs_share_only_their_heads():
    """After-call summaries, complaints and agency emails: a shared head (system prompt,
    dispositions and the call type's template, the taxonomy, the agency's profile), then
    text seen nowhere else; emails at local 09..17."""
    r, first = _small(2), _first(2)
    s = r.state
    for kind, head in (("acw", 3), ("complaint", 2), ("email", 2)):
        reqs = of_kind(r, kind)
        assert len(reqs) > 50
        for i in reqs:
            segs = r.meta[i][3]
            assert segs[0] == s.one_off[kind][0] and len(segs) == head + 2
            assert _new_from(r, first, i, tokens(segs[:head]))
    for i in of_kind(r, "email"):
        h = r.meta[i][2]
        assert 9 <= (r.times[i] / HOUR + s.hubs[h].tz) % 24 < 18
