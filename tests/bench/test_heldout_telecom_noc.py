"""bench/heldout_telecom_noc.py: the held-out shape telecom_noc has the properties its
docstring names. Structure only: no policy, no hit rate."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from bench.heldout_fewshot import BLOCK
from bench.heldout_legal_parts import first_change
from bench.heldout_noc_alarms import LAG, MAJOR, STATUS_GAP
from bench.heldout_noc_desk import KPI_START
from bench.heldout_noc_parts import DAY, END, HOUR, MINUTE, WINDOW
from bench.heldout_telecom_noc import KINDS, generate, telecom_noc
from tests.bench.trace_parts import (SmallRuns, blocks_by_kind, check_chains, check_ordered,
                                     common, extends, shared_tokens, tokens)
from tests.bench.trace_parts import chats_of

SCALE = 0.2
SMALL = SmallRuns(generate, SCALE)  # each seed's run and first_seen, made once
_small, _first = SMALL.run, SMALL.first


def _new_from(r, first, i, k):
    """Every block of request ``i`` from the one holding token ``k`` on is first seen there."""
    return all(first[b] == i for b in r.trace[i][k // BLOCK:])


def test_deterministic_and_seeded():
    """Same seed, same trace; seeds differ in structure (regions and their vendors, which
    storms strike where, which platforms get a release), not just in noise; requests are
    non-empty, in time order, and every kind is there."""
    assert telecom_noc(1, 0.05) == telecom_noc(1, 0.05) != telecom_noc(2, 0.05)
    assert generate(3, 0.05).trace == telecom_noc(3, 0.05)
    shapes = []
    for seed in (1, 2, 3, 4):
        s = generate(seed, 0.05).state
        storms = tuple((i.kind, i.region, len(i.sites)) for i in s.incidents if i.kind != "site")
        shapes.append(([x.ran for x in s.regions], storms, sorted(p for _, p in s.releases)))
    assert len({repr(x) for x in shapes}) == 4 and len({repr(x[1]) for x in shapes}) == 4
    for seed in (1, 2):
        check_ordered(_small(seed), KINDS)


@pytest.mark.parametrize("seed", [1, 2])
def test_sizes_and_span(seed):
    """At scale 0.2: 250K..600K blocks over two days, triage the largest kind; every KPI walk
    finished with its roll-up."""
    r = _small(seed)
    blocks = blocks_by_kind(r)
    assert 250_000 <= sum(blocks.values()) <= 600_000
    assert max(blocks, key=blocks.__getitem__) == "triage"
    assert r.times[0] < HOUR and 46 * HOUR < r.times[-1] < END
    assert all(w.pos == len(w.items) == len(w.sent) - 1 for w in r.state.walks)


def test_prefix_chains_are_well_formed():
    """A block id always follows the same parent; a request is the full blocks of its
    segments, the same segments always the same ids; two requests share exactly the blocks
    of the segments they start with."""
    check_chains(_small(1), 3)


@pytest.mark.parametrize("seed", [1, 2])
def test_each_alarm_is_triaged_behind_its_entry_and_site(seed):
    """Each alarm is triaged once, LAG after it is raised: the system prompt, its code's
    dictionary entry, the site's record as it stands, the alarm, the cue; every block from
    the alarm on is new; alarms of one code share the head through the entry."""
    r, first = _small(seed), _first(seed)
    s = r.state
    done = [m[2] for m in r.meta if m[0] == "triage"]
    assert len(done) == len(set(done))
    assert {a for a, al in enumerate(s.alarms) if al.time < END - LAG[1]} <= set(done)
    by_code = {}
    for i, m in enumerate(r.meta):
        if m[0] != "triage":
            continue
        al, t = s.alarms[m[2]], r.times[i]
        entry = s.platforms[al.platform].entries[al.code]
        head = [s.system["triage"], entry, s.sites[al.site].record.at(t)[0]]
        assert m == ("triage", al.site, m[2], [*head, al.text, s.cue["triage"]])
        assert al.time + LAG[0] <= t <= al.time + LAG[1]
        assert _new_from(r, first, i, tokens(head))
        j = by_code.setdefault((al.platform, al.code), i)
        assert common(r.trace[i], r.trace[j]) >= tokens(head[:2]) // BLOCK


@pytest.mark.parametrize("seed", [1, 2])
def test_a_fiber_cut_isolates_a_ring_in_a_burst(seed):
    """A fiber cut takes one ring: each site raises 2..4 link alarms and the hub's router
    1..3 within 3 minutes, each site clears one after the splice; the triage burst holds
    over two requests per site within 5 minutes."""
    r = _small(seed)
    s = r.state
    cuts = [i for i in s.incidents if i.kind == "fiber"]
    assert cuts
    for inc in cuts:
        assert inc.sites in s.regions[inc.region].rings and inc.major == (len(inc.sites) >= MAJOR)
        alarms = [a for a in s.alarms if a.case == inc.case]
        raised = [a for a in alarms if a.origin == "fiber"]
        t0 = min(a.time for a in raised)
        assert max(a.time for a in raised) - t0 <= 3 * MINUTE and t0 < inc.start
        per = Counter(a.site for a in raised if s.platforms[a.platform].kind == "ran")
        assert set(per) == set(inc.sites) and all(2 <= k <= 4 for k in per.values())
        clears = [a for a in alarms if a.origin == "clear"]
        assert sorted(a.site for a in clears) == sorted(inc.sites)
        assert all(inc.end <= a.time <= inc.end + 600 for a in clears)
        burst = sum(1 for t, m in zip(r.times, r.meta) if m[0] == "triage" and
                    t0 <= t < t0 + 5 * MINUTE and s.alarms[m[2]].case == inc.case)
        assert burst > 2 * len(inc.sites)


def test_a_power_outage_drains_batteries_into_a_second_wave():
    """A grid outage over a run of a region's sites: mains failure at each within 5 minutes;
    where batteries run out before mains return, battery low, then the site down 20 minutes
    later; every site clears after mains return."""
    waves = 0
    for seed in (1, 2):
        s = _small(seed).state
        for inc in (i for i in s.incidents if i.kind == "power"):
            sites = s.regions[inc.region].sites
            k = sites.index(inc.sites[0])
            assert sites[k:k + len(inc.sites)] == inc.sites and len(inc.sites) >= 10
            mains, low, down = s.platforms[s.regions[inc.region].ran].power
            alarms = [a for a in s.alarms if a.case == inc.case]
            t0 = min(a.time for a in alarms)
            for site in inc.sites:
                mine = {(a.origin, a.code): a.time for a in alarms if a.site == site}
                assert t0 <= mine[("power", mains)] <= t0 + 300
                assert mine[("clear", mains)] >= inc.end
                if ("power", down) in mine:
                    assert mine[("power", down)] - mine[("power", low)] == pytest.approx(1200)
                    assert mine[("power", down)] < inc.end <= mine[("clear", down)]
                    waves += 1
    assert waves >= 5


@pytest.mark.parametrize("seed", [1, 2])
def test_case_summaries_grow_as_alarms_join(seed):
    """A case's summary is the system prompt, its header, a line per alarm triaged so far,
    the cue; each re-summary extends the last up to its cue."""
    r = _small(seed)
    s = r.state
    grown = 0
    for c, case in enumerate(s.cases):
        joined = [i for i, m in enumerate(r.meta) if m[0] == "triage"
                  and s.alarms[m[2]].case == c]
        for i in case.sent:
            k = sum(1 for j in joined if j < i)
            assert r.meta[i] == ("correlate", c, k, [s.system["correlate"], case.header,
                                                    *case.lines[:k], s.cue["correlate"]])
        for i, j in itertools.pairwise(case.sent):
            a = r.meta[i][3][:-1]
            assert r.meta[j][3][:len(a)] == a and r.meta[j][2] > r.meta[i][2]
            assert common(r.trace[i], r.trace[j]) == shared_tokens(r.meta[i][3],
                                                                   r.meta[j][3]) // BLOCK
            grown += 1
    assert grown >= 20


def test_the_status_page_is_reissued_during_major_incidents():
    """An issue is the system prompt, the guide, each open major incident's timeline as it
    stands, the page as last issued, the cue; while a major incident is open an issue
    follows within STATUS_GAP; care escalations quote the page as last issued, new from it
    on after each issue."""
    checked = 0
    for seed in (1, 2):
        r, first = _small(seed), _first(seed)
        s = r.state
        for k, i in enumerate(s.issues):
            t = r.times[i]
            majors = [x for x in s.incidents if x.major and x.start <= t and not (
                x.closed and x.timeline[-1][0] < t)]
            body = [seg for x in majors for seg in x.at(t)]
            assert r.meta[i][3] == [s.system["status"], s.guide, *body,
                                    *s.status.versions[k][1], s.cue["status"]]
            assert s.status.versions[k + 1][0] == t
        for inc in (x for x in s.incidents if x.major):
            ts = [r.times[i] for i in s.issues
                  if inc.start <= r.times[i] <= inc.timeline[-1][0]]
            assert ts and ts[0] <= inc.start + STATUS_GAP[1]
            assert all(b - a <= STATUS_GAP[1] + 1 for a, b in itertools.pairwise(ts))
        for n, chat in chats_of(r, "care"):
            for i in chat.sent:
                page = r.meta[i][3][1]
                v = next(k for k, (_, p) in enumerate(s.status.versions) if p == [page])
                assert s.status.at(r.times[i]) == [page]
                if v:
                    cut = tokens(r.meta[i][3][:1]) // BLOCK
                    assert all(first[b] > s.issues[v - 1] for b in r.trace[i][cut:])
                    checked += 1
    assert checked >= 50


def test_incidents_bring_engineers_and_a_care_surge():
    """Engineers' chats over an incident send the runbook and the timeline as it stands:
    turns extend the last exactly while it did not grow; a major incident's care surge
    starts within its span."""
    same = grew = surge = 0
    for seed in (1, 2):
        r = _small(seed)
        s = r.state
        for n, chat in chats_of(r, "engineer"):
            if chat.incident is None:
                assert r.meta[chat.sent[0]][3][1:1 + len(chat.fixed)] == s.runbooks[chat.owner]
                continue
            inc = s.incidents[chat.incident]
            for k, i in enumerate(chat.sent):
                lines = inc.at(r.times[i])
                assert r.meta[i][3][:1 + len(chat.fixed) + len(lines)] == [
                    s.chat_system["engineer"], *s.runbooks[inc.runbook], *lines]
            same += extends(r, chat.sent, lambda i, j, x=inc: x.at(r.times[i]) == x.at(
                r.times[j]))
            grew += sum(1 for i, j in itertools.pairwise(chat.sent)
                        if inc.at(r.times[i]) != inc.at(r.times[j]))
        for n, chat in chats_of(r, "care"):
            if chat.owner >= 0:
                inc = s.incidents[chat.owner]
                assert inc.major and inc.start <= r.times[chat.sent[0]] <= inc.end
                surge += 1
    assert same >= 20 and grew >= 5 and surge >= 30


@pytest.mark.parametrize("seed", [1, 2])
def test_changes_are_reviewed_against_the_policy_and_again_after_edits(seed):
    """A review is the system prompt, the policy and the procedure as they stand, the cue; a
    re-review after an edit shares exactly the blocks up to the first changed section; a
    change runs in the window (00:30..05:00) and may replace its site's record."""
    r = _small(seed)
    s, again = r.state, 0
    for n, ch in enumerate(s.changes):
        for k, i in enumerate(ch.reviews):
            t = r.times[i]
            assert r.meta[i] == ("review", n, k, [s.review_system, *s.policy.at(t),
                                                  *ch.mop.at(t), s.review_cue])
            assert t < (ch.window or END)
        for i, j in itertools.pairwise(ch.reviews):
            a, b = r.meta[i][3], r.meta[j][3]
            k = first_change(a, b)
            assert 0 < k < len(a) - 1 and common(r.trace[i], r.trace[j]) == tokens(a[:k]) // BLOCK
            again += 1
        if ch.window is not None:
            assert WINDOW[0] <= ch.window % DAY / HOUR <= WINDOW[1]
    assert again >= 5
    for site in s.sites:
        for t, _ in site.record.versions[1:]:
            assert any(c.window == t and c.site is not None for c in s.changes)


