"""bench/heldout_ediscovery_review.py: the held-out shape ediscovery_review has the properties
its docstring names (bench.heldout replays it as one of SHAPES). Structure only: no hit rate."""

from __future__ import annotations

import itertools

import pytest

from bench.heldout import SHAPES
from bench.heldout_ediscovery_parts import DAY, HOUR
from bench.heldout_ediscovery_review import KINDS, ediscovery_review, generate
from bench.heldout_fewshot import BLOCK
from tests.bench.trace_parts import (SmallRuns, blocks_by_kind, check_chains, check_ordered,
                                     common, shared_tokens, tokens)

SCALE = 0.2


SMALL = SmallRuns(generate, SCALE)  # each seed's run and first_seen, made once
_small, _first_seen = SMALL.run, SMALL.first


@pytest.fixture(scope="module")
def run():
    return _small(1)


def _segs(r, i):
    return r.meta[i][3]


def test_registered_deterministic_and_seeded():
    assert SHAPES["ediscovery_review"] is ediscovery_review
    assert ediscovery_review(1, 0.05) == ediscovery_review(1, 0.05) != ediscovery_review(2, 0.05)
    assert generate(3, 0.05).trace == ediscovery_review(3, 0.05)
    for seed in (1, 2):
        check_ordered(_small(seed), KINDS)
    a, b = _small(1), _small(2)
    assert a.trace[:50] != b.trace[:50] and len(a.trace) != len(b.trace)


@pytest.mark.parametrize("seed", [1, 2])
def test_sizes_and_span(seed):
    """At scale 0.2: 200K..400K blocks from Monday morning to Friday; processing is 15..35 %
    of the blocks."""
    r = _small(seed)
    blocks = blocks_by_kind(r)
    total = sum(blocks.values())
    assert 200_000 <= total <= 400_000
    assert 0.15 < (blocks["ingest"] + blocks["exception"]) / total < 0.35
    assert 7.5 * HOUR <= r.times[0] < 8.5 * HOUR and 4 * DAY < r.times[-1] < 4 * DAY + 19 * HOUR


def test_prefix_chains_are_well_formed(run):
    """A block id always follows the same parent, and each request is the full blocks of its
    segments: two requests share exactly the blocks of the segments they start with."""
    check_chains(run, 5)


@pytest.mark.parametrize("seed", [1, 2])
def test_the_trace_opens_with_bare_documents_sharing_nothing(seed):
    """The first collection is processed first, alone: every document once in processing
    order, its text then the cue; no two share a first block, and no block repeats in it
    (well over 25000 x scale blocks) nor before the walk's end."""
    r, first = _small(seed), _first_seen(seed)
    w, c = r.world.ingests[0], r.world.corpus
    idx = [i for _, i in w.sent]
    assert idx == list(range(len(idx))) and [d for d, _ in w.sent] == c.order[0]
    assert sorted(c.order[0]) == [d for d, doc in enumerate(c.docs) if doc.batch == 0]
    for d, i in w.sent:
        assert r.meta[i][:3] == ("ingest", 0, d)
        assert _segs(r, i) == [*c.docs[d].text, r.world.cue["ingest"]]
        assert all(first[b] == i for b in r.trace[i])
    assert len({r.trace[i][0] for i in idx}) == len(idx)
    opening = sum(len(r.trace[i]) for i in idx)
    assert opening > 25000 * SCALE * 4
    assert len({b for i in idx for b in r.trace[i]}) == opening
    assert r.meta[len(idx)][0] == "exception"


@pytest.mark.parametrize("seed", [1, 2])
def test_exceptions_are_sent_again_exactly(seed):
    """Each collection's failed documents come back after its walk, in order, exactly."""
    r = _small(seed)
    for ingest, exc in zip(r.world.ingests, r.world.exceptions):
        end = ingest.sent[-1][1]
        orig = [x[1] for x, _ in exc.sent]
        assert orig and orig == sorted(orig)
        for (d, orig), i in exc.sent:
            assert (d, orig) in ingest.sent and i > end
            assert r.trace[i] == r.trace[orig] and r.meta[i][:3] == ("exception", ingest.owner, d)


