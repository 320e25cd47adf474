"""bench/heldout_patent_search.py: the held-out shape patent_search has the properties its
docstring names. Structure only: no policy, no hit rate."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from bench.heldout_fewshot import BLOCK
from bench.heldout_pats_jobs import BATCH, DIGEST, FAMILY_HOURS, LANDSCAPE_HOURS
from bench.heldout_pats_world import DAY, FIRM, HOUR, SHOWN
from bench.heldout_patent_search import KINDS, generate, patent_search
from tests.bench.trace_parts import (SmallRuns, blocks_by_kind, check_chains, check_ordered,
                                     common, extends, of_kind, tokens)

SCALE = 0.2
SMALL = SmallRuns(generate, SCALE)  # each seed's run and first_seen, made once
_small, _first = SMALL.run, SMALL.first


def _shown(s, d, t, full=False):
    """Document ``d`` as a prompt showed it at ``t`` (the machine abstract before its
    translation landed)."""
    doc = s.docs[d]
    if doc.lang != "en" and (doc.translated is None or doc.translated > t):
        return [doc.mt]
    front, passages = doc.english
    return [front, *(passages if full else passages[:SHOWN])]


def _claims(s, m, t):
    return [c.seg for c in s.matters[m].claims(t)]


def _local(s, m, t):
    """The hour of the day at ``t`` in matter ``m``'s office."""
    return (t / HOUR + s.matters[m].tz) % 24


def test_deterministic_and_seeded():
    """Same seed, same trace; seeds differ in structure (which days are litigation-led and
    which litigations run), not only noise; requests are non-empty and in time order."""
    assert patent_search(1, 0.05) == patent_search(1, 0.05) != patent_search(2, 0.05)
    assert generate(3, 0.05).trace == patent_search(3, 0.05)
    a, b = _small(1).state, _small(2).state
    assert a.modes == ("pros", "lit") and b.modes == ("lit", "lit")
    assert [len(x) for x in a.lit_days] != [len(x) for x in b.lit_days]
    for seed in (1, 2):
        check_ordered(_small(seed), KINDS)


@pytest.mark.parametrize("seed", [1, 2])
def test_sizes_span_and_the_firm_prompt(seed):
    """At scale 0.2: 250K..700K blocks over two days; every request starts with the firm's
    system prompt and its task's instruction, so all share the prompt's full blocks."""
    r = _small(seed)
    assert 250_000 <= sum(blocks_by_kind(r).values()) <= 700_000
    assert r.times[0] < 4 * HOUR and 44 * HOUR < r.times[-1] < 2 * DAY
    s, k = r.state, FIRM // BLOCK
    for q, m in zip(r.trace, r.meta):
        assert m[3][:2] == [s.firm, s.instr[m[0]]] and q[:k] == r.trace[0][:k]


def test_prefix_chains_are_well_formed():
    """A block id always follows the same parent; a request is the full blocks of its
    segments, the same segments always the same ids; two requests share exactly the blocks
    of the segments they start with."""
    check_chains(_small(1), 3)