@pytest.mark.parametrize("seed", [1, 2])
def test_each_region_walks_its_sites_nightly(seed):
    """Each night every region's walk starts at 01..03 and sends each site in id order: the
    system prompt, the region's template, the record as it stands, the counters, the cue;
    then the roll-up of its findings in order."""
    r = _small(seed)
    s = r.state
    assert sorted((w.region, w.night) for w in s.walks) == [
        (g, d) for g in range(len(s.regions)) for d in (0, 1)]
    for w in s.walks:
        g, t0 = w.region, r.times[w.sent[0]]
        assert KPI_START[0] <= (t0 - w.night * DAY) / HOUR < KPI_START[1]
        assert w.items == s.regions[g].sites == sorted(w.items)
        head = [s.kpi["system"], s.regions[g].template]
        for i, site in zip(w.sent, w.items):
            segs = r.meta[i][3]
            assert r.meta[i][:3] == ("kpi", g, site) and segs[:2] == head
            assert segs[2] == s.sites[site].record.at(r.times[i])[0]
            assert common(r.trace[i], r.trace[w.sent[0]]) >= tokens(head) // BLOCK
        assert r.meta[w.sent[-1]] == ("rollup", g, w.night, [s.kpi["rollup"], head[1],
                                                             *w.findings, s.kpi["rollup_cue"]])