@pytest.mark.parametrize("seed", [1, 2])
def test_threading_sends_touched_threads_and_extends_them_later(seed):
    """A thread request is the system prompt, its collected messages' own text in date order,
    the cue; the second collection re-sends the threads it continued, sharing the first
    request's blocks through the older messages."""
    r = _small(seed)
    c, w = r.world.corpus, r.world
    before: dict[int, int] = {}
    extended = 0
    for job in w.thread_jobs:
        for t, i in job.sent:
            msgs = [m for m in c.threads[t] if c.docs[m].batch <= job.owner]
            own = [s for m in msgs for s in c.docs[m].own]
            assert len(msgs) > 1 and _segs(r, i) == [w.system["thread"], *own, w.cue["thread"]]
            if t in before:
                old = _segs(r, before[t])
                assert common(r.trace[i], r.trace[before[t]]) == tokens(old[:-1]) // BLOCK
                extended += 1
            before[t] = i
    assert extended >= 5


@pytest.mark.parametrize("seed", [1, 2])
def test_the_first_pass_is_the_deduplicated_term_population(seed):
    """Each collection's first pass: the documents that hit a live term and that no later
    collected message of their thread quotes, in processing order, behind the system prompt
    and the protocol as it stands."""
    r = _small(seed)
    w, c = r.world, r.world.corpus
    for job in w.first_passes:
        t = r.times[job.sent[0][1]]
        batch = job.owner
        want = []
        for d in c.order[batch]:
            doc = c.docs[d]
            quoted = doc.kind == "email" and any(
                c.docs[m].batch <= batch and c.docs[m].date > doc.date
                for m in c.threads[doc.thread])
            if not quoted and any(term.hit(d, t) for term in w.terms):
                want.append(d)
        assert [d for d, _ in job.sent] == want and len(want) > 50
        for d, i in job.sent:
            segs = [w.system["review"], *w.protocol.at(r.times[i]), *c.docs[d].text,
                    w.cue["review"]]
            assert _segs(r, i) == segs and r.meta[i][:3] == ("first_pass", batch, d)


def _calls(r, d, i):
    """The coding of ``d`` in force when request ``i`` was sent."""
    return [k for k in r.world.coding[d] if k.request < i][-1]


def test_qc_resends_the_first_level_prompt_with_its_coding(run):
    """A QC request is the document's review prompt as it stands, the call in force, the QC
    question; while the protocol is unchanged it extends the call's request exactly;
    follow-ups extend the turn before."""
    w, exact = run.world, 0
    for s in w.qc:
        i = s.sent[0]
        call = _calls(run, s.doc, i)
        segs = _segs(run, i)
        assert segs[:-1] == [*w.review_at(s.doc, run.times[i]), call.reply]
        origin = _segs(run, call.request)
        if run.meta[call.request][0] != "qc" and segs[:len(origin)] == origin:
            assert run.trace[i][:len(run.trace[call.request])] == run.trace[call.request]
            exact += 1
        for a, b in itertools.pairwise(s.sent):
            assert run.trace[b][:len(run.trace[a])] == run.trace[a]
            assert _segs(run, b)[:len(_segs(run, a))] == _segs(run, a)
    assert exact >= 20 and any(len(s.sent) > 1 for s in w.qc)
    sampled = {d for d, _ in itertools.chain(*(j.sent for j in w.first_passes))}
    assert {s.doc for s in w.qc} <= sampled


