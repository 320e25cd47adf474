"""bench/heldout_manufacturing_qc.py: the held-out shape manufacturing_qc has the properties its
docstring names. Structure only: no policy, no hit rate."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from bench.heldout_fewshot import BLOCK
from bench.heldout_manufacturing_qc import KINDS, generate, manufacturing_qc
from bench.heldout_mfg_floor import ALARM_GAP, HANDOVER_DELAY, NCR_DELAY
from bench.heldout_mfg_parts import DAY, END, HOUR, MINUTE, SHIFTS, local
from tests.bench.trace_parts import (SmallRuns, blocks_by_kind, by_kind, check_chains,
                                     check_ordered, common, extends, of_kind, shared_tokens,
                                     tokens)

SCALE = 0.2
SMALL = SmallRuns(generate, SCALE)  # seed 1: a normal week, 2: an audit week, 3: a recall
_small, _first = SMALL.run, SMALL.first


def _chats(r, kind):
    return [(n, c) for n, c in enumerate(r.state.chats) if c.kind == kind and c.sent]


def test_deterministic_and_seeded():
    """Same seed, same trace; seeds differ in structure (the week's scenario, the plants'
    zones, the lines), not just in noise; requests are non-empty, in time order, every kind."""
    assert generate(1, 0.02).trace == manufacturing_qc(1, 0.02)
    assert _small(1).trace != _small(2).trace != _small(3).trace
    states = [_small(seed).state for seed in (1, 2, 3)]
    assert [s.scenario for s in states] == ["normal", "audit", "recall"]
    assert len({tuple(p.tz for p in s.plants) for s in states}) == 3
    for seed in (1, 2, 3):
        check_ordered(_small(seed), KINDS)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_sizes_and_span(seed):
    """At scale 0.2: 250K..700K blocks, 800..2000 requests over the two days; the audit week's
    walks and the recall's containment are large parts, small otherwise."""
    r = _small(seed)
    blocks = blocks_by_kind(r)
    total = sum(blocks.values())
    assert 250_000 <= total <= 700_000 and 800 <= len(r.trace) <= 2000
    assert r.times[0] < HOUR and 46 * HOUR < r.times[-1] < END
    scenario = r.state.scenario
    assert (blocks["audit"] > 0.05 * total) == (scenario == "audit")
    assert (blocks["containment"] > 0.08 * total) == (scenario == "recall")


def test_prefix_chains_are_well_formed():
    """A block id always follows the same parent; a request is the full blocks of its
    segments, the same segments always the same ids; two requests share exactly the blocks
    of the segments they start with."""
    check_chains(_small(3), 3)


def _document(s, what, key):
    if what == "procedure":
        return s.plants[key[0]].procedures[key[1]], 1
    return s.lines[key[0]].stations[key[1]], 2


def _revisions_checked(r, first) -> Counter:
    """Check the first question after each revision of a work instruction, a procedure or a
    sorting instruction (no other revision of it before): how many of each were checked."""
    s = r.state
    asked = {kind: by_kind(r, kind, lambda m: (s.chats[m[1]].owner, s.chats[m[1]].doc))
             for kind in ("operator", "sop")}
    checked = Counter()
    for t, what, key, k in s.revisions:
        if what not in ("wi", "sorting", "procedure"):
            continue
        reqs = asked["sop" if what == "procedure" else "operator"].get(key, [])
        later = [i for i in reqs if r.times[i] >= t]
        again = [u for u, w, q, _ in s.revisions if q == key and w == what and u > t]
        if not later or (again and again[0] <= r.times[later[0]]):
            continue
        j, (doc, skip) = later[0], _document(s, what, key)
        segs = r.meta[j][3]
        assert segs[skip:skip + len(doc.current)] == doc.at(r.times[j]) == doc.at(t)
        cut = tokens(segs[:skip + k]) // BLOCK
        assert all(first[b] == j for b in r.trace[j][cut:])
        before = [i for i in reqs if r.times[i] < t]
        assert not before or common(r.trace[before[-1]], r.trace[j]) <= cut
        checked[what] += 1
    return checked


def test_revised_documents_make_later_blocks_new():
    """After a work instruction, a procedure section or a sorting instruction is released, the
    next question on it sends the new version: every block from the revised section on is
    new, and it shares no more than the blocks before that section with the last one before."""
    checked = Counter()
    for seed in (1, 3):
        got = _revisions_checked(_small(seed), _first(seed))
        assert (got["sorting"] >= 1) == (seed == 3)
        checked += got
    assert checked["wi"] >= 3 and checked["procedure"] >= 2


