"""bench/heldout_soc_copilot.py: the held-out shape soc_copilot has the properties its
docstring names (bench.heldout replays it as one of SHAPES). Structure only: no hit rate."""

from __future__ import annotations

import functools
import itertools
from collections import Counter

import pytest

from bench.heldout_bi_parts import local_hour, weekday
from bench.heldout_fewshot import BLOCK
from bench.heldout_soc_alerts import ATTACKS, CAMPAIGN_MINUTES, STORM_MINUTES
from bench.heldout_soc_copilot import KINDS, generate, soc_copilot
from bench.heldout_soc_parts import CATEGORIES, DAY, HOUR, MINUTE, SOC_TZ, office
from tests.bench.trace_parts import check_chains, common, first_seen, registered_small_runs, tokens

CASE_KINDS = ("investigate", "note", "handoff", "close")


@functools.cache
def _quarter(seed):
    """The quarter-scale trace of ``seed`` (3 clients, 2250 requests), generated once."""
    return generate(seed, 0.25)


@pytest.fixture(scope="module")
def run():
    return _quarter(1)  # storms, a campaign, rule reviews, rule rewrites, hand-offs


@functools.cache
def _first_seen(seed):
    """Block id -> the index of the first request of ``_quarter(seed)`` that holds it."""
    return first_seen(_quarter(seed).trace)


def _triage_head(r, k):
    """What alert ``k``'s triage prompt starts with, as of when it was raised: the triage
    system prompt, the digest of the hour, the client's profile, the runbook of the rule's
    category, the rule."""
    a = r.alerts[k]
    c, t = r.clients[a.client], a.time
    rule = c.rules[a.rule]
    return [r.system["triage"], *r.digest.at(t), *c.profile.at(t),
            *c.runbooks[rule.category].at(t), *rule.text.at(t)]


def _case_head(r, i):
    """What case request ``i`` starts with: system prompt, profile, runbook and rule as of
    then, the case file."""
    _, ci, k, _ = r.meta[i]
    case, c, t = r.cases[k], r.clients[ci], r.times[i]
    rule = c.rules[case.rule]
    return [r.system["investigate"], *c.profile.at(t), *c.runbooks[rule.category].at(t),
            *rule.text.at(t), *case.file]


def test_registered_deterministic_and_seeded():
    runs = registered_small_runs("soc_copilot", soc_copilot, generate)
    assert all({m[0] for m in small.meta} >= {"triage", "enrich", "investigate"}
               for small in runs)
    assert all(small.times == sorted(small.times) for small in runs)


@pytest.mark.parametrize("seed", [1, 2])
def test_request_and_block_counts(seed):
    """A quarter-scale trace (3 clients): 2250 requests, 0.8M..1.4M blocks, 8..16 % of them
    distinct, over more than two days, every kind of request."""
    r = _quarter(seed)
    blocks = sum(map(len, r.trace))
    distinct = len({b for q in r.trace for b in q})
    assert len(r.trace) == 2250 and len(r.clients) == 3
    assert 800_000 <= blocks <= 1_400_000
    assert 0.08 < distinct / blocks < 0.16
    assert r.times[-1] > 2 * DAY
    assert {m[0] for m in r.meta} == set(KINDS)


def test_prefix_chains_are_well_formed(run):
    """A block id always follows the same parent, and each request is the full blocks of its
    segments: two requests share exactly the blocks of the segments they start with."""
    check_chains(run, 7)


def test_triage_prompts_have_their_head(run):
    """Triage requests start with the triage head as of the alert (system prompt, digest,
    profile, runbook, rule), then the incident context if any and the alert's events; two
    alerts of one rule in the same digest hour share the whole head."""
    first: dict[tuple, int] = {}
    for k, a in enumerate(run.alerts):
        if not a.sent:
            continue
        i, head = a.sent[0], _triage_head(run, k)
        kind, ci, owner, segs = run.meta[i]
        assert (kind, ci, owner, run.times[i]) == ("triage", a.client, k, a.time)
        assert segs[:a.head] == head and len(head) == a.head and segs[-1] == a.events
        j = first.setdefault((a.client, tuple(head)), i)
        assert common(run.trace[i], run.trace[j]) >= tokens(head) // BLOCK
    assert len(first) < 0.8 * sum(bool(a.sent) for a in run.alerts)