@pytest.mark.parametrize("seed", [1, 2])
def test_a_protocol_change_reruns_coded_documents_from_the_change_on(seed):
    """A re-review request is the review prompt behind the revised protocol: it shares the
    document's previous review request's blocks up to the first changed section only."""
    r, first = _small(seed), _first_seen(seed)
    w = r.world
    assert len(w.protocol.versions) == len(w.rereviews) + 1
    for job in w.rereviews:
        for d, i in job.sent:
            prev = [k.request for k in w.coding[d] if k.request < i
                    and r.meta[k.request][0] != "qc"][-1]
            old, new = _segs(r, prev), _segs(r, i)
            assert new == w.review_at(d, r.times[i]) and old != new
            shared = shared_tokens(old, new)
            assert shared < tokens([w.system["review"], *w.protocol.at(r.times[i])])
            assert common(r.trace[i], r.trace[prev]) == shared // BLOCK
            changed = w.protocol.versions[-1 if job.owner else 1][0]
            assert all(r.times[first[b]] >= changed for b in r.trace[i][shared // BLOCK:])


@pytest.mark.parametrize("seed", [1, 2])
def test_hit_reports_resend_their_stored_samples(seed):
    """A term unchanged since the last report re-sends its sample exactly (plus new hits);
    a narrowed or added term gets a new sample; a report request is the system prompt, the
    term, the document, the cue."""
    r = _small(seed)
    w = r.world
    runs = w.hit_runs
    assert len(runs) == 3
    kept = narrowed = 0
    for prev, cur in itertools.pairwise(runs):
        was, now = dict(prev.walk.sent), dict(cur.walk.sent)
        for k, (v, docs) in cur.samples.items():
            if k in prev.samples and prev.samples[k][0] == v:
                old = prev.samples[k][1]
                assert docs[:len(old)] == old
                for d in old:
                    assert r.trace[now[(k, d)]] == r.trace[was[(k, d)]]
                kept += 1
            elif k in prev.samples:
                narrowed += 1
    assert kept > 10 and narrowed >= 1
    assert len(runs[1].samples) > len(runs[0].samples)
    for run_ in runs:
        for (k, d), i in run_.walk.sent:
            t = r.times[i]
            assert w.terms[k].hit(d, t)
            assert _segs(r, i) == [w.system["hits"], w.terms[k].text(t), *w.corpus.docs[d].text,
                                   w.cue["hits"]]


def test_chats_resend_their_history(run):
    """A chat turn is the system prompt, the protocol and the memo as they stand, the history
    and the message (a pasted document's text after it); while the head stays the same, a
    turn's chain extends the one before."""
    w, extended, pasted = run.world, 0, 0
    for s in (s for s in w.sessions if s.kind == "chat"):
        for n, i in enumerate(s.sent):
            t = run.times[i]
            head = [w.system["chat"], *w.protocol.at(t), *w.memo.at(t)]
            assert _segs(run, i)[:len(head)] == head and run.meta[i][:3] == ("chat", s.owner, n)
            if s.pasted[n] >= 0:
                text = w.corpus.docs[s.pasted[n]].text
                assert _segs(run, i)[-len(text):] == text
                pasted += 1
        for a, b in itertools.pairwise(s.sent):
            x, y = _segs(run, a), _segs(run, b)
            if shared_tokens(x, y) >= tokens(x):
                assert run.trace[b][:len(run.trace[a])] == run.trace[a]
                extended += 1
    assert extended >= 20 and pasted >= 3
    assert len(w.memo.versions) >= 2


def test_depo_sessions_send_a_packet_of_the_deponents_documents(run):
    """A deponent's packet: their documents coded responsive, hot ones first picked, in date
    order; a session's turns are the system prompt, the packet, the outline, the history."""
    w = run.world
    depo = [s for s in w.sessions if s.kind == "depo"]
    assert depo and w.packets
    for who, packet in w.packets.items():
        docs = [w.corpus.docs[d] for d in packet]
        assert all(doc.custodian == who for doc in docs) and len(packet) >= 4
        assert [doc.date for doc in docs] == sorted(doc.date for doc in docs)
    extended = 0
    for s in depo:
        for a, b in itertools.pairwise(s.sent):  # unless another session revised the outline
            if shared_tokens(_segs(run, a), _segs(run, b)) >= tokens(_segs(run, a)):
                assert run.trace[b][:len(run.trace[a])] == run.trace[a]
                extended += 1
        t = run.times[s.sent[0]]
        text = [x for d in w.packets[s.owner] for x in w.corpus.docs[d].text]
        assert _segs(run, s.sent[0])[:-1] == [w.system["depo"], *text,
                                               *w.outlines[s.owner].at(t)]
    assert extended >= 5


@pytest.mark.parametrize("seed", [1, 2])
def test_the_production_is_checked_redacted_and_rechecked(seed):
    """Friday's production: the documents coded responsive and not privileged, in Bates order;
    the re-check repeats an unredacted document's check exactly and a redacted one up to the
    redacted section; the privilege log walks the privileged ones."""
    r = _small(seed)
    w = r.world
    p = w.production
    start = p.check.sent[0][1]
    calls = {d: _calls(r, d, start) for d in w.coding if w.coding[d][0].request < start}
    bates = w.corpus.bates(1)
    assert p.items == [d for d in bates if d in calls and calls[d].responsive
                       and not calls[d].privileged]
    assert [d for d, _ in p.privlog.sent] == [d for d in bates if d in calls
                                              and calls[d].privileged]
    checked = dict(p.check.sent)
    assert [d for d, _ in p.recheck.sent] == p.items and p.redacted
    for d, i in p.recheck.sent:
        j = checked[d]
        if d not in p.redacted:
            assert r.trace[i] == r.trace[j]
            continue
        assert common(r.trace[i], r.trace[j]) == shared_tokens(_segs(r, i), _segs(r, j)) // BLOCK
        assert r.trace[i] != r.trace[j]
