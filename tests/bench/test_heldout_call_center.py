"""bench/heldout_call_center.py: the held-out shape call_center has the properties its
docstring names (bench.heldout replays it as one of SHAPES). Structure only: no hit rate."""

from __future__ import annotations

import functools
import itertools
from collections import Counter

import pytest

from bench.heldout_bi_parts import local_hour, weekday
from bench.heldout_call_center import KINDS, call_center, generate
from bench.heldout_call_center_parts import DAY, HOUR
from bench.heldout_fewshot import BLOCK
from tests.bench.trace_parts import check_chains, common, registered_small_runs, tokens

ROLE = {"voice": "voice", "assist": "assist"}


@functools.cache
def _quarter(seed):
    """The quarter-scale trace of ``seed`` (3 clients, 2250 requests), generated once."""
    return generate(seed, 0.25)


@pytest.fixture(scope="module")
def run():
    return _quarter(1)  # every kind, an auto-QA client and a campaign


def _head(r, i):
    """The segments request ``i`` of a live call must start with: system prompt, persona and
    SOP as of then, the outage banner if one was on, then the caller's CRM record."""
    kind, ci, k, _ = r.meta[i]
    c, t, call = r.clients[ci], r.times[i], r.calls[k]
    q = c.queues[call.queue]
    banner = [o[2] for o in q.outages if o[0] <= t and (o[1] is None or t < o[1])]
    return [r.system[kind], *c.persona.at(t), *q.sop.at(t), *banner]


def test_registered_deterministic_and_seeded():
    runs = registered_small_runs("call_center", call_center, generate)
    assert all({m[0] for m in small.meta} >= {"route", "voice", "wrapup"} for small in runs)
    assert all(small.times == sorted(small.times) for small in runs)


@pytest.mark.parametrize("seed", [1, 2])
def test_request_and_block_counts(seed):
    """A quarter-scale trace (3 clients): 2250 requests, 0.5M..1.1M blocks, nearly all of them
    sent before (the voice agent re-sends the whole call every turn), over days."""
    r = _quarter(seed)
    blocks = sum(map(len, r.trace))
    distinct = len({b for q in r.trace for b in q})
    assert len(r.trace) == 2250 and len(r.clients) == 3
    assert 500_000 <= blocks <= 1_100_000
    assert 0.03 < distinct / blocks < 0.09
    assert r.times[-1] > 2 * DAY
    assert {m[0] for m in r.meta} == set(KINDS)


def test_prefix_chains_are_well_formed(run):
    """A block id always follows the same parent, and each request is the full blocks of its
    segments: two requests share exactly the blocks of the segments they start with."""
    check_chains(run, 7)


def test_live_prompts_have_their_head(run):
    """Voice and assist requests start with their application's system prompt, the client's
    persona and the queue's SOP as of then, then a version of the caller's record; two
    applications share
    no block, and requests of one queue share the whole head."""
    first: dict[tuple, int] = {}
    for i, (kind, ci, k, segs) in enumerate(run.meta):
        if kind in ROLE:
            head = _head(run, i)
            call = run.calls[k]
            assert segs[:len(head)] == head
            assert segs[len(head)] in run.clients[ci].callers[call.caller].records
            j = first.setdefault((kind, ci, call.queue, tuple(head)), i)
            assert common(run.trace[i], run.trace[j]) >= tokens(head) // BLOCK
    voice = next(i for i, m in enumerate(run.meta) if m[0] == "voice")
    assist = next(i for i, m in enumerate(run.meta) if m[0] == "assist")
    assert common(run.trace[voice], run.trace[assist]) == 0
    assert len(first) >= 6


def test_partial_transcripts_then_the_final(run):
    """Within a voice turn, a speculative request holds the words committed so far and an
    unstable tail that the next request drops; the next request re-sends the rest whole."""
    partials = grown = 0
    for call in run.calls:
        sent = [i for i in call.sent if run.meta[i][0] in ("voice", "outbound")]
        for i, j in itertools.pairwise(sent):
            a, b = run.meta[i][3], run.meta[j][3]
            if _same_head(run, i, j) and b[:len(a)] == a:
                grown += 1
            elif _same_head(run, i, j):
                assert b[:len(a) - 1] == a[:-1] and a[-1] not in b
                assert common(run.trace[i], run.trace[j]) >= tokens(a[:-1]) // BLOCK
                partials += 1
    assert partials > 150 and grown > 300


