"""bench/heldout_media_pipeline.py: the held-out shape media_pipeline has the properties its
docstring names (bench.heldout replays it as one of SHAPES). Structure only: no hit rate."""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict

import pytest

from bench.heldout import SHAPES
from bench.heldout_fewshot import BLOCK
from bench.heldout_media_jobs import AD_KINDS, ADS, CHAPTERS, SUMMARY, UNIT
from bench.heldout_media_parts import DAY, END, HOUR, LANGUAGES
from bench.heldout_media_pipeline import KINDS, generate, media_pipeline
from tests.bench.trace_parts import (SmallRuns, blocks_by_kind, check_chains, common,
                                     shared_tokens, tokens)

SCALE = 0.2
STAGED = ("archive", "retry", "rerun", "ingest", "reingest")  # kinds that run a stage


SMALL = SmallRuns(generate, SCALE)  # each seed's run and first_seen, made once
_small, _first_seen = SMALL.run, SMALL.first


@pytest.fixture(scope="module")
def run():
    return _small(1)


def _stages(r):
    """(episode, stage) -> the indices of the requests that ran it, in order."""
    out = defaultdict(list)
    for i, (kind, e, stage, _) in enumerate(r.meta):
        if kind in STAGED:
            out[(e, stage)].append(i)
    return out


def _cue(r, stage, t):
    """The stage's cue as it stood at ``t``."""
    return [c for since, c in r.state.cues[stage] if since <= t][-1]


def _walk_end(r, w):
    """The index of a walk's last request, its retries included."""
    mine = set(w.sent)
    return max([*w.sent, *(i for i, j in r.state.retries if j in mine)])


def test_registered_deterministic_and_seeded():
    assert SHAPES["media_pipeline"] is media_pipeline
    assert media_pipeline(1, 0.05) == media_pipeline(1, 0.05) != media_pipeline(2, 0.05)
    assert generate(3, 0.05).trace == media_pipeline(3, 0.05)
    kinds = set()
    for seed in (1, 2):
        r = _small(seed)
        assert r.times == sorted(r.times) and all(r.trace)
        kinds |= {m[0] for m in r.meta}
        assert set(KINDS) - {m[0] for m in r.meta} <= {"reingest"}  # corrections are rare
    assert kinds == set(KINDS)
    assert _small(1).trace[:20] != _small(2).trace[:20]


@pytest.mark.parametrize("seed", [1, 2])
def test_sizes_and_span(seed):
    """At scale 0.2: 200K..450K blocks over two days, the overnight jobs and re-runs 30..75 %
    of them; every walk finished, failures sent again."""
    r = _small(seed)
    blocks = blocks_by_kind(r)
    total = sum(blocks.values())
    assert 200_000 <= total <= 450_000
    assert 0.3 < (blocks["archive"] + blocks["retry"] + blocks["rerun"]) / total < 0.75
    assert 40 * HOUR < r.times[-1] < END
    walks = [w for n in r.nights for w in n.walks.values()] + r.reruns
    assert all(w.pos == len(w.todo) and not w.failed for w in walks)
    assert [n.going for n in r.nights] == [0, 0] and len(r.state.retries) >= 3


def test_prefix_chains_are_well_formed(run):
    """A block id always follows the same parent, and each request is the full blocks of its
    segments: two requests share exactly the blocks of the segments they start with."""
    check_chains(run, 3)


def _check_opening(r, scale):
    """The trace opens with unit 0's chapters walk and nothing else: the first back-catalog
    episodes in the backlog's order, each its transcript then the cue; no block repeats in
    it (so no two share a first block) and it holds at least 25000 x scale blocks."""
    w = r.nights[0].walks[(0, CHAPTERS)]
    n = len(w.todo)
    assert w.todo == r.nights[0].units[0] == r.archive.backlog[:n]
    assert w.sent == list(range(n)) and r.times[n - 1] < 4 * HOUR
    cue = r.state.cues[CHAPTERS][0][1]
    for i, e in enumerate(w.todo):
        assert r.meta[i] == ("archive", e, CHAPTERS, [*r.archive.episodes[e].text.current, cue])
    blocks = [b for q in r.trace[:n] for b in q]
    assert len(set(blocks)) == len(blocks) >= UNIT[0] * scale >= 25000 * scale
    assert len({q[0] for q in r.trace[:n]}) == n
    seen: set[int] = set()
    for q in r.trace:  # the first repeated block comes after 25000 x scale blocks
        if seen.intersection(q):
            break
        seen.update(q)
    assert len(seen) >= 25000 * scale


