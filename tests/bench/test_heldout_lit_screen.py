"""bench/heldout_lit_screen.py: the held-out shape lit_screen has the properties its docstring
names. Structure only: no policy, no hit rate."""

from __future__ import annotations

import itertools

import pytest

from bench.heldout import SHAPES
from bench.heldout_fewshot import BLOCK
from bench.heldout_lit_screen import KINDS, generate, lit_screen
from bench.heldout_lits_desk import TOOLS
from bench.heldout_lits_jobs import DEDUP_HOURS, SCREENS, UPDATE_HOURS
from bench.heldout_lits_world import DAY, END, HOUR, local
from tests.bench.trace_parts import (SmallRuns, blocks_by_kind, check_chains, check_ordered,
                                     common, extends, of_kind, shared_tokens, tokens)

SCALE = 0.2


SMALL = SmallRuns(generate, SCALE)  # each seed's run and first_seen, made once
_small, _first = SMALL.run, SMALL.first


def _walks(r, kind):
    return [w for w in r.state.walks if w.kind == kind]


def _hour(r, t, k):
    """The local hour (0..24) at ``t`` of review ``k``'s team."""
    return local(t, r.state.reviews[k].tz) % 24


def _criteria(s, k, t):
    """Review ``k``'s criteria and worked examples at ``t``."""
    rv = s.reviews[k]
    return [*rv.protocol.at(t), *rv.examples.at(t)]


def test_deterministic_and_seeded():
    """Same seed, same trace; seeds differ in structure (how prompts are laid out and walked,
    how many reviews, the teams' sites), not just in noise; a seed's calendar (living
    reviews, amendments) is the same at any scale; requests are non-empty and in order."""
    assert SHAPES["lit_screen"] is lit_screen  # registered in bench.heldout
    assert lit_screen(1, 0.05) == lit_screen(1, 0.05) != lit_screen(2, 0.05)
    assert generate(3, 0.05).trace == lit_screen(3, 0.05)
    a, b = _small(1).state, _small(2).state
    assert (a.setup, len(a.reviews)) != (b.setup, len(b.reviews))
    assert [rv.tz for rv in a.reviews] != [rv.tz for rv in b.reviews]
    tiny = generate(1, 0.05).state
    assert (tiny.setup, tiny.living, tiny.amendments) == (a.setup, a.living, a.amendments)
    setups = [_small(seed).state.setup for seed in (1, 2, 3, 4)]
    assert all(len({getattr(x, f) for x in setups}) == 2
               for f in ("persona_first", "paired", "window", "threaded"))
    for seed in (1, 2):
        check_ordered(_small(seed), KINDS)


@pytest.mark.parametrize("seed", [1, 2])
def test_sizes_and_span(seed):
    """At scale 0.2: 200K..500K blocks over two days; the screening prompt (screen, update,
    recheck) a third or more of them, the full-text side a fifth or more; every walk that
    started an hour before the end finished."""
    r = _small(seed)
    blocks = blocks_by_kind(r)
    total = sum(blocks.values())
    assert 200_000 <= total <= 500_000
    assert sum(blocks[k] for k in SCREENS) > 0.3 * total
    assert sum(blocks[k] for k in ("fulltext", "extract", "rob")) > 0.2 * total
    assert 44 * HOUR < r.times[-1] < END and r.times[0] < 3 * HOUR
    for w in r.state.walks:
        if w.sent and r.times[w.sent[0]] < END - HOUR:
            assert w.pos == len(w.steps) == len(w.sent) and not w.active


def test_prefix_chains_are_well_formed():
    """A block id always follows the same parent; a request is the full blocks of its
    segments, the same segments always the same ids; two requests share exactly the blocks
    of the segments they start with."""
    check_chains(_small(1), 3)
    check_chains(_small(2), 7)