def test_a_new_digest_makes_every_later_block_new(run):
    """The digest changes on the hour (not every hour: quiet hours keep it); the first triage
    prompt after a change holds nothing after the system prompt that was requested before."""
    first = _first_seen(1)
    sys_blocks = tokens([run.system["triage"]]) // BLOCK
    changes = [t for t, _ in run.digest.versions[1:]]
    assert all(t % HOUR == 0 for t in changes)
    assert len(changes) < run.times[-1] // HOUR
    checked = 0
    for t, nxt in itertools.pairwise([*changes, float("inf")]):
        j = next((i for i, m in enumerate(run.meta) if m[0] == "triage" and run.times[i] >= t),
                 None)
        if j is None or run.times[j] >= nxt:
            continue
        assert all(first[b] == j for b in run.trace[j][sys_blocks:])
        checked += 1
    assert checked >= 20


def test_lookups_append_their_results_and_resend(run):
    """Each threat-intel lookup appends its call and result and re-sends the whole prompt a
    few seconds later; normal alerts make 0..4 lookups, storm alerts at most one, and a
    campaign's alerts look up its shared IOCs."""
    lookups = Counter()
    for a in run.alerts:
        for i, j in itertools.pairwise(a.sent):
            x, y = run.meta[i][3], run.meta[j][3]
            assert run.meta[j][0] == "enrich" and y[:len(x)] == x and len(y) == len(x) + 2
            assert run.trace[j][:len(run.trace[i])] == run.trace[i]
            assert 1 <= run.times[j] - run.times[i] <= 6
            if a.origin == "campaign":
                assert tuple(y[-2:]) in run.bursts[a.burst].iocs
        lookups[a.origin, len(a.sent) - 1] += 1
    assert {n for (o, n) in lookups if o == "normal"} == {0, 1, 2, 3, 4}
    assert {n for (o, n) in lookups if o == "storm"} == {0, 1}


def test_campaigns_fire_related_alerts_within_minutes_then_a_case():
    """A campaign: tens to hundreds of alerts within minutes from rules of one attack's
    categories; after the SOAR correlates a few, each carries the incident context after the
    rule, and alerts of one rule and context share that whole prefix; an incident case is
    opened when it has passed and picked up within minutes."""
    seen = 0
    for r in (_quarter(1), _quarter(2)):
        for b, burst in enumerate(r.bursts):
            if burst.kind != "campaign" or not r.alerts[burst.alerts[-1]].sent:
                continue
            alerts = [r.alerts[k] for k in burst.alerts]
            assert len(alerts) >= 40 and burst.end - burst.start <= CAMPAIGN_MINUTES[1] * MINUTE
            assert all(burst.start <= a.time <= burst.end for a in alerts)
            cats = {CATEGORIES[r.clients[burst.client].rules[x].category] for x in burst.rules}
            assert any(cats <= set(attack) for attack in ATTACKS)
            _check_contexts(r, burst, alerts)
            case = next(c for c in r.cases if (c.origin, c.source) == ("campaign", b))
            assert case.opened > burst.end and case.file[0] == burst.context[-1][1]
            assert r.times[case.sent[0]] - case.opened < 8 * MINUTE
            seen += 1
    assert seen >= 2


def _check_contexts(r, burst, alerts):
    """No context before the SOAR has correlated its first alerts, then the one in effect;
    alerts with one head and context share all of it."""
    versions = [n for n, _ in burst.context]
    assert versions[0] >= 5 and all(b - a >= 40 for a, b in itertools.pairwise(versions))
    by_prefix: dict[tuple, int] = {}
    for n, a in enumerate(alerts):
        ctx = [s for m, s in burst.context if m <= n][-1:]
        assert a.segs[a.head:a.head + len(ctx)] == ctx
        prefix = tuple(a.segs[:a.head + len(ctx)])
        j = by_prefix.setdefault(prefix, a.sent[0])
        assert common(r.trace[a.sent[0]], r.trace[j]) >= tokens(prefix) // BLOCK
    assert len(by_prefix) < len(alerts) / 3


