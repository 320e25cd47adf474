"""bench/heldout_sports_live.py: the held-out shape sports_live has the properties its docstring
names. Structure only: no policy, no hit rate."""

from __future__ import annotations

import pytest

from bench.heldout_fewshot import BLOCK
from bench.heldout_sports_live import KINDS, generate, sports_live
from bench.heldout_sports_live_desk import BURST_TAU, PUSH_DELAY, PUSH_EVENTS, RECAP_DELAY
from bench.heldout_sports_live_world import DAY, LAYOUTS, MINUTE, PBP_WINDOW
from tests.bench.trace_parts import (SmallRuns, chats_of, check_chains, check_ordered, common,
                                     of_kind, shared_tokens, tokens)

SCALE = 0.1
SMALL = SmallRuns(generate, SCALE)  # each seed's run and first_seen, made once
_small, _first = SMALL.run, SMALL.first


def _live_at(s, t: float) -> int:
    """How many matches are on at ``t``."""
    return sum(x.kickoff <= t < x.end for x in s.matches)


def test_deterministic_and_seeded():
    """Same seed, same trace; seeds 1..4 have the four layouts, which differ in fixtures (few
    soccer matches, many overlapping US games, a day-long Test match, odds in the betting
    app's live state); every kind is there, in time order."""
    assert sports_live(1, 0.02) == sports_live(1, 0.02) != sports_live(2, 0.02)
    assert generate(3, 0.02).trace == sports_live(3, 0.02)
    states = [_small(seed).state for seed in (1, 2, 3, 4)]
    assert [s.layout for s in states] == list(LAYOUTS)
    for seed in (1, 2, 3, 4):
        check_ordered(_small(seed), KINDS)
    football, us, cricket, betting = states
    assert len(football.matches) <= 14 < 24 <= len(us.matches)
    assert max(_live_at(us, m.kickoff + MINUTE) for m in us.matches) >= 6
    assert max(m.sport.minutes for m in cricket.matches) == 420
    assert all(t.odds for m in betting.matches for t in m.ticks)
    assert not any(t.odds for s in states[:3] for m in s.matches for t in m.ticks)


@pytest.mark.parametrize("seed", [1, 3])
def test_matches_tick_every_minute_with_moments(seed):
    """A match has a new version every minute from kick-off to the final whistle (a new score
    line each, the log only growing); its moments are kick-off, key events (each a log
    entry), the final whistle; a version's state pastes the latest entries up to the window."""
    r = _small(seed)
    s = r.state
    for m in s.matches:
        assert [t.time for t in m.ticks] == [m.kickoff + k * MINUTE
                                             for k in range(m.sport.minutes)]
        assert len({t.score for t in m.ticks}) == len(m.ticks)
        assert all(a.events <= b.events for a, b in zip(m.ticks, m.ticks[1:]))
        whats = [w for w, _ in m.moments]
        assert whats[0] == "kickoff" and whats[-1] == "final" and set(whats[1:-1]) <= {"key"}
        last = m.state(len(m.ticks) - 1)
        pasted = last[2 + bool(m.ticks[-1].odds) + len(m.ticks[-1].box):]
        assert pasted == m.pbp[len(m.pbp) - len(pasted):] and tokens(pasted) <= PBP_WINDOW
        assert m.state(None) == [m.header, m.pre]
    assert sum(w == "key" for m in s.matches for w, _ in m.moments) >= 2 * len(s.matches)


@pytest.mark.parametrize("seed", [1, 4])
def test_live_chats_resend_the_whole_chat_behind_the_state_as_it_stands(seed):
    """A live or burst turn is the fan head (app voice, the region's betting rules,
    attribution), the match's state at that minute, the whole chat so far, the message; two
    requests on one match share the state only within one minute's version."""
    r = _small(seed)
    s = r.state
    for kind in ("live", "burst"):
        for n, chat in chats_of(r, kind):
            m = s.matches[chat.owner]
            for k, i in enumerate(chat.sent):
                head = [*s.fan_head(chat.region), *m.state(m.tick_at(r.times[i]))]
                assert r.meta[i][:3] == (kind, n, k)
                assert r.meta[i][3] == [*head, *chat.history[:2 * k + 1]]
    same = other = 0
    for i, j in zip(of_kind(r, "live"), of_kind(r, "live")[1:]):
        a, b = r.meta[i][3], r.meta[j][3]
        assert common(r.trace[i], r.trace[j]) == shared_tokens(a, b) // BLOCK
        m = s.matches[s.chats[r.meta[i][1]].owner]
        if s.chats[r.meta[j][1]].owner != s.chats[r.meta[i][1]].owner or a[:3] != b[:3]:
            continue
        ti, tj = m.tick_at(r.times[i]), m.tick_at(r.times[j])
        if ti is not None and ti == tj:
            state = m.state(ti)
            same += a[3:3 + len(state)] == b[3:3 + len(state)] == state
        elif ti is not None:
            other += shared_tokens(a, b) == tokens(a[:4])
    assert same >= 2 and other >= 5, (same, other)