@pytest.mark.parametrize("seed", [1, 2, 4])
def test_screening_runs_dual_screen_in_the_teams_hours(seed):
    """A run starts in local 08..18 and takes records of its review imported by then, each
    screened by A and B (record by record, or in two passes, as the seed's setup says):
    system prompt, the variant before or after the criteria and examples, the record, the
    cue. A and B share only the system prompt, or everything up to the variant. A review's
    records imported before its last run are all screened, once."""
    r = _small(seed)
    s, done = r.state, []
    for w in _walks(r, "screen"):
        rv, t0 = s.reviews[w.owner], r.times[w.sent[0]]
        assert w.info[0] == t0 and 8 <= _hour(r, t0, w.owner) < 18
        recs = list(dict.fromkeys(x for x, _ in w.steps))
        assert all(x in rv.pool and s.records[x].imported <= t0 for x in recs)
        pairs = [(x, v) for x in recs for v in "AB"] if s.setup.paired else [
            (x, v) for v in "AB" for x in recs]
        assert w.steps == pairs
        sent = {}
        for i, (x, who) in zip(w.sent, w.steps):
            crit, var = _criteria(s, w.owner, r.times[i]), rv.variants[who]
            head = [var, *crit] if s.setup.persona_first else [*crit, var]
            assert r.meta[i] == ("screen", w.owner, x,
                                 [s.system["screen"], *head, s.records[x].text, s.cue["screen"]])
            sent[x, who] = i
        for x in recs:
            a, b = r.meta[sent[x, "A"]][3], r.meta[sent[x, "B"]][3]
            want = 1 if s.setup.persona_first else 1 + len(_criteria(s, w.owner, t0))
            if a[1:-3] == b[1:-3] or s.setup.persona_first:
                assert common(r.trace[sent[x, "A"]], r.trace[sent[x, "B"]]) == tokens(
                    a[:want]) // BLOCK
        done += recs
    assert len(done) == len(set(done)) > 100
    for k, rv in enumerate(s.reviews):
        last = max(w.info[0] for w in _walks(r, "screen") if w.owner == k)
        assert {x for x in rv.pool if s.records[x].imported <= last} <= set(done)