def test_storms_fire_a_noisy_rule_and_bring_a_rule_rewrite(run):
    """A storm: one of the client's five noisiest rules fires for 20..120 minutes; a
    detection engineer opens that rule in the SOC's office hours after it, with the events of
    its recent alerts, and rewrites it (new versions of the rule)."""
    storms = [b for b in run.bursts if b.kind == "storm"]
    assert len(storms) >= 3
    for b in storms:
        c = run.clients[b.client]
        assert b.rules[0] in c.noisy(5)
        assert STORM_MINUTES[0] * MINUTE <= b.end - b.start <= STORM_MINUTES[1] * MINUTE
        assert {run.alerts[k].rule for k in b.alerts} == set(b.rules)
    engineered = 0
    for s in run.sessions:
        if s.origin != "storm" or not s.sent:
            continue
        t = run.times[s.sent[0]]
        assert office(t, SOC_TZ)
        assert any(b.rules[0] == s.rule and b.client == s.client and b.end < t for b in storms)
        events = {a.events for a in run.alerts if (a.client, a.rule) == (s.client, s.rule)}
        assert 3 <= sum(x in events for x in s.head) <= 8
        engineered += s.edited is not None
    assert engineered >= 1


def test_a_rule_rewrite_makes_its_later_blocks_new(run):
    """After a rule is rewritten, the first triage prompt on it holds no block from the
    first changed section on that was requested before."""
    first, checked = _first_seen(1), 0
    for ci, c in enumerate(run.clients):
        for x, rule in enumerate(c.rules):
            for (_, old), (t, new) in itertools.pairwise(rule.text.versions):
                d = next(n for n, (p, q) in enumerate(zip(old, new)) if p != q)
                k = next((k for k, a in enumerate(run.alerts) if (a.client, a.rule) == (ci, x)
                          and a.time >= t and a.sent), None)
                if k is None:
                    continue
                head, j = _triage_head(run, k), run.alerts[k].sent[0]
                assert head[-3:] == new
                cut = tokens(head[:len(head) - 3 + d]) // BLOCK
                assert all(first[b] == j for b in run.trace[j][cut:])
                checked += 1
    assert checked >= 2


def test_investigations_resend_the_case_file_and_notes(run):
    """Case requests start with the investigation head as of then and the case file (an
    escalated alert's context, events and lookups), then the case notes so far; a turn
    re-sends the previous one of its session whole."""
    grown = 0
    for k, case in enumerate(run.cases):
        if case.origin == "alert":
            a = run.alerts[case.source]
            assert case.file == a.segs[a.head:]
        for i in case.sent:
            head, segs = _case_head(run, i), run.meta[i][3]
            assert run.meta[i][0] in CASE_KINDS and segs[:len(head)] == head
            n = sum(1 for s in segs[len(head):] if s in case.notes)
            assert segs[len(head):len(head) + n] == case.notes[:n]
        asks = [i for i in case.sent if run.meta[i][0] == "investigate"]
        for i, j in itertools.pairwise(asks):
            x, y = run.meta[i][3], run.meta[j][3]
            if y[:len(x)] == x:
                assert common(run.trace[i], run.trace[j]) == len(run.trace[i])
                grown += 1
    assert grown > 100


def test_shift_changes_hand_off_open_cases_with_their_notes():
    """At 07:00, 15:00 and 23:00 SOC time every open case gets a hand-off note; the next
    shift resumes the case behind the same head and notes plus that note."""
    resumed, long_cases = 0, 0
    for r in (_quarter(1), _quarter(2)):
        for case in r.cases:
            for i in case.handoffs:
                h = local_hour(r.times[i], SOC_TZ)
                assert min(abs(h - s) for s in (7, 15, 23)) < 1e-6
                a = r.meta[i][3]
                assert a[-1] == r.instructions["handoff"]
                later = [j for j in case.sent if j > i]
                if later and r.meta[later[0]][3][:len(a) - 1] == a[:-1]:
                    assert r.meta[later[0]][3][len(a) - 1] in case.notes
                    assert common(r.trace[i], r.trace[later[0]]) >= tokens(a[:-1]) // BLOCK
                    resumed += 1
            asks = [r.times[i] for i in case.sent if r.meta[i][0] == "investigate"]
            long_cases += bool(asks) and asks[-1] - asks[0] > 8 * HOUR
    assert resumed >= 5 and long_cases >= 3