def test_config_diffs_follow_the_platform_release():
    """A config chat sends the platform's reference as it stands and the diff; its turns
    extend the last unless a release came between; after a release a chat shares with one
    before exactly the sections the release left in front."""
    extended = crossed = 0
    for seed in (1, 2, 3):
        r = _small(seed)
        s = r.state
        firsts = {}
        for n, chat in chats_of(r, "config"):
            ref = s.platforms[chat.owner].ref
            for i in chat.sent:
                t = r.times[i]
                assert r.meta[i][3][1:2 + len(ref.at(t))] == [*ref.at(t), chat.fixed[0]]
            extended += extends(r, chat.sent, lambda i, j, x=ref: x.at(r.times[i]) == x.at(
                r.times[j]))
            firsts.setdefault(chat.owner, []).append(chat.sent[0])
        for t, p in s.releases:
            before = [i for i in firsts.get(p, []) if r.times[i] < t]
            after = [i for i in firsts.get(p, []) if r.times[i] > t]
            if before and after:
                old, new = s.platforms[p].ref.at(r.times[before[-1]]), s.platforms[p].ref.current
                k = first_change(old, new)
                head = [r.meta[after[0]][3][0], *old[:k]]
                assert common(r.trace[before[-1]], r.trace[after[0]]) == tokens(head) // BLOCK
                crossed += 1
    assert extended >= 20 and crossed >= 2


