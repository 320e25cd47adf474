"""bench/heldout_tax_prep.py: the held-out shape tax_prep has the properties its docstring
names. Structure only: no policy, no hit rate."""

from __future__ import annotations

import itertools

import pytest

from bench.heldout_fewshot import BLOCK
from bench.heldout_tax_prep import KINDS, generate, tax_prep
from bench.heldout_taxp_desk import SURGE
from bench.heldout_taxp_jobs import EXTENSIONS
from bench.heldout_taxp_world import END, HOUR
from tests.bench.trace_parts import (SmallRuns, blocks_by_kind, check_chains, check_ordered,
                                     common, extends, of_kind, tokens)
from tests.bench.trace_parts import chats_of

SMALL = SmallRuns(generate, 0.2)  # each seed's run and first_seen, made once
_small, _first = SMALL.run, SMALL.first


def test_deterministic_and_seeded():
    """Same seed, same trace; each of seeds 1..4 plays its own scenario (a mid-day memo
    revision, a walk-in surge, a scanner outage, new IRS guidance); requests are non-empty,
    in time order, and every kind is there."""
    assert tax_prep(1, 0.05) == tax_prep(1, 0.05) != tax_prep(2, 0.05)
    assert generate(3, 0.05).trace == tax_prep(3, 0.05)
    s = [_small(seed).state for seed in (1, 2, 3, 4)]
    assert [x.scenario for x in s] == ["memo", "surge", "outage", "notice"]
    assert len(s[0].memo_edits) == 2 and [len(x.memo_edits) for x in s[1:]] == [1, 1, 1]
    assert s[2].outage[1] > s[2].outage[0] > 0 and s[3].notice and not s[0].notice
    for seed in (1, 2):
        check_ordered(_small(seed), KINDS)


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_sizes_and_span(seed):
    """At scale 0.2: 150K..500K blocks over two days, preparers' sessions the largest kind;
    10..30 % of the blocks distinct; every queue drained."""
    r = _small(seed)
    blocks = blocks_by_kind(r)
    total = sum(blocks.values())
    assert 150_000 <= total <= 500_000 and max(blocks, key=blocks.__getitem__) == "prep"
    assert 0.1 < len(_first(seed)) / total < 0.3
    assert 44 * HOUR < r.times[-1] < END and r.times[0] < 3 * HOUR
    s = r.state
    assert all(q.pos == len(q.sent) for q in [s.intake, *s.rechecks, s.extensions])


def test_prefix_chains_are_well_formed():
    """A block id always follows the same parent; a request is the full blocks of its
    segments; two requests share exactly the blocks of the segments they start with."""
    check_chains(_small(1), 3)
    check_chains(_small(4), 5)


@pytest.mark.parametrize("seed", [1, 3])
def test_intake_reads_each_page_behind_its_forms_prompt(seed):
    """Each page is read once, in order, behind the system prompt and its form type's fixed
    extraction prompt; every block from the page on is new. No page is read during the
    scanner outage, and one is read right after it ends."""
    r, first = _small(seed), _first(seed)
    s = r.state
    seen = set()
    for i, (d, page) in zip(s.intake.sent, s.intake.items):
        doc = s.docs[d]
        assert r.meta[i] == ("intake", 0, len(seen), [s.system["intake"],
                                                      s.form_prompts[doc.form], doc.pages[page]])
        assert r.times[i] >= doc.uploaded and (d, page) not in seen
        seen.add((d, page))
        head = tokens(r.meta[i][3][:2]) // BLOCK
        assert all(first[b] == i for b in r.trace[i][head:])
    assert all(page == 0 or (d, page - 1) in seen for d, page in seen)
    lo, hi = s.outage
    times = [r.times[i] for i in s.intake.sent]
    assert not any(lo <= t < hi for t in times)
    if lo > 0:
        assert any(hi <= t < hi + 60 for t in times)


@pytest.mark.parametrize("seed", [1, 2])
def test_prep_sessions_grow_over_the_clients_file(seed):
    """A preparer's turn sends the system prompt, the profile, last year's return, the
    records extracted by then, the history: while no new record lands a turn extends the
    last exactly; a later session on the client re-sends the same head."""
    r = _small(seed)
    s = r.state
    records = {x for d in s.docs for x in d.records}

    def same(i, j):
        return sum(x in records for x in r.meta[i][3]) == sum(x in records for x in r.meta[j][3])
    extended = 0
    for n, chat in chats_of(r, "prep"):
        c = s.clients[chat.owner]
        for i in chat.sent:
            assert r.meta[i][3][:2 + len(c.prior)] == [s.chat_system["prep"], c.profile, *c.prior]
        extended += extends(r, chat.sent, same)
    assert extended >= 100
    again = [c for c in s.clients if c.sessions > 1]
    assert again