def _same_head(r, i, j):
    """Whether no edit or outage changed the prompt's head between requests i and j."""
    if r.meta[i][0] not in ROLE:
        return r.meta[i][3][:2] == r.meta[j][3][:2]
    return _head(r, i) == _head(r, j)


def test_a_human_takes_over_with_the_transcript(run):
    """A transferred call goes from voice requests to assist requests that carry the voice
    part of the transcript (behind another head, so no block is shared)."""
    seen = 0
    for k, call in enumerate(run.calls):
        kinds = [run.meta[i][0] for i in call.sent]
        if not call.transferred or "assist" not in kinds:
            continue
        last_voice = max(i for i in call.sent if run.meta[i][0] == "voice")
        first_assist = min(i for i in call.sent if run.meta[i][0] == "assist")
        assert last_voice < first_assist
        spoken = [s for s in run.meta[last_voice][3] if s in call.transcript]
        assert set(spoken) <= set(run.meta[first_assist][3])
        assert common(run.trace[last_voice], run.trace[first_assist]) == 0
        seen += 1
    assert seen >= 3


def test_sop_edits_make_later_sections_new(run):
    """After an SOP edit, the queue's prompts share the sections before the first changed
    one with earlier prompts; the blocks from there on were never requested before."""
    checked = 0
    for ci, c in enumerate(run.clients):
        for qi, q in enumerate(c.queues):
            for (_, old), (t, new) in itertools.pairwise(q.sop.versions):
                d = next((n for n, (x, y) in enumerate(zip(old, new)) if x != y),
                         min(len(old), len(new)))
                before = [i for i, m in enumerate(run.meta) if m[0] == "voice" and m[1] == ci
                          and run.calls[m[2]].queue == qi and run.times[i] < t]
                after = [i for i, m in enumerate(run.meta) if m[0] == "voice" and m[1] == ci
                         and run.calls[m[2]].queue == qi and run.times[i] >= t]
                if not before or not after or _head(run, after[0])[-len(new):] != new:
                    continue
                i, j, head = before[-1], after[0], _head(run, after[0])
                cut = tokens(head[:len(head) - len(new) + d]) // BLOCK
                assert common(run.trace[i], run.trace[j]) <= cut
                earlier = {b for r in run.trace[:j] for b in r}
                assert not earlier & set(run.trace[j][cut:tokens(head) // BLOCK])
                checked += 1
    assert checked >= 2


def test_outage_banner_and_wave():
    """During an outage the support queue's prompts carry the banner after the SOP and the
    client gets more calls an hour; after it, the queue's prompts share the old head again
    (unless an edit came in between)."""
    back = 0
    for r in (_quarter(5), _quarter(6)):  # an outage each, 38..41 h and 48..52 h in
        (ci, c), = [(ci, c) for ci, c in enumerate(r.clients) if c.queues[0].outages]
        start, end, banner = c.queues[0].outages[0]
        q0 = [i for i, m in enumerate(r.meta) if m[0] in ROLE and m[1] == ci
              and r.calls[m[2]].queue == 0]
        during = [i for i in q0 if start <= r.times[i] < end]
        assert during and all(banner in r.meta[i][3] for i in during)
        assert not any(banner in r.meta[i][3] for i in q0 if not start <= r.times[i] < end)
        before = [i for i in q0 if r.times[i] < start][-1]
        after = [i for i in q0 if r.times[i] >= end and r.meta[i][0] == r.meta[before][0]][0]
        if _head(r, before) == _head(r, after):
            assert common(r.trace[before], r.trace[after]) >= tokens(_head(r, after)) // BLOCK
            back += 1
        calls = [k.start for k in r.calls if k.client == ci and k.mode != "outbound"]
        rate = sum(start <= t < end for t in calls) / (end - start)
        day = sum(start - DAY <= t < end - DAY for t in calls) / (end - start)
        assert rate > 2 * day
    assert back >= 1


def test_qa_walks_the_days_calls_behind_the_rubric(run):
    """A QA job scores calls in the order they ended, three criteria back to back that share all but the
    criterion; an auto-QA client's job scores every call finished since the last run."""
    auto = 0
    for job in run.qa_jobs:
        c = run.clients[job.client]
        ends = [run.calls[k].end for k in job.calls]
        assert ends == sorted(ends)
        assert [run.meta[i][2] for i in job.sent] == [k for k in job.calls for _ in range(3)
                                                      ][:len(job.sent)]
        for i, j in zip(job.sent[::3], job.sent[1::3]):
            a, call = run.meta[i][3], run.calls[run.meta[i][2]]
            assert a[0] == run.system["qa"] and a[-1] == c.criteria[0]
            assert a[-1 - len(call.transcript):-1] == call.transcript
            assert common(run.trace[i], run.trace[j]) >= tokens(a[:-1]) // BLOCK
            assert run.times[i] > call.end
            assert 2 <= local_hour(run.times[job.sent[0]], c.tz) < 3
        if c.auto_qa:
            t = run.times[job.sent[0]]
            ended = [k for k, call in enumerate(run.calls) if call.client == job.client and
                     call.mode != "outbound" and call.sent and
                     t - DAY < (run.times[call.sent[-1]]) < t - HOUR]
            assert set(ended) <= set(job.calls)
            auto += 1
    assert auto >= 2 and len(run.qa_jobs) >= 4


def test_callbacks_come_back_with_the_callers_record(run):
    """A callback is the same caller on the same queue minutes to days after an unresolved
    call, and its prompts carry the caller's record and a note of an earlier call."""
    gaps = []
    for call in run.calls:
        if call.callback_of is None:
            continue
        first = run.calls[call.callback_of]
        assert (call.client, call.queue, call.caller) == (first.client, first.queue,
                                                          first.caller)
        assert not first.resolved and call.start > first.end
        gaps.append(call.start - first.end)
        notes = set(run.clients[call.client].callers[call.caller].notes)
        live = [i for i in call.sent if run.meta[i][0] in ROLE]
        assert not live or notes & set(run.meta[live[0]][3])
    assert len(gaps) >= 5 and min(gaps) < 2 * HOUR and max(gaps) > 12 * HOUR


def test_campaigns_walk_leads_in_order_and_redial(run):
    """Outbound: a campaign's first dials walk its new leads in list order from 10:00 local on
    a weekday; a lead not reached is dialled again hours later with the same record."""
    (ci, c), = [(ci, c) for ci, c in enumerate(run.clients) if c.script is not None]
    dials = [k for k, call in enumerate(run.calls) if call.mode == "outbound"]
    firsts: dict[int, int] = {}
    for k in dials:
        firsts.setdefault(run.calls[k].caller, k)
    assert list(firsts) == sorted(firsts)
    t = run.calls[dials[0]].start
    assert 10 <= local_hour(t, c.tz) < 11 and weekday(t, c.tz) < 5
    redials = Counter(run.calls[k].caller for k in dials)
    again = [lead for lead, n in redials.items() if n > 1]
    assert len(again) > 10
    for lead in again:
        a, b = [k for k in dials if run.calls[k].caller == lead][:2]
        assert run.calls[b].start - run.calls[a].start > 3 * HOUR
        assert c.leads[lead] in run.meta[run.calls[b].sent[0]][3]


def test_calls_in_office_hours_and_client_sizes():
    """Inbound calls of clients not open 24/7 come mostly 08..20 local; Zipf-sized clients
    (sizes 1, 2^-1.1, 3^-1.1 at quarter scale), the largest with the most calls."""
    for seed in (1, 2):
        r = _quarter(seed)
        local = [local_hour(k.start, r.clients[k.client].tz) for k in r.calls
                 if k.mode != "outbound" and not r.clients[k.client].always]
        assert sum(8 <= h < 20 for h in local) > 0.8 * len(local)
        sizes = sorted(c.weight for c in r.clients)
        assert sizes[-1] == pytest.approx(3 ** 1.1 * sizes[0])
        per = Counter(k.client for k in r.calls if k.mode != "outbound")
        big = max(range(3), key=lambda ci: r.clients[ci].weight)
        assert per[big] == max(per.values())