@pytest.mark.parametrize("seed", [1, 2])
def test_nightly_hunts_walk_the_inventory_and_catalog_in_order(seed):
    """A hunt client's night: at 01:00..02:00 local the asset sweep walks every inventory
    chunk in order (head, chunk, the night's IOC excerpt), a few seconds apart; some nights a
    rule review follows, walking the catalog in order; the next night's sweep repeats most
    chunks, behind the same head unless the profile or checklist was edited."""
    run, sweeps = _quarter(seed), {}
    for h in run.hunts:
        c = run.clients[h.client]
        assert [run.meta[i][3] for i in h.sent] == [h.head + x + h.tail
                                                    for x in h.items][:len(h.sent)]
        steps = [run.times[j] - run.times[i] for i, j in itertools.pairwise(h.sent)]
        assert all(2 <= s <= 8 for s in steps)
        if h.kind == "asset":
            assert 1 <= local_hour(run.times[h.sent[0]], c.tz) < 2
            assert len(h.items) == len(c.assets)
            sweeps.setdefault(h.client, []).append(h)
        elif len(h.sent) == len(h.items):
            assert h.items == [x.text.at(run.times[h.sent[0]]) for x in c.rules]
    kinds = Counter(h.kind for h in run.hunts)
    assert kinds["asset"] >= 3 and kinds["rule"] >= 1
    again = 0
    for a, b in (p for walks in sweeps.values() for p in itertools.pairwise(walks)):
        assert 0.85 * len(a.items) <= sum(x == y for x, y in zip(a.items, b.items))
        for n, (x, y) in enumerate(zip(a.items, b.items)):
            if x == y and a.head == b.head and n < len(b.sent):
                assert common(run.trace[a.sent[n]], run.trace[b.sent[n]]) >= tokens(
                    a.head + x) // BLOCK
                again += 1
    assert again > 20


def test_weekly_reports_go_over_the_weeks_closed_cases(run):
    """Monday 07:00 local: five sections back to back, sharing everything but the section's
    instruction, over the summaries of the cases closed in the last seven days in order."""
    assert len(run.reports) >= 2
    for rep in run.reports:
        c = run.clients[rep.client]
        t = run.times[rep.sent[0]]
        assert abs(local_hour(t, c.tz) - 7) < 1e-6 and weekday(t, c.tz) == 0
        assert rep.summaries == [s for u, s in c.closed if t - 7 * DAY <= u <= t]
        segs = [run.meta[i][3] for i in rep.sent]
        assert [s[-1] for s in segs] == run.sections[:len(segs)]
        for i, j in itertools.pairwise(rep.sent):
            assert common(run.trace[i], run.trace[j]) >= tokens(segs[0][:-1]) // BLOCK


def test_alerts_follow_local_hours_and_client_sizes():
    """Normal alerts come more by day than by night in the client's time zone; Zipf client
    sizes (1, 1/2, 1/3 at quarter scale), the largest with the most alerts."""
    for seed in (1, 2):
        r = _quarter(seed)
        hours = Counter(int(local_hour(a.time, r.clients[a.client].tz)) for a in r.alerts
                        if a.origin == "normal")
        assert sum(hours[h] for h in range(9, 17)) > 2 * sum(hours[h] for h in range(0, 6))
        sizes = sorted(c.weight for c in r.clients)
        assert sizes[-1] == pytest.approx(3 * sizes[0])
        per = Counter(a.client for a in r.alerts if a.origin == "normal")
        big = max(range(3), key=lambda ci: r.clients[ci].weight)
        assert per[big] == max(per.values())