@pytest.mark.parametrize("seed", [1, 2])
def test_memo_revisions_make_the_recheck_new_from_the_changed_section(seed):
    """Each night's re-check walks every finished return in client order behind the memo as
    it stands; after a revision a return's re-check shares the earlier one's blocks up to
    the changed section only, and every block from there on is new at the walk's start."""
    r, first = _small(seed), _first(seed)
    s = r.state
    for n, q in enumerate(s.rechecks):
        assert q.items == sorted(q.items) and len(q.sent) == len(q.items) >= 5
        t = r.times[q.sent[0]]
        assert all(r.meta[i][3][1:-2] == s.memo.at(r.times[i]) for i in q.sent)
        if not n:
            continue
        before = r.times[s.rechecks[n - 1].sent[0]]
        k = min(k for when, k in s.memo_edits if before < when <= t)
        cut = tokens([s.system["recheck"], *s.memo.at(t)[:k]]) // BLOCK
        assert all(first[b] == q.sent[0] for b in r.trace[q.sent[0]][cut:])
        prev = dict(zip(s.rechecks[n - 1].items, s.rechecks[n - 1].sent))
        for i, c in zip(q.sent, q.items):
            if c in prev:
                assert common(r.trace[prev[c]], r.trace[i]) == cut
    assert len(s.rechecks) == 3 if s.scenario == "memo" else 2


def test_reviews_walk_the_checklist_and_fixes_make_the_draft_new():
    """A review pass sends the return draft and records with each checklist item in turn
    (all items share the head); a fix rewrites one section, so the next pass shares the
    last one's blocks only up to it."""
    fixes = 0
    for seed in (1, 2):
        r = _small(seed)
        s = r.state
        for q in s.reviews:
            assert [r.meta[i][3][-2] for i in q.sent] == s.checklist
            for i, j in itertools.pairwise(q.sent):
                head = tokens(r.meta[i][3][:-2]) // BLOCK
                assert r.trace[i][:head] == r.trace[j][:head]
        for c, when, k in s.fixes:
            passes = [q for q in s.reviews if q.owner == c]
            j = [f for f in s.fixes if f[0] == c].index((c, when, k))
            a, b = passes[j].sent[0], passes[j + 1].sent[0]
            cut = tokens([s.system["review"], *s.clients[c].draft.at(when)[:k]]) // BLOCK
            assert common(r.trace[a], r.trace[b]) == cut
            fixes += 1
    assert fixes >= 3


def test_scenarios_walkins_extensions_amends_and_the_notice():
    """The surge seed gets several times the walk-ins of day 1's afternoon; the extension
    walk files for every unfinished return on the eve's evening; sessions on one amended
    file share its whole head; after the notice, rules sessions often quote it."""
    (day, lo, hi), _ = SURGE

    def walkins(seed):
        r = _small(seed)
        return sum(lo <= r.times[c.sent[0]] / HOUR - 24 * day < hi
                   for _, c in chats_of(r, "walkin"))
    assert walkins(2) > 2 * max(1, walkins(1), walkins(3), walkins(4))
    r = _small(2)
    s = r.state
    ext = s.extensions
    assert EXTENSIONS[0] <= r.times[ext.sent[0]] / HOUR - 24 < EXTENSIONS[1]
    assert set(ext.items) == {c for c, x in enumerate(s.clients) if x.extended}
    assert all(x.draft is None or x.draft.versions[0][0] > r.times[ext.sent[0]]
               for x in s.clients if x.extended)
    heads = {}
    for n, chat in chats_of(r, "amend"):
        head = tokens([s.chat_system["amend"], *s.amends[chat.owner]]) // BLOCK
        k = heads.setdefault(chat.owner, r.trace[chat.sent[0]][:head])
        assert r.trace[chat.sent[0]][:head] == k
    r = _small(4)
    when, k = r.state.notice
    sec = r.state.library[k]
    quoting = [r.times[c.sent[0]] >= when for _, c in chats_of(r, "rules") if sec in c.fixed]
    assert all(quoting) and len(quoting) >= 3
    assert of_kind(r, "oneoff")