@pytest.mark.parametrize("seed", [1, 2])
def test_shift_handovers_and_alarm_clusters_come_in_bursts(seed):
    """Every line's handover lands minutes after each local shift change, the plant's lines
    together; follow-ups extend it exactly and a line's handovers share its head. Alarms come
    in clusters minutes apart, each the reaction plan then new content."""
    r, first = _small(seed), _first(seed)
    s, bursts, heads = r.state, Counter(), {}
    for n, chat in _chats(r, "handover"):
        line, i = s.lines[chat.owner], chat.sent[0]
        assert HANDOVER_DELAY[0] * MINUTE <= r.times[i] - chat.origin <= HANDOVER_DELAY[1] * MINUTE
        assert round(local(chat.origin, s.plants[line.plant].tz) % 24, 6) in SHIFTS
        assert r.meta[i][3] == [s.system["handover"], line.profile, *chat.fixed, s.cue["handover"]]
        assert extends(r, chat.sent, lambda i, j: True) == len(chat.sent) - 1
        bursts[(line.plant, chat.origin)] += 1
        if chat.owner in heads:
            assert common(r.trace[heads[chat.owner]], r.trace[i]) == tokens(
                [s.system["handover"], line.profile]) // BLOCK
        heads[chat.owner] = i
    whole = [(p, c) for p, c in bursts if 0 <= c and c + HOUR < END]
    assert all(bursts[(p, c)] == len(s.plants[p].lines) for p, c in whole)
    assert len(whole) >= 5 * len(s.plants)
    same = later = 0
    for k, (n, c, sent) in enumerate(s.clusters):
        reactions = s.lines[n].reactions
        assert [r.meta[i][:3] for i in sent] == [("spc", k, a) for a in range(len(sent))]
        assert r.meta[sent[0]][3][1] == reactions[c] and all(r.meta[i][3][1] in reactions
                                                             for i in sent)
        for i, j in itertools.pairwise(sent):
            assert 0 < r.times[j] - r.times[i] <= ALARM_GAP[1] + 1e-6
        for i in sent:
            assert all(first[b] == i for b in r.trace[i][tokens(r.meta[i][3][:2]) // BLOCK + 1:])
        same += sum(r.meta[i][3][1] == reactions[c] for i in sent[1:])
        later += len(sent) - 1
    assert 0.55 * later <= same <= 0.95 * later and later >= 30


@pytest.mark.parametrize("seed", [1, 3])
def test_lot_summaries_and_ncrs(seed):
    """Each lot's summary as it completes: the spec as it stands, the record, the results;
    lots of a product share the head. Every failed lot gets an NCR minutes later over its
    results, its MRB turns extending the draft; some NCRs become 8D investigations."""
    r = _small(seed)
    s, heads = r.state, set()
    lots = of_kind(r, "lot")
    for i in lots:
        lot, t, segs = s.lots[r.meta[i][1]], r.times[i], r.meta[i][3]
        spec = s.products[lot.product].spec.at(t)
        assert lot.time == t and segs == [s.system["lot"], *spec, lot.record, lot.results,
                                          s.cue["lot"]]
        heads.add(tuple(r.trace[i][:tokens(segs[:-3]) // BLOCK]))
    assert len(heads) < len(lots) / 5
    ncrs = {c.owner: c for _, c in _chats(r, "ncr")}
    failed = {k for k, lot in enumerate(s.lots) if lot.failed}
    assert {k for k in failed if s.lots[k].time < END - HOUR} <= set(ncrs) <= failed
    assert len(ncrs) >= 5
    for k, chat in ncrs.items():
        lot = s.lots[k]
        assert NCR_DELAY[0] * MINUTE <= r.times[chat.sent[0]] - lot.time <= NCR_DELAY[1] * MINUTE
        assert chat.fixed[0] == lot.results and chat.doc == lot.product
        extends(r, chat.sent, lambda i, j: r.meta[i][3][1] == r.meta[j][3][1])
    cases = {tuple(c.fixed) for _, c in _chats(r, "eightd")}
    assert any(tuple(c.fixed) in cases for c in ncrs.values())


def _eightd_head(s, chat, t):
    prod = s.products[chat.owner]
    return [s.system["eightd"], s.guide, *chat.fixed, *prod.cp.at(t),
            *(prod.pfmea.at(t)[k] for k in chat.picks)]


def test_investigations_and_supplier_threads_grow():
    """An 8D's turns re-send its head (the documents as they stand) and its whole history, so
    each extends the last exactly unless a document was revised or the history compacted
    (then one summary); investigations open before the clock bring their history and run
    over both days. A supplier thread grows by each email and reply the same way."""
    grown = over_days = threads = 0
    for seed in (1, 3):
        r = _small(seed)
        s = r.state
        for n, chat in _chats(r, "eightd"):
            heads = [_eightd_head(s, chat, r.times[i]) for i in chat.sent]
            for k, (i, head) in enumerate(zip(chat.sent, heads)):
                assert r.meta[i][3][:len(head)] == head
                assert k not in chat.compacted or len(r.meta[i][3]) == len(head) + 2
            if chat.origin == 0.0:
                assert len(r.meta[chat.sent[0]][3]) >= len(heads[0]) + 3
            grown += extends(r, chat.sent, lambda i, j, c=chat, h=len(heads[0]): c.sent.index(j)
                             not in c.compacted and r.meta[i][3][:h] == r.meta[j][3][:h])
            over_days += len({r.times[i] // DAY for i in chat.sent}) > 1
        for n, chat in _chats(r, "supplier"):
            at = len(s.plants[chat.plant].sqa) + 1  # the scorecard, then the thread
            assert all(r.meta[i][3][at] == s.cards[(chat.owner, int(local(
                r.times[i], s.plants[chat.plant].tz) // 24))] for i in chat.sent)
            threads += extends(r, chat.sent, lambda i, j, c=chat, a=at: c.sent.index(j) not in
                               c.compacted and r.meta[i][3][a] == r.meta[j][3][a]) > 0
        if s.scenario == "recall":
            war = s.chats[s.war_room]
            assert len(war.sent) >= 10 and war.origin < r.times[war.sent[0]] + 1
            assert len(s.chats[s.threads[s.recall_supplier]].sent) >= 8
    assert grown >= 50 and over_days >= 5 and threads >= 3


def test_audit_walks_go_clause_by_clause():
    """Every seed has the internal audit; an audit week adds the preparation walk and the same
    walk again the next morning, re-sending each unrevised document exactly and every revised
    one new from its revised section on. A request: the clause, the document as it stands."""
    for seed in (1, 2):
        r = _small(seed)
        s = r.state
        walks = {w.label: w for w in s.walks if w.kind == "audit"}
        assert sorted(walks) == (["final", "internal", "prep"] if seed == 2 else ["internal"])
        for w in walks.values():
            assert w.pos == len(w.items) == len(w.sent) and not w.stopped
            clauses = [c for c, _ in w.items]
            assert len({c for c, _ in itertools.groupby(clauses)}) == len(list(
                itertools.groupby(clauses)))
            for i, (c, ref) in zip(w.sent, w.items):
                assert r.meta[i][3] == [s.system["audit"], s.clauses[c],
                                        *s.document(ref).at(r.times[i]), s.cue["audit"]]
            for (i, a), (j, b) in itertools.pairwise(zip(w.sent, w.items)):
                assert r.times[j] - r.times[i] >= tokens(r.meta[i][3]) / 6000 * 0.8
                assert a[0] != b[0] or common(r.trace[i], r.trace[j]) >= 2
    prep, final = walks["prep"], walks["final"]
    assert final.items == prep.items and r.times[final.sent[0]] > r.times[prep.sent[-1]]
    fixed = [(t, key) for t, what, key, _ in s.revisions
             if r.times[prep.sent[0]] < t < r.times[final.sent[0]]]
    same = sum(r.trace[i] == r.trace[j] for i, j in zip(prep.sent, final.sent))
    assert len(fixed) >= 3 and len(prep.items) // 2 <= same < len(prep.items)
    for i, j in zip(prep.sent, final.sent):
        assert (r.trace[i] == r.trace[j]) == (r.meta[i][3] == r.meta[j][3])
    per_plant = Counter(c.owner for _, c in _chats(r, "sop"))
    rate = [per_plant[p] / len(plant.lines) for p, plant in enumerate(s.plants)]
    others = [x for p, x in enumerate(rate) if p != s.audited]
    assert rate[s.audited] > 1.5 * sum(others) / len(others)


@pytest.mark.parametrize("seed", [1, 3])
def test_containment_walks_every_suspect_lot_again_after_each_revision(seed):
    """A hold (one line) or a recall (2..3 lines, a war room): a walk per brief version over the
    suspect lots of the product, line by line in time order; a revision stops the running walk
    and the next re-sends each lot sharing exactly the blocks up to the old brief's end."""
    r = _small(seed)
    s = r.state
    c = s.containment
    walks = [s.walks[w] for w in c.walks]
    assert c.recall == (seed == 3) and len(c.lines) == (1 if seed == 1 else len(c.lines)) >= 1
    assert [w.label for w in walks] == [str(v) for v in range(len(c.brief.versions))]
    assert all(w.stopped == (w.pos < len(w.items)) for w in walks[:-1])
    for v, w in enumerate(walks):
        t0, brief = r.times[w.sent[0]], c.brief.versions[v][1]
        assert all(s.lots[k].product == c.product and s.lots[k].time <= t0 for k in w.items)
        assert w.items == sorted(w.items, key=lambda k: (c.lines.index(s.lots[k].line),
                                                          s.lots[k].time))
        for i, k in zip(w.sent, w.items):
            spec = s.products[c.product].spec.at(r.times[i])
            assert r.meta[i][3] == [s.system["containment"], *brief, *spec, s.lots[k].record,
                                    s.lots[k].results, s.cue["containment"]]
        if v:
            old = dict(zip(walks[v - 1].items, walks[v - 1].sent))
            assert set(old) <= set(w.items)
            for i, k in zip(w.sent, w.items):
                if k in old:
                    assert common(r.trace[old[k]], r.trace[i]) == shared_tokens(
                        r.meta[old[k]][3], r.meta[i][3]) // BLOCK
                    assert r.meta[old[k]][3][:len(brief)] == r.meta[i][3][:len(brief)]
    assert len(walks) >= (4 if c.recall else 1) and len(walks[0].items) >= (5 if c.recall else 1)
    if c.recall:
        sorting = [(key[0], t) for t, what, key, _ in s.revisions if what == "sorting"]
        assert sorted(n for n, _ in sorting) == c.lines
    else:
        assert s.war_room == -1