def test_the_shift_handover_is_drafted_then_talked_over():
    """Twice a day a handover is drafted in the quarter hour before 07:00 / 19:00, re-drafted
    with amended notes (the rest shared exactly); the incoming lead's chat starts with the
    last draft and its summary and its turns extend the last exactly."""
    talked = 0
    for seed in (1, 2):
        r = _small(seed)
        s = r.state
        assert len(s.handovers) == 4
        for n, (t, drafts) in enumerate(s.handovers):
            assert (t % DAY) / HOUR in (pytest.approx(6.875, abs=0.13),
                                        pytest.approx(18.875, abs=0.13))
            for i, j in itertools.pairwise(drafts):
                a, b = r.meta[i][3], r.meta[j][3]
                assert a[:-2] == b[:-2] and a[-2] != b[-2]
                assert common(r.trace[i], r.trace[j]) == tokens(a[:-2]) // BLOCK
        for n, chat in chats_of(r, "shift"):
            last = r.meta[s.handovers[chat.owner][1][-1]][3]
            assert r.meta[chat.sent[0]][3][:len(last) + 1] == [*last, chat.fixed[-1]]
            talked += extends(r, chat.sent, lambda i, j: True)
    assert talked >= 5


def test_logs_are_pasted_once():
    """A pasted log is new from the system prompt's end on, and only its own chat's later
    turns send it again, each extending the last exactly."""
    chats = 0
    for seed in (1, 2):
        r, first = _small(seed), _first(seed)
        for n, chat in chats_of(r, "logs"):
            i = chat.sent[0]
            assert _new_from(r, first, i, tokens(r.meta[i][3][:1]))
            extends(r, chat.sent, lambda i, j: True)
            log = chat.fixed[0]
            assert all(r.meta[j][1] == n for j, m in enumerate(r.meta)
                       if m[0] == "logs" and log in m[3])
            chats += 1
    assert chats >= 30


def test_flapping_alarms_repeat_at_one_site():
    """A flapping case re-raises one code at one site 3..40 minutes apart; its triages
    share the head through the site's record while the record stands."""
    flaps = 0
    for seed in (1, 2):
        r = _small(seed)
        s = r.state
        for c, case in enumerate(s.cases):
            if case.kind != "flap":
                continue
            alarms = [a for a in s.alarms if a.case == c]
            assert len({(a.site, a.platform, a.code) for a in alarms}) == 1
            gaps = [b.time - a.time for a, b in itertools.pairwise(alarms)]
            assert all(3 * MINUTE <= g <= 40 * MINUTE for g in gaps)
            flaps += len(gaps) > 0
    assert flaps >= 20