def test_litigation_led_days_are_dominated_by_invalidity_work():
    """On a litigation-led day 2..3 litigations run large invalidity searches and their
    charts outweigh the prosecution screens; on a prosecution-led day one small search."""
    for seed in (1, 2):
        r = _small(seed)
        s, days = r.state, [Counter(), Counter()]
        for q, m, t in zip(r.trace, r.meta, r.times):
            days[int(t // DAY)][m[0]] += len(q)
        for d, mode in enumerate(s.modes):
            lit = [x for x in s.searches if x.kind == "invalidity" and x.day == d]
            assert {x.matter for x in lit} == set(s.lit_days[d])
            assert all(s.matters[x.matter].kind == "lit" for x in lit)
            if mode == "lit":
                assert 2 <= len(s.lit_days[d]) <= 3 and len(lit) >= 4
                assert days[d]["invalidity"] + days[d]["chart"] > days[d]["screen"]
            else:
                assert len(lit) == 1


@pytest.mark.parametrize("seed", [1, 2])
def test_searches_read_ranked_hits_against_the_claims(seed):
    """A search reads its ranked hits in order, key references first: the instruction, the
    claims as they stand, the document as shown then, the cue; its requests share the head
    through the claims. Planned searches start in office hours, re-screens after an
    amendment."""
    r = _small(seed)
    s = r.state
    for n, x in enumerate(s.searches):
        w, keys = x.stream, s.matters[x.matter].keys
        assert len(set(w.items)) == len(w.items) and w.pos == len(w.items) == len(w.sent)
        if len(w.items) >= len(keys):
            assert sorted(w.items[:len(keys)]) == sorted(keys)
        else:
            assert set(w.items) <= set(keys)
        head = [s.firm, s.instr[x.kind], *_claims(s, x.matter, r.times[w.sent[0]])]
        for k, (i, d) in enumerate(zip(w.sent, w.items)):
            t = r.times[i]
            assert r.meta[i] == (x.kind, n, k, [*head[:2], *_claims(s, x.matter, t),
                                                *_shown(s, d, t), s.cue[x.kind]])
        for i, j in itertools.pairwise(w.sent):
            if _claims(s, x.matter, r.times[i]) == _claims(s, x.matter, r.times[j]):
                assert common(r.trace[i], r.trace[j]) >= tokens(head) // BLOCK
        t0 = r.times[w.sent[0]]
        if x.amended is None:
            assert 8 <= _local(s, x.matter, t0) < 20
        else:
            assert 10 * 60 <= t0 - x.amended <= 90 * 60 and len(w.items) == BATCH["screen"]


def test_a_few_documents_are_re_read_often_a_long_tail_once():
    """Over the searches a matter's key references come back search after search (the same
    prompt again while its claims and the document's text are unchanged), while most
    documents any search reads are read once."""
    for seed in (1, 2):
        r = _small(seed)
        reads, prompts = Counter(), Counter()
        for i in [*of_kind(r, "screen"), *of_kind(r, "invalidity")]:
            x = r.state.searches[r.meta[i][1]]
            reads[x.stream.items[r.meta[i][2]]] += 1
            prompts[tuple(r.trace[i])] += 1
        once = sum(1 for n in reads.values() if n == 1)
        assert once > 0.5 * len(reads) and max(reads.values()) >= 3
        assert sum(n - 1 for n in prompts.values()) >= 50


@pytest.mark.parametrize("seed", [1, 2])
def test_charts_go_element_by_element_against_one_reference(seed):
    """A chart re-sends the claims as charted and the key reference in full, then one
    element a row (a second pass adds a note after it); rows share everything before the
    element."""
    r = _small(seed)
    s = r.state
    assert s.charts
    for n, c in enumerate(s.charts):
        w = c.stream
        assert c.doc in s.matters[c.matter].keys and len(w.sent) == w.pos
        for k, (i, (q, e, p)) in enumerate(zip(w.sent, w.items)):
            head = [s.firm, s.instr["chart"], *(x.seg for x in c.claims),
                    *_shown(s, c.doc, r.times[i], full=True), c.claims[q].elements[e]]
            segs = r.meta[i][3]
            assert r.meta[i][:3] == ("chart", n, k) and segs[:len(head)] == head
            assert len(segs) == len(head) + 1 + p and segs[-1] == s.cue["chart"]
        for i, j in itertools.pairwise(w.sent):
            ref = _shown(s, c.doc, r.times[i], full=True)
            cut = tokens(r.meta[i][3][:len(c.claims) + 2 + len(ref)])
            assert common(r.trace[i], r.trace[j]) >= cut // BLOCK


@pytest.mark.parametrize("seed", [1, 2])
def test_family_walks_triage_citations_at_night(seed):
    """Each night from 01..04 Eastern one walk: a citation's front page against the claims
    of its matter (the second night: matters searched the day before); one outside the index
    is one-off content, every block after the claims new."""
    r, first = _small(seed), _first(seed)
    s = r.state
    assert [night for night, _ in s.walks] == [0, 1]
    day0 = {x.matter for x in s.searches if x.day == 0}
    for night, w in s.walks:
        t0 = r.times[w.sent[0]] - night * DAY
        assert FAMILY_HOURS[0] * HOUR <= t0 < FAMILY_HOURS[1] * HOUR
        assert night == 0 or {m for m, _ in w.items} <= day0
        for i, (m, d) in zip(w.sent, w.items):
            segs, t = r.meta[i][3], r.times[i]
            head = [s.firm, s.instr["family"], *_claims(s, m, t)]
            assert segs[:-2] == head and segs[-1] == s.cue["family"]
            if d >= 0:
                assert segs[-2] == _shown(s, d, t)[0]
            else:
                assert all(first[b] == i for b in r.trace[i][tokens(head) // BLOCK + 1:])


def test_translation_makes_foreign_references_english():
    """The translator sends a foreign document section by section (instruction, the
    language's glossary, the source section); before it is done prompts show the machine
    abstract, after it the new English text."""
    done = 0
    for seed in (1, 2):
        r = _small(seed)
        s = r.state
        for k, i in enumerate(s.translator.sent):
            d, sec = s.translator.items[k]
            doc = s.docs[d]
            assert doc.lang != "en" and r.meta[i][3][2:4] == [s.glossary[doc.lang],
                                                              doc.source[sec]]
        for i in [*of_kind(r, "screen"), *of_kind(r, "invalidity")]:
            x = s.searches[r.meta[i][1]]
            doc = s.docs[x.stream.items[r.meta[i][2]]]
            if doc.lang != "en" and doc.translated is not None:
                before = r.times[i] < doc.translated
                assert (doc.mt in r.meta[i][3]) == before
                done += not before
    assert done >= 10


@pytest.mark.parametrize("seed", [1, 2])
def test_landscape_reports_walk_an_area_at_night(seed):
    """A report starts 21:30..23:30 Eastern and walks its area's top ranks in order under
    the client's taxonomy (the requests share the head through it), then summarises each
    cluster from its documents' outputs; a refresh re-sends unchanged documents exactly."""
    r = _small(seed)
    s = r.state
    same = 0
    for n, rep in enumerate(s.reports):
        w = rep.stream
        t0 = r.times[w.sent[0]]
        assert LANDSCAPE_HOURS[0] <= t0 / HOUR % 24 < LANDSCAPE_HOURS[1]
        if rep.refreshes is None:
            assert [(s.docs[d].area, s.docs[d].rank) for d in rep.docs] == [
                (rep.area, k) for k in range(len(rep.docs))]
        head = [s.firm, s.instr["landscape"], rep.taxonomy]
        for i, j in itertools.pairwise(w.sent):
            assert common(r.trace[i], r.trace[j]) >= tokens(head) // BLOCK
        for i, item in zip(w.sent, w.items):
            if item < 0:
                digest = r.meta[i][3][3:-1]
                assert 0 < len(digest) <= DIGEST and set(digest) <= set(rep.outputs.values())
        if rep.refreshes is not None:
            old = s.reports[rep.refreshes]
            assert rep.taxonomy == old.taxonomy and rep.docs[:len(old.docs)] == old.docs
            for i, j in zip(old.stream.sent, w.sent):
                same += r.trace[i] == r.trace[j]
    assert seed != 2 or same >= 20


def _cited(s, oa, t):
    """The art office action ``oa`` cites as a prompt showed it at ``t``."""
    out = []
    for d, passages in s.oas[oa].cited:
        shown = _shown(s, d, t, full=True)
        out += shown if len(shown) == 1 else [shown[0], *(shown[1 + k] for k in passages)]
    return out


def _same_head(r, i, j):
    """Whether turns ``i`` and ``j`` of a chat send the same head (what comes before the
    history: two segments a turn before ``i``, then its message)."""
    k = len(r.meta[i][3]) - 2 * r.meta[i][2] - 1
    return r.meta[i][3][:k] == r.meta[j][3][:k]


def test_office_actions_are_triaged_then_answered_over_several_turns():
    """An office action is triaged on arrival at 07..10 Eastern (the rejection after the
    instruction); a response re-sends the claims, the rejection and the cited art each turn
    and extends the last turn exactly while they read the same; some break for hours."""
    extended = breaks = 0
    for seed in (1, 2):
        r = _small(seed)
        s = r.state
        for oa, i in s.triaged.items():
            assert 7 * HOUR <= r.times[i] % DAY < 10 * HOUR
            assert r.meta[i] == ("triage", oa, 0, [s.firm, s.instr["triage"],
                                                   *s.oas[oa].rejection, s.cue["triage"]])
        for chat in (c for c in s.chats if c.kind == "oa"):
            for k, i in enumerate(chat.sent):
                t = r.times[i]
                head = [s.firm, s.instr["oa"], *_claims(s, chat.owner, t),
                        *s.oas[chat.oa].rejection, *_cited(s, chat.oa, t)]
                assert r.meta[i][3][:len(head)] == head and len(r.meta[i][3]) == len(
                    head) + 2 * k + 1
            extended += extends(r, chat.sent, lambda i, j: _same_head(r, i, j))
            for k in chat.breaks:
                breaks += r.times[chat.sent[k]] - r.times[chat.sent[k - 1]] >= HOUR
    assert extended >= 30 and breaks >= 1


def test_amendments_make_later_blocks_new():
    """An amendment lands as a new version of the claims (after the response it follows);
    the first screen that sends it has every block from the first changed claim on new, and
    half the amendments are re-screened 10..90 minutes after."""
    checked = 0
    for seed in (1, 2):
        r, first = _small(seed), _first(seed)
        s = r.state
        for chat in (c for c in s.chats if c.kind == "amend" and c.made is not None):
            assert chat.made >= r.times[chat.sent[-1]]
            assert r.times[chat.sent[0]] > r.times[s.chats[s.oas[chat.oa].sessions[0]].sent[-1]]
            versions = s.matters[chat.owner].versions
            k = [v[0] for v in versions].index(chat.made)
            old, new = [c.seg for c in versions[k - 1][1]], [c.seg for c in versions[k][1]]
            cut = next(n for n, (a, b) in enumerate(zip(old, new)) if a != b)
            later = [i for x in s.searches if x.matter == chat.owner for i in x.stream.sent
                     if r.times[i] >= chat.made]
            if not later or s.matters[chat.owner].claims(r.times[min(later)]) != versions[k][1]:
                continue
            i = min(later)
            assert r.meta[i][3][2:2 + len(new)] == new
            pre = tokens([s.firm, s.instr[r.meta[i][0]], *new[:cut]]) // BLOCK
            assert all(first[b] == i for b in r.trace[i][pre + 1:])
            checked += 1
    assert checked >= 3


def test_chats_grow_their_history():
    """An attorney's chat, started in Eastern office hours, sends the claims and its pinned
    key references, the history and a message; each turn extends the last exactly while the
    head reads the same."""
    extended = 0
    for seed in (1, 2):
        r = _small(seed)
        s = r.state
        for chat in (c for c in s.chats if c.kind == "chat"):
            assert set(chat.pinned) <= set(s.matters[chat.owner].keys)
            assert 8 <= r.times[chat.sent[0]] % DAY / HOUR < 20
            for i in chat.sent:
                t = r.times[i]
                head = [s.firm, s.instr["chat"], *_claims(s, chat.owner, t),
                        *(x for d in chat.pinned for x in _shown(s, d, t))]
                assert r.meta[i][3][:len(head)] == head
            extended += extends(r, chat.sent, lambda i, j: _same_head(r, i, j))
    assert extended >= 20