def test_conflicts_go_to_the_adjudicator():
    """A run's conflicts are re-read by the adjudicator when the run ends: its system prompt,
    the criteria and examples, the record, both reviewers' rationales (new text), the cue.
    A few percent up to a quarter of the screened records are conflicts."""
    for seed in (1, 2):
        r, first = _small(seed), _first(seed)
        s, seen, adjudicated = r.state, set(), 0
        for w in _walks(r, "adjudicate"):
            t0 = w.info[0]
            assert any(v.kind in SCREENS and v.owner == w.owner and r.times[v.sent[-1]] <= t0
                       and {x for x, in w.steps} <= {x for x, _ in v.steps} for v in s.walks)
            for i, (x,) in zip(w.sent, w.steps):
                segs, crit = r.meta[i][3], _criteria(s, w.owner, r.times[i])
                assert segs[:1 + len(crit)] == [s.system["adjudicate"], *crit]
                assert segs[-4] == s.records[x].text and segs[-1] == s.cue["adjudicate"]
                if x not in seen:
                    cut = tokens(segs[:-4]) // BLOCK
                    assert all(first[b] == i for b in r.trace[i][cut + 1:])
                seen.add(x)
            adjudicated += len(w.steps)
        screened = sum(len(w.steps) // 2 for w in s.walks if w.kind in SCREENS)
        assert 0.03 * screened < adjudicated < 0.25 * screened


def test_an_amendment_makes_later_prompts_new():
    """An amendment rewrites one criteria section: every request of the review after it
    carries the new version, and its blocks from that section on were never requested
    before the amendment; before it, the old version. The included records are then
    re-screened at once."""
    checked = 0
    for seed in (1, 2):
        r, first = _small(seed), _first(seed)
        s = r.state
        for k, t in s.amendments:
            versions = s.reviews[k].protocol.versions
            j = [v[0] for v in versions].index(t)
            old, new = versions[j - 1][1], versions[j][1]
            changed = [n for n in range(len(old)) if old[n] != new[n]]
            assert len(old) == len(new) and len(changed) == 1
            start = next(i for i, x in enumerate(r.times) if x >= t)
            for i, m in enumerate(r.meta):
                if m[0] in (*SCREENS, "adjudicate", "fulltext") and m[1] == k:
                    segs = m[3]
                    if r.times[i] < t:
                        assert new[changed[0]] not in segs
                    elif s.reviews[k].protocol.at(r.times[i]) == new:
                        cut = tokens(segs[:segs.index(new[changed[0]])]) // BLOCK
                        assert all(first[b] >= start for b in r.trace[i][cut:])
                        checked += 1
            w = [v for v in _walks(r, "recheck") if v.info == (t, "amend")]
            assert len(w) == 1 and w[0].owner == k and r.times[w[0].sent[0]] == t
    assert checked >= 20


def test_a_search_update_is_screened_at_once_then_rechecks():
    """A living review's search update lands at local 06..07: its new records are screened
    in one burst, then unsure records are re-checked with the current prompts (those left
    unsure during the trace first: screened before under the same criteria, re-sent
    exactly)."""
    repeats = 0
    for seed in (1, 2):
        r = _small(seed)
        s = r.state
        assert s.updates and len(s.updates) == len(s.living)
        for k, recs in s.updates:
            (w,) = [v for v in _walks(r, "update") if v.owner == k]
            t0 = w.info[0]
            assert UPDATE_HOURS[0] <= _hour(r, t0, k) < UPDATE_HOURS[1]
            assert [x for x, v in w.steps if v == "A"] == recs
            assert all(s.records[x].imported == t0 for x in recs)
            assert r.times[w.sent[-1]] - t0 < 0.5 * HOUR
            for v in _walks(r, "recheck"):
                if v.owner == k and v.info[1] == "update":
                    assert v.info[0] >= r.times[w.sent[-1]]
                    assert all(x in s.reviews[k].library + s.reviews[k].pool for x, _ in v.steps)
        for i in of_kind(r, "recheck"):
            earlier = [j for j in range(i) if r.meta[j][3] == r.meta[i][3]]
            assert all(r.trace[j] == r.trace[i] for j in earlier)
            repeats += bool(earlier)
    assert repeats >= 2


@pytest.mark.parametrize("seed", [1, 2])
def test_nightly_dedup_walks_the_days_imports(seed):
    """Each night from 01..02 UTC one walk pairs every record imported in the day before
    with 0..4 candidates from its review's library, by import time: the system prompt, the
    record, the candidate, the cue; pairs of one record share the record's blocks."""
    r = _small(seed)
    s = r.state
    walks = _walks(r, "dedup")
    assert [w.owner for w in walks] == [0, 1]
    for night, w in enumerate(walks):
        t0 = w.info[0]
        assert DEDUP_HOURS[0] <= (t0 - night * DAY) / HOUR < DEDUP_HOURS[1]
        day = [x for x, rec in enumerate(s.records) if (night - 1) * DAY <= rec.imported
               < night * DAY]
        recs = list(dict.fromkeys(x for x, _ in w.steps))
        assert recs == sorted(recs, key=lambda x: (s.records[x].imported, x))
        assert set(recs) <= set(day) and len(recs) > 0.5 * len(day) > 20
        for i, (x, c) in zip(w.sent, w.steps):
            assert c in s.reviews[s.records[x].review].library
            assert r.meta[i] == ("dedup", night, x, [s.system["dedup"], s.records[x].text,
                                                     s.records[c].text, s.cue["dedup"]])
        for (i, a), (j, b) in itertools.pairwise(zip(w.sent, w.steps)):
            if a[0] == b[0]:
                assert common(r.trace[i], r.trace[j]) == tokens(r.meta[i][3][:2]) // BLOCK


def _papers(r, stage):
    return [p for p in r.state.papers.values() if stage in p.walks]


def test_full_text_reads_each_paper_in_windows():
    """A paper's full-text walk starts in local 08..18 and reads its sections in order, in
    windows no longer than the setup's (unless one section): system prompt, the criteria as
    they stand, the window, the cue. Its extraction and risk of bias come later."""
    papers = 0
    for seed in (1, 2):
        r = _small(seed)
        s = r.state
        for p in _papers(r, "fulltext"):
            w, t0 = p.walks["fulltext"], p.walks["fulltext"].info
            assert 8 <= _hour(r, r.times[w.sent[0]], p.review) < 18
            assert [x for win in t0 for x in win] == p.sections
            assert all(tokens(win) <= s.setup.window or len(win) == 1 for win in t0)
            for i, (x, n) in zip(w.sent, w.steps):
                rv = s.reviews[p.review]
                assert r.meta[i] == ("fulltext", p.review, x, [
                    s.system["fulltext"], *rv.protocol.at(r.times[i]), *t0[n], s.cue["fulltext"]])
            for stage in ("extract", "rob"):
                if stage in p.walks and p.walks[stage].sent:
                    assert r.times[p.walks[stage].sent[0]] > r.times[w.sent[-1]] + 0.2 * HOUR
            papers += 1
    assert papers >= 10


def test_extraction_rereads_the_paper_behind_the_template():
    """Each field group is asked after the template as it stands and the whole paper: on
    its own (consecutive requests share exactly that head) or in one thread per paper (each
    request extends the last exactly)."""
    walks = threaded = alone = 0
    for seed in (1, 2, 3):
        r = _small(seed)
        s = r.state
        for p in _papers(r, "extract"):
            w = p.walks["extract"]
            head = w.info[0]
            t0 = r.times[w.sent[0]] if w.sent else END
            assert head == [s.system["extract"], *s.reviews[p.review].template.at(t0),
                            *p.sections]
            assert all(r.meta[i][3][:len(head)] == head for i in w.sent)
            if s.setup.threaded:
                threaded += extends(r, w.sent, lambda i, j: True)
            else:
                for i, j in itertools.pairwise(w.sent):
                    assert common(r.trace[i], r.trace[j]) == tokens(head) // BLOCK
                    alone += 1
            walks += len(w.sent) > 1
    assert walks >= 5 and threaded >= 5 and alone >= 5


def test_risk_of_bias_shares_the_tools_guidance_across_reviews():
    """Every risk-of-bias request of a tool starts with the same blocks (system prompt and
    the tool's guidance), whichever review; a paper's domains share the paper too."""
    reviews = set()
    for seed in (1, 2):
        r = _small(seed)
        s = r.state
        heads = {}
        for p in _papers(r, "rob"):
            w = p.walks["rob"]
            head = [s.system["rob"], *s.guidance[p.tool]]
            assert len(w.steps) == TOOLS[p.tool][1]
            for i in w.sent:
                segs = r.meta[i][3]
                assert segs[:-1] == [*head, *p.sections]
                k = heads.setdefault(p.tool, r.trace[i][:tokens(head) // BLOCK])
                assert r.trace[i][:len(k)] == k
                reviews.add((seed, p.tool, p.review))
            for i, j in itertools.pairwise(w.sent):
                assert common(r.trace[i], r.trace[j]) == tokens(r.meta[i][3][:-1]) // BLOCK
    assert len(reviews) >= 6


def test_chats_grow_over_the_record_or_paper():
    """A reviewer's chat starts in local 08..18: system prompt, the criteria as they stand,
    the record (a recently adjudicated one, or any) or the paper's sections, the history,
    the message; each turn extends the last exactly while the criteria hold."""
    grown = targets = 0
    for seed in (1, 2):
        r = _small(seed)
        s = r.state
        for n, chat in enumerate(s.chats):
            t0 = r.times[chat.sent[0]]
            assert 8 <= _hour(r, t0, chat.owner) < 18
            if chat.target == "conflict":
                assert chat.about in s.adjudicated[chat.owner]
                assert s.records[chat.about].adjudicated <= t0
            if chat.target == "paper":
                assert chat.fixed == s.papers[chat.about].sections
            else:
                assert chat.fixed == [s.records[chat.about].text]
            targets |= {"paper": 1, "conflict": 2, "record": 4}[chat.target]
            for k, i in enumerate(chat.sent):
                crit = s.reviews[chat.owner].protocol.at(r.times[i])
                assert r.meta[i][:3] == ("chat", n, k)
                assert r.meta[i][3][:1 + len(crit) + len(chat.fixed)] == [
                    s.system["chat"], *crit, *chat.fixed]
            grown += extends(r, chat.sent, lambda i, j: r.meta[i][3][1] == r.meta[j][3][1])
    assert grown >= 20 and targets == 7


def test_adhoc_queries_are_one_off():
    """An ad-hoc query is the system prompt and new text: every block after the system
    prompt's is requested there first."""
    for seed in (1, 2):
        r, first = _small(seed), _first(seed)
        s = r.state
        ids = of_kind(r, "adhoc")
        assert len(ids) >= 10
        for i in ids:
            segs = r.meta[i][3]
            assert len(segs) == 2 and segs[0] == s.system["adhoc"]
            assert all(first[b] == i for b in r.trace[i][tokens(segs[:1]) // BLOCK:])
            assert shared_tokens(segs, r.meta[ids[0]][3]) >= segs[0][1]