@pytest.mark.parametrize("seed", [1, 2])
def test_the_trace_opens_with_a_walk_sharing_nothing(seed):
    _check_opening(_small(seed), SCALE)


@pytest.mark.parametrize("seed", [3, 4])
def test_the_opening_scales(seed):
    _check_opening(generate(seed, 0.05), 0.05)


@pytest.mark.parametrize("seed", [1, 2])
def test_walks_follow_the_units(seed):
    """Each night's units are the next back-catalog episodes in order; a unit's summary and
    ad-break walks (ad-supported shows only) start as soon as its chapters walk and its
    retries end, and so does the next unit's chapters walk."""
    r = _small(seed)
    at = 0
    for n in r.nights:
        eps = [e for u in n.units for e in u]
        assert eps == r.archive.backlog[at:at + len(eps)]
        at += len(eps)
        for u, unit in enumerate(n.units):
            ws = {s: n.walks[(u, s)] for s in (CHAPTERS, SUMMARY, ADS)}
            assert ws[CHAPTERS].todo == ws[SUMMARY].todo == unit
            ads = [e for e in unit if r.state.show_of(e).kind in AD_KINDS]
            assert ws[ADS].todo == ads
            for w in ws.values():
                assert [r.meta[i][1:3] for i in w.sent] == [(e, w.stage) for e in w.todo]
                assert all(r.meta[i][0] == "archive" for i in w.sent)
            end = _walk_end(r, ws[CHAPTERS])
            later = [ws[SUMMARY], ws[ADS]] + ([n.walks[(u + 1, CHAPTERS)]]
                                              if u + 1 < len(n.units) else [])
            assert all(w.sent[0] > end for w in later if w.sent)  # and at once (one pace)
            assert all(r.times[w.sent[0]] - r.times[end] < 200 / SCALE for w in later if w.sent)
    assert sum(len(n.units) for n in r.nights) >= 4


@pytest.mark.parametrize("seed", [1, 2])
def test_later_stages_resend_the_chapters_prompt_exactly(seed):
    """A chapters run is the transcript as it stands then the cue; a summary or ad-break run
    (job, retry, re-run or ingest) is the episode's last chapters prompt, the chapters that
    run wrote, and the stage's cue as it stands: its blocks extend that prompt's."""
    r = _small(seed)
    checked = Counter()
    for (e, stage), idx in _stages(r).items():
        ep = r.archive.episodes[e]
        for j in idx:
            segs, t = r.meta[j][3], r.times[j]
            if stage == CHAPTERS:
                if r.meta[j][0] != "retry":
                    assert segs == [*ep.text.at(t), _cue(r, CHAPTERS, t)]
                continue
            p = max(i for i in _stages(r)[(e, CHAPTERS)] if i < j)
            head = r.meta[p][3]
            chapters = dict(ep.chapters)[r.times[p]]
            assert segs == [*head, chapters, _cue(r, stage, t)] or r.meta[j][0] == "retry"
            assert r.trace[j][:len(r.trace[p])] == r.trace[p]
            checked[r.meta[j][0]] += 1
    assert checked["archive"] > 100 and checked["rerun"] > 20 and checked["ingest"] > 5


@pytest.mark.parametrize("seed", [1, 2])
def test_failed_requests_are_sent_again_exactly(seed):
    """A failed request comes back exactly (same blocks) after its walk's last first try."""
    r = _small(seed)
    walks = {i: w for n in r.nights for w in n.walks.values() for i in w.sent}
    walks.update({i: w for w in r.reruns for i in w.sent})
    for i, j in r.state.retries:
        assert r.meta[i][0] == "retry" and r.meta[i][1:] == r.meta[j][1:]
        assert r.trace[i] == r.trace[j] and i > walks[j].sent[-1]


