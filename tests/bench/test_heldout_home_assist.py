"""bench/heldout_home_assist.py: the held-out shape home_assist has the properties its docstring
names. Structure only: no policy, no hit rate."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from bench.heldout import SHAPES
from bench.heldout_fewshot import BLOCK
from bench.heldout_home_assist import KINDS, generate, home_assist
from bench.heldout_homea_jobs import (BRIEF_JITTER, BRIEF_TIMES, DIGEST_HOUR, ENERGY_DAYS,
                                      EVENT, MAX_LOG)
from bench.heldout_homea_voice import GOODNIGHT, LIVE_TOKENS, MAX_CONTEXT, REPEAT
from bench.heldout_homea_world import END, HOUR, MINUTE, local
from tests.bench.trace_parts import (SmallRuns, blocks_by_kind, check_chains, check_ordered,
                                     common, extends, of_kind, tokens)

SCALE = 0.2
SMALL = SmallRuns(generate, SCALE)  # each seed's run and first_seen, made once
_small, _first = SMALL.run, SMALL.first
INLINE, LIVE = 1, 2  # seed 1: states in the prompt and a clock line; seed 2: neither


def _hour(r, t, h):
    """Home ``h``'s local hour (0..24) at ``t``."""
    return local(t, r.state.homes[h].tz) % 24


def _turns(r, kinds=("command",)):
    """(session, turn, its request indices) of the sessions of ``kinds``."""
    return [(s, k, p) for s in r.state.sessions if s.kind in kinds
            for k, p in enumerate(s.passes)]