@pytest.mark.parametrize("seed", [1, 2])
def test_bursts_follow_a_big_matchs_moments(seed):
    """Bursts come only on big matches, each fan minutes after one of its moments; a big
    match gets more live chats a minute than the rest."""
    r = _small(seed)
    s = r.state
    bursts = chats_of(r, "burst")
    assert len(bursts) >= 10
    for _, chat in bursts:
        m = s.matches[chat.owner]
        t = r.times[chat.sent[0]]
        assert m.big and any(0 <= t - m.ticks[k].time < 30 * BURST_TAU for _, k in m.moments)
    rate = {b: [] for b in (True, False)}
    for m in s.matches:
        n = sum(s.matches[c.owner] is m for _, c in chats_of(r, "live"))
        rate[m.big].append(n / m.sport.minutes)
    assert min(rate[True]) > sum(rate[False]) / len(rate[False])


@pytest.mark.parametrize("seed", [2, 3])
def test_fantasy_behind_stat_tables_rewritten_at_final_whistles(seed):
    """A fantasy turn is the fan head, the fantasy prompt, the scoring rules, the tables
    its question is about as they stand (in order), the roster, the chat; tables are
    rewritten at a fantasy-sport match's final whistle, and the next request reading a
    rewritten table is new from the first rewritten table it reads on."""
    r, first = _small(seed), _first(seed)
    s = r.state
    finals = {m.end - MINUTE for m in s.matches if m.sport.name == s.layout.fantasy}
    assert s.edits and all(t in finals for t, _ in s.edits)
    checked = 0
    for n, chat in chats_of(r, "fantasy"):
        assert list(chat.tables) == sorted(set(chat.tables)) and len(chat.fixed) == 1
        for k, i in enumerate(chat.sent):
            tables = s.tables.at(r.times[i])
            head = [*s.fan_head(chat.region), s.chat_system["fantasy"], s.scoring,
                    *(tables[x] for x in chat.tables), *chat.fixed]
            assert r.meta[i][3] == [*head, *chat.history[:2 * k + 1]]
    for t, _ in s.edits:
        new = set(s.tables.at(t)) - set(s.tables.at(t - 1))
        later = [i for i in of_kind(r, "fantasy") if r.times[i] >= t
                 and set(r.meta[i][3]) & new]
        if later:
            segs = r.meta[later[0]][3]
            cut = min(segs.index(x) for x in new if x in segs)
            assert all(first[b] == later[0]
                       for b in r.trace[later[0]][tokens(segs[:cut]) // BLOCK:])
            checked += 1
    assert checked >= 1, checked


@pytest.mark.parametrize("seed", [2, 4])
def test_previews_recaps_and_pushes(seed):
    """A morning batch walks the day's fixtures by kick-off, each with every template (the
    writer, the template, both dossiers, the head-to-head, the cue), one after another; a
    recap (and, for a big match, ratings) follows the final whistle behind the full log; a
    push follows each moment behind that minute's score line and the latest entries."""
    r = _small(seed)
    s = r.state
    assert [b.day for b in s.batches] == [0, 1]
    for b in s.batches:
        start = r.times[b.sent[0]]
        day = [i for i, m in enumerate(s.matches) if int(m.kickoff // DAY) == b.day]
        assert [m for m, _ in b.jobs[::len(s.previews)]] == day and 6 <= start / 3600 % 24 < 7
        assert b.jobs == [(m, v) for m in day for v in range(len(s.previews))]
        for (m, v), i in zip(b.jobs, b.sent):
            x = s.matches[m]
            assert r.meta[i] == ("preview", m, v, [s.writer, s.previews[v], s.dossiers[x.home],
                                                   s.dossiers[x.away], x.h2h, s.cue["preview"]])
        assert r.times[b.sent[0]] < r.times[b.sent[1]] < r.times[b.sent[-1]]
    assert sorted((m, v) for m, v, _ in s.recapped) == sorted(
        (i, v) for i, m in enumerate(s.matches) for v in range(1 + m.big))
    for m, v, i in s.recapped:
        x = s.matches[m]
        assert RECAP_DELAY[0] <= r.times[i] - x.end + MINUTE <= RECAP_DELAY[1] + MINUTE
        assert r.meta[i][3][-len(x.pbp) - 1:-1] == x.pbp and r.meta[i][3][1] == s.recaps[v]
    assert len(s.pushes) == sum(len(m.moments) for m in s.matches)
    for m, j, i in s.pushes:
        x = s.matches[m]
        tick = x.ticks[x.moments[j][1]]
        assert PUSH_DELAY[0] <= r.times[i] - tick.time <= PUSH_DELAY[1]
        latest = x.pbp[max(0, tick.events - PUSH_EVENTS):tick.events]
        assert r.meta[i][3] == [s.push, x.header, tick.score, *latest, s.cue["push"]]


@pytest.mark.parametrize("seed", [3, 4])
def test_general_chats_and_block_chains(seed):
    """A general chat is the fan head, a team's dossier (a team playing this weekend), the
    whole chat; every request is the full blocks of its segments, chained."""
    r = _small(seed)
    s = r.state
    playing = {t for m in s.matches for t in (m.home, m.away)}
    chats = chats_of(r, "chat")
    assert len(chats) >= 10
    for n, chat in chats:
        assert chat.owner in playing
        for k, i in enumerate(chat.sent):
            head = [*s.fan_head(chat.region), s.dossiers[chat.owner]]
            assert r.meta[i] == ("chat", n, k, [*head, *chat.history[:2 * k + 1]])
    check_chains(r, 5)