@pytest.mark.parametrize("seed", [1, 2])
def test_a_prompt_fix_reruns_the_stage_with_the_new_cue(seed):
    """After a stage's cue changes, the stage is re-run over exactly the episodes it had done
    (in one walk); a re-run shares the episode's earlier run up to the cue, and every later
    run of the stage sends the new cue."""
    r = _small(seed)
    failed = {j for _, j in r.state.retries}
    fixed = [s for s in (SUMMARY, ADS) if len(r.state.cues[s]) > 1]
    assert SUMMARY in fixed and len(r.reruns) == len(fixed)
    runs = _stages(r)
    for w in r.reruns:
        t, cue = r.state.cues[w.stage][1]
        before = {e for (e, s), idx in runs.items() if s == w.stage
                  and any(r.times[i] < t and i not in failed for i in idx)}
        assert set(w.todo) == before and len(w.todo) == len(before)
        assert r.times[w.sent[0]] >= t and w.todo
        for i in w.sent:
            e, segs = r.meta[i][1], r.meta[i][3]
            prev = max(j for j in runs[(e, w.stage)] if r.times[j] < t)
            assert segs[-1] == cue != r.meta[prev][3][-1]
            share = shared_tokens(r.meta[prev][3], segs) // BLOCK
            assert common(r.trace[i], r.trace[prev]) == share
        after = [i for (_, s), idx in runs.items() if s == w.stage for i in idx
                 if r.times[i] >= t and r.meta[i][0] != "retry"]
        assert all(r.meta[i][3][-1] == cue for i in after)


def _subtitles(r):
    """(episode, language) -> the sections it was translated in, in order."""
    out = defaultdict(list)
    for i, e, lang, k in r.state.translations:
        assert r.meta[i][:3] == ("translate" if lang < LANGUAGES else "dub", e, lang)
        ep = r.archive.episodes[e]
        head = [r.state.langs[lang], r.state.show_of(e).glossary]
        assert r.meta[i][3] == [*head, ep.text.at(r.times[i])[k], r.state.translate_cue]
        out[(e, lang)].append(k)
    return out


@pytest.mark.parametrize("seed", [1, 2])
def test_new_episodes_are_ingested_and_subtitled(seed):
    """A new episode goes through its stages once, in order, from when it is published
    (after 04:00), then each section into each of its show's languages, in order; a
    corrected section is run again and re-translated."""
    r = _small(seed)
    subs, news = _subtitles(r), 0
    fixes = Counter(e for _, e, _ in r.state.corrections)
    for e, ep in enumerate(r.archive.episodes):
        if ep.published < 0:
            continue
        mine = [m[2] for m in r.meta if m[0] == "ingest" and m[1] == e]
        if not mine:
            continue  # published at the very end
        news += 1
        assert ep.published % DAY > 4 * HOUR
        first = next(i for i, m in enumerate(r.meta) if m[0] == "ingest" and m[1] == e)
        assert r.times[first] == ep.published
        assert mine == [1, 2, 3][:3 if r.state.show_of(e).kind in AD_KINDS else 2]
        for lang in r.state.show_of(e).languages:
            secs = subs.get((e, lang), [])
            n = len(ep.text.current)
            assert secs[:n] == list(range(n)) or r.times[-1] - ep.published < HOUR
            assert len(secs) <= n + fixes[e]
    assert news >= 10


def test_a_corrected_section_makes_later_blocks_new():
    """A correction's re-run of chapters shares the earlier run's blocks up to the corrected
    section, and every block from there on is new."""
    checked = 0
    for seed in (1, 2):
        r, first = _small(seed), _first_seen(seed)
        runs = _stages(r)
        for t, e, k in r.state.corrections:
            j = next(i for i in runs[(e, CHAPTERS)] if r.times[i] >= t)
            p = max(i for i in runs[(e, CHAPTERS)] if i < j)
            assert r.meta[j][0] == "reingest"
            cut = shared_tokens(r.meta[p][3], r.meta[j][3]) // BLOCK
            assert cut == tokens(r.meta[j][3][:k]) // BLOCK
            assert common(r.trace[p], r.trace[j]) == cut
            assert all(first[b] == j for b in r.trace[j][cut:])
            checked += 1
    assert checked >= 1