def _fresh_from(r, first, i, k):
    """Whether every block of request ``i`` from token ``k`` on was first seen there."""
    return all(first[b] == i for b in r.trace[i][k // BLOCK:])


def test_deterministic_and_seeded():
    """Same seed, same trace; seeds differ in structure (the stack: region, states in the
    prompt or a tool, clock line; the rollouts), not just in noise; every kind is there, in
    time order."""
    assert SHAPES["home_assist"] is home_assist  # registered in bench.heldout
    assert home_assist(1, 0.05) == home_assist(1, 0.05) != home_assist(2, 0.05)
    assert generate(3, 0.05).trace == home_assist(3, 0.05)
    a, b = _small(INLINE).state, _small(LIVE).state
    assert (a.stack.region, a.stack.states, a.stack.clock) == ("us", "inline", True)
    assert (b.stack.region, b.stack.states, b.stack.clock) == ("eu", "live", False)
    assert [v.change for v in a.versions] != [v.change for v in b.versions]
    for seed in (INLINE, LIVE):
        check_ordered(_small(seed), KINDS)


@pytest.mark.parametrize("seed", [INLINE, LIVE])
def test_sizes_and_span(seed):
    """At scale 0.2: 150K..500K blocks over two days, the voice passes the largest part;
    every job walk finished."""
    r = _small(seed)
    blocks = blocks_by_kind(r)
    total = sum(blocks.values())
    assert 150_000 <= total <= 500_000
    assert blocks["command"] + blocks["tool_loop"] > 0.45 * total
    assert 44 * HOUR < r.times[-1] < END and r.times[0] < 2 * HOUR
    s = r.state
    walks = [*s.digests, *(w for _, *runs in s.evals for w in runs)]
    assert walks and all(w.pos == len(w.items) == len(w.sent) for w in walks)


@pytest.mark.parametrize("seed", [INLINE, LIVE])
def test_prefix_chains_are_well_formed(seed):
    """A block id always follows the same parent; a request is the full blocks of its
    segments, the same segments always the same ids; two requests share exactly the blocks
    of the segments they start with."""
    check_chains(_small(seed), 3)


@pytest.mark.parametrize("seed", [INLINE, LIVE])
def test_rollouts_follow_the_homes_bucket(seed):
    """Every voice pass starts with the system prompt and tools of the newest version whose
    share passes the home's bucket; homes switch during the trace, and a rolled-back version
    serves nobody after its rollback."""
    r = _small(seed)
    s = r.state
    used = Counter()
    for sess, _, sent in _turns(r, ("command", "goodnight", "app_chat")):
        bucket, t = s.homes[sess.home].bucket, r.times[sent[0]]
        v = next(v for v in reversed(s.versions) if v.share(t) > bucket)
        assert r.meta[sent[0]][3][:2] == [v.system, v.tools]
        used[s.versions.index(v)] += 1
    assert len(used) >= 2
    for v in s.versions:
        if v.stages[-1][1] == 0.0:
            late = [p[0] for _, _, p in _turns(r) if r.times[p[0]] >= v.stages[-1][0]]
            assert late and all(r.meta[i][3][:2] != [v.system, v.tools] for i in late)
    assert any(v.stages[-1][1] == 0.0 for v in _small(INLINE).state.versions)


@pytest.mark.parametrize("seed", [INLINE, LIVE])
def test_tool_loops_extend_the_turn_and_the_next_turn_extends_it(seed):
    """A tool loop re-sends the pass before it exactly plus the call and its result (a
    GetLiveContext result is 10 tokens a device); the next turn extends the last pass exactly
    when nothing before the history changed (same version, sections, clock)."""
    r = _small(seed)
    s = r.state
    loops = extended = 0
    for sess, k, sent in _turns(r, ("command", "goodnight")):
        assert len(sent) == 1 + len(sess.tools[k])
        for (i, j), call in zip(itertools.pairwise(sent), sess.tools[k]):
            a, b = r.meta[i][3], r.meta[j][3]
            assert b[:len(a)] == a and len(b) == len(a) + 2 and r.meta[j][0] == "tool_loop"
            assert r.trace[j][:len(r.trace[i])] == r.trace[i] and r.times[j] > r.times[i]
            if call == "live":
                assert b[-1][1] == s.homes[sess.home].entities * LIVE_TOKENS
            loops += 1
    for sess in s.sessions:
        if sess.kind == "command":
            head = 4 + len(s.homes[sess.home].areas) + s.stack.clock
            last, firsts = [p[-1] for p in sess.passes], [p[0] for p in sess.passes]
            for a, b in zip(last, firsts[1:]):
                same = r.meta[a][3][:head] == r.meta[b][3][:head]
                extended += extends(r, [a, b], lambda i, j, x=same: x)
                assert tokens(r.meta[a][3]) < MAX_CONTEXT
    assert loops >= 50 and extended >= 5


def test_inline_states_make_later_blocks_new():
    """Inline stack: an area whose state changed gets a new section, first rendered by one
    request: every block from that section on is new there; an action call changes one."""
    r, first = _small(INLINE), _first(INLINE)
    s = r.state
    fresh = touched = 0
    for sess, k, sent in _turns(r):
        i, home = sent[0], s.homes[sess.home]
        segs, born = r.meta[i][3], {seg: t for a in home.areas for t, seg in a.versions[1:]}
        news = [n for n in range(len(home.areas)) if born.get(segs[3 + n]) == r.times[i]]
        if news:
            assert _fresh_from(r, first, i, tokens(segs[:3 + news[0]]))
            fresh += 1
        for j, call in zip(sent[1:], sess.tools[k]):
            if call == "action":
                assert r.times[j] in born.values()
                touched += 1
    assert fresh >= 20 and touched >= 20


def test_live_sections_change_only_by_device_edits():
    """Live stack: the overview holds no states, so an area's section has a new version only
    when a device is edited; the states come in GetLiveContext results."""
    r = _small(LIVE)
    s = r.state
    edits = Counter(s.edits)
    for h, home in enumerate(s.homes):
        for a in home.areas:
            assert all(edits[(t, h)] for t, _ in a.versions[1:])
    assert sum(t.count("live") for x in s.sessions for t in x.tools) >= 50


@pytest.mark.parametrize("seed", [INLINE, LIVE])
def test_the_clock_line(seed):
    """With a clock the line after the sections is the zone's of that minute; without one
    no clock line is sent and 5 % of commands call GetDateTime."""
    r = _small(seed)
    s = r.state
    for sess, _, sent in _turns(r):
        segs, t, home = r.meta[sent[0]][3], r.times[sent[0]], s.homes[sess.home]
        at = 3 + len(home.areas)
        assert segs[2] == home.profile and segs[at + s.stack.clock] == home.satellites[sess.sat]
        if s.stack.clock:
            assert segs[at] == s.clocks[(home.tz, int(t // MINUTE))]
    dates = sum(t.count("date") for x in s.sessions for t in x.tools)
    assert (dates == 0) == s.stack.clock


def test_goodnight_fires_at_the_homes_time_each_night():
    """The good-night routine sends the home's phrase at its set time (22:00..23:30 plus up
    to 20 s) every night, then 2..4 actions (after a GetLiveContext call when live)."""
    nights = 0
    for seed in (INLINE, LIVE):
        r = _small(seed)
        s = r.state
        by_home = {}
        for sess in s.sessions:
            if sess.kind == "goodnight":
                i = sess.passes[0][0]
                hour = _hour(r, r.times[i], sess.home)
                assert any(0 <= hour - at < 20 / HOUR for at, _ in GOODNIGHT)
                assert r.meta[i][3][-1] == sess.phrase and 2 <= sess.tools[0].count("action") <= 4
                by_home.setdefault(sess.home, []).append((hour, sess.phrase))
        for runs in by_home.values():
            nights += len(runs) > 1
            assert len({p for _, p in runs}) == 1 and max(runs)[0] - min(runs)[0] < 20 / HOUR
    assert nights >= 3


def test_briefings_fire_at_round_times_and_share_the_zone_digest():
    """A briefing fires at the home's set time (a round time, up to 30 s late); briefings of
    one zone and hour share the fleet prompt, the zone's template and digest; the home's
    notes and the cue after them are new."""
    shared = 0
    for seed in (INLINE, LIVE):
        r, first = _small(seed), _first(seed)
        s = r.state
        by_hour = {}
        for i in of_kind(r, "routine"):
            h, segs = r.meta[i][1], r.meta[i][3]
            hour = _hour(r, r.times[i], h)
            assert any(0 <= hour - at <= BRIEF_JITTER / HOUR for at, _ in BRIEF_TIMES)
            assert segs[1] == s.templates[s.homes[h].tz]
            by_hour.setdefault((s.homes[h].tz, int(local(r.times[i], s.homes[h].tz))),
                               []).append(i)
            assert _fresh_from(r, first, i, tokens(segs[:3]))
        for group in by_hour.values():
            for i, j in itertools.pairwise(group):
                assert r.meta[i][3][:3] == r.meta[j][3][:3]
                assert common(r.trace[i], r.trace[j]) == tokens(r.meta[i][3][:3]) // BLOCK
                shared += 1
    assert shared >= 10


@pytest.mark.parametrize("seed", [INLINE, LIVE])
def test_automations_repeat_in_bursts_and_an_outage_fires_a_zone(seed):
    """A trigger's repeats come 10..120 s apart with the same notify prompt, profile and
    instruction and a new event; an outage fires the alerts of its zone's homes within 10
    minutes, all behind the same notify prompt and outage text."""
    r, first = _small(seed), _first(seed)
    s = r.state
    bursts = 0
    for burst in s.bursts:
        for i, j in itertools.pairwise(burst):
            assert REPEAT[2][0] <= r.times[j] - r.times[i] <= REPEAT[2][1]
            assert r.meta[i][3][:3] == r.meta[j][3][:3] and r.meta[i][1:3] == r.meta[j][1:3]
            assert _fresh_from(r, first, j, tokens(r.meta[j][3][:3]))
        bursts += len(burst) > 1
    assert bursts >= 10
    for t, tz, sent in s.outages:
        assert sent and all(0 <= r.times[i] - t <= 10 * MINUTE for i in sent)
        homes = [r.meta[i][1] for i in sent]
        assert len(set(homes)) == len(homes) and {s.homes[h].tz for h in homes} == {tz}
        assert all(r.meta[i][3][:2] == [s.notify, s.outage_text] for i in sent)


def test_camera_summaries_grow_with_the_days_log():
    """A summary holds the home's camera events of its local day so far; a later one the
    same day re-sends the earlier log and more; follow-ups extend the session exactly."""
    grown = follow = 0
    for seed in (INLINE, LIVE):
        r = _small(seed)
        s = r.state
        last = {}
        for sess in s.sessions:
            if sess.kind != "camera":
                continue
            i, h = sess.passes[0][0], sess.home
            day = int(local(r.times[i], s.homes[h].tz) // 24)
            assert sess.fixed and all(seg in {x for _, x in s.logs[h]} for seg in sess.fixed)
            prev = last.get((h, day))
            if prev is not None and tokens(sess.fixed) <= MAX_LOG - EVENT[3]:  # not trimmed
                assert sess.fixed[:len(prev)] == prev
                grown += len(sess.fixed) > len(prev)
            last[(h, day)] = sess.fixed
            firsts = [p[0] for p in sess.passes]
            follow += extends(r, firsts, lambda i, j: True)
    assert grown >= 3 and follow >= 3


def test_energy_tables_slide_at_local_midnight():
    """An energy report holds the home's last seven local days (one section a day); two
    reports of a home the same day send the same table, a day apart the table has slid (the
    oldest day dropped, the newest added), so every block from the table on differs."""
    checked, pairs = 0, Counter()
    for seed in (INLINE, LIVE):
        r = _small(seed)
        s = r.state
        seen = {}
        for sess in s.sessions:
            if sess.kind != "energy":
                continue
            i, h = sess.passes[0][0], sess.home
            d = int(local(r.times[i], s.homes[h].tz) // 24)
            head = [s.system["energy"], s.homes[h].profile]
            assert sess.fixed == [s.energy_days[(h, x)] for x in range(d - ENERGY_DAYS, d)]
            assert r.meta[i][3][:2 + ENERGY_DAYS] == head + sess.fixed
            for j, e in seen.get(h, []):
                cut = tokens(head + sess.fixed) if e == d else tokens(head)
                assert common(r.trace[i], r.trace[j]) >= cut // BLOCK
                assert e == d or common(r.trace[i], r.trace[j]) == cut // BLOCK
                pairs[e == d] += 1
            seen.setdefault(h, []).append((i, d))
            checked += 1
    assert checked >= 5 and pairs[False] >= 1


@pytest.mark.parametrize("seed", [INLINE, LIVE])
def test_digests_walk_each_zones_homes_overnight(seed):
    """Each zone's nightly walk starts at local 04:30..04:40 and takes its digest homes in
    id order: the digest prompt, the template, the profile, then the day's events (new)."""
    r, first = _small(seed), _first(seed)
    s = r.state
    for w in s.digests:
        tz = s.homes[w.items[0]].tz
        assert w.items == sorted(h for h in s.with_feature("digest") if s.homes[h].tz == tz)
        hour = local(r.times[w.sent[0]], tz) % 24
        assert DIGEST_HOUR <= hour < DIGEST_HOUR + 10 / 60
        for i, h in zip(w.sent, w.items):
            head = [s.system["digest"], s.system["template"], s.homes[h].profile]
            assert r.meta[i][3][:3] == head and _fresh_from(r, first, i, tokens(head))
    assert len(s.digests) >= 2


def test_shadow_evaluations_replay_the_eval_set():
    """Before a canary the eval set is walked twice at once: with the candidate's head and
    with the fleet's; both send the same homes and utterances; a later evaluation's fleet
    walk re-sends an earlier candidate's requests exactly once that version is fleet-wide."""
    repeats = 0
    for seed in (INLINE, LIVE):
        r = _small(seed)
        s = r.state
        for k, cand, base in s.evals:
            v = s.versions[k]
            assert cand.head == [v.system, v.tools] and 0 < v.start - r.times[cand.sent[0]]
            assert cand.items == base.items and len(cand.sent) == len(base.sent)
            for i, j in zip(cand.sent, base.sent):
                assert r.meta[i][3][2:] == r.meta[j][3][2:]
        for (_, c1, _), (_, _, b2) in itertools.combinations(s.evals, 2):
            if c1.head == b2.head:
                assert all(r.trace[i] == r.trace[j] for i, j in zip(c1.sent, b2.sent))
                repeats += 1
    assert repeats >= 1


def test_app_chats_resend_the_automations_yaml():
    """An app chat holds the home's automations YAML as it stood when it began; a chat that
    saves adds a version, so a later chat of the home re-sends new blocks from the YAML on."""
    versions = chats = 0
    for seed in (INLINE, LIVE):
        r = _small(seed)
        s = r.state
        for sess in s.sessions:
            if sess.kind == "app_chat":
                t = r.times[sess.passes[0][0]]
                assert sess.fixed == [max(v for v in s.yaml[sess.home] if v[0] <= t)[1]]
                assert r.meta[sess.passes[0][0]][3][-2] == sess.fixed[0]
                chats += 1
        versions += sum(len(v) - 1 for v in s.yaml.values())
    assert chats >= 10 and versions >= 3


def test_voice_follows_the_local_day():
    """Voice sessions peak in the local evening: more in 17..22 than 5x those in 01..05."""
    r = _small(LIVE)
    hours = Counter(int(_hour(r, r.times[x.passes[0][0]], x.home)) for x in r.state.sessions
                    if x.kind == "command")
    assert sum(hours[h] for h in range(17, 22)) > 5 * sum(hours[h] for h in range(1, 5))