def test_editor_turns_resend_the_bible_and_history():
    """An editor's turn is the system prompt, the style guide, the show's bible as it stands,
    the pasted transcript and the history; while the bible stays, a turn's chain extends the
    previous turn's."""
    multi = 0
    for seed in (1, 2):
        r = _small(seed)
        st = r.state
        for n, ses in enumerate(r.sessions):
            def head(i):
                bible = r.archive.shows[ses.show].bible.at(r.times[i])
                return [st.system["editor"], *st.guide, *bible, *ses.pasted]
            if ses.episode is not None:
                assert ses.pasted == r.archive.episodes[ses.episode].text.at(r.times[ses.sent[0]])
            for i in ses.sent:
                assert r.meta[i][3][:len(head(i))] == head(i) and r.meta[i][:2] == ("editor", n)
            for i, j in itertools.pairwise(ses.sent):
                hx, hy = len(head(i)), len(head(j))
                assert r.meta[j][3][hy:hy + len(r.meta[i][3]) - hx] == r.meta[i][3][hx:]
                if head(i) == head(j):
                    assert r.trace[j][:len(r.trace[i])] == r.trace[i]
                multi += 1
    assert multi >= 20


def test_a_bible_edit_makes_later_editor_blocks_new():
    """After a section of a show's bible is rewritten, the show's next editor turn holds no
    block from that section on that was requested before."""
    checked = 0
    for seed in (1, 2):
        r, first = _small(seed), _first_seen(seed)
        st = r.state
        for t, s, k in st.bible_edits:
            nxt = [i for i, m in enumerate(r.meta) if m[0] == "editor"
                   and r.sessions[m[1]].show == s and r.times[i] >= t][:1]
            for j in nxt:
                bible = r.archive.shows[s].bible.at(r.times[j])
                cut = tokens([st.system["editor"], *st.guide, *bible[:k]]) // BLOCK
                assert all(first[b] == j for b in r.trace[j][cut:])
                checked += 1
    assert checked >= 1


@pytest.mark.parametrize("seed", [1, 2])
def test_clip_searches_send_the_transcript_and_current_chapters(seed):
    """A question is the clip tool's system prompt, the transcript, the chapters as they
    stood then (the old metadata's or the pipeline's), the question; a session's questions
    share everything before the question. Searches land on new and on back-catalog
    episodes, before and after their re-processing."""
    r = _small(seed)
    kinds = Counter()
    for n, srch in enumerate(r.searches):
        ep = r.archive.episodes[srch.episode]
        for i in srch.sent:
            t, segs = r.times[i], r.meta[i][3]
            head = [r.state.system["clip"], *ep.text.at(t), ep.chapters_at(t)]
            assert segs[:-1] == head and r.meta[i][:2] == ("clip", n)
        for i, j in itertools.pairwise(srch.sent):
            assert common(r.trace[i], r.trace[j]) >= tokens(r.meta[i][3][:-1]) // BLOCK - 1
        old = ep.chapters[0][0] < 0 and ep.chapters_at(r.times[srch.sent[0]]) == ep.chapters[0][1]
        kinds["new" if ep.published > 0 else "old metadata" if old else "re-processed"] += 1
    assert all(v >= 3 for v in kinds.values()) and len(kinds) == 3


@pytest.mark.parametrize("seed", [1, 2])
def test_the_dubbing_backfill_walks_the_most_popular_episodes(seed):
    """On the second night the most popular back-catalog episodes go, section by section and
    in order, into a ninth language behind its prompt and the show's glossary."""
    r = _small(seed)
    arc = r.archive
    weight = {e: arc.cum[e] - (arc.cum[e - 1] if e else 0.0) for e in arc.backlog}
    top = sorted(arc.backlog, key=weight.__getitem__, reverse=True)[:len(r.state.dubbed)]
    assert r.state.dubbed == top and len(top) >= 2
    subs = _subtitles(r)
    dubs = [(e, k) for i, e, lang, k in r.state.translations if lang == LANGUAGES]
    assert dubs == [(e, k) for e in top for k in range(len(arc.episodes[e].text.current))]
    assert all(subs[(e, LANGUAGES)] for e in top)
    assert all(r.times[i] > DAY for i, _, lang, _ in r.state.translations if lang == LANGUAGES)
