"""bench/heldout_news_desk.py: the held-out shape news_desk has the properties its docstring
names. Structure only: no policy, no hit rate."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from bench.heldout_fewshot import BLOCK
from bench.heldout_news_desk import KINDS, generate, news_desk
from bench.heldout_newsd_desk import SUMMARY, WINDOW
from bench.heldout_newsd_jobs import CLICK, NEWSLETTERS
from bench.heldout_newsd_world import DAY, END, HALF_LIFE, HOUR
from tests.bench.trace_parts import (SmallRuns, blocks_by_kind, by_kind, check_chains,
                                     check_ordered, common, extends, of_kind, shared_tokens,
                                     tokens)

SCALE = 0.2


SMALL = SmallRuns(generate, SCALE)  # each seed's run and first_seen, made once
_small, _first = SMALL.run, SMALL.first


def _new_from(r, first, i, j, head: int = 0) -> bool:
    """Request ``j``'s blocks after what it shares with request ``i`` (and after its first
    ``head`` segments) are all first seen."""
    segs = r.meta[j][3]
    cut = max(shared_tokens(r.meta[i][3], segs), tokens(segs[:head])) // BLOCK
    return all(first[b] == j for b in r.trace[j][cut:])


def test_deterministic_and_seeded():
    """Same seed, same trace; seed 1 has a major breaking event, seed 2 is a quiet day of
    small breaks only: they differ in structure, not just noise."""
    assert news_desk(1, 0.05) == news_desk(1, 0.05) != news_desk(2, 0.05)
    assert generate(3, 0.05).trace == news_desk(3, 0.05)
    a, b = _small(1).state, _small(2).state
    assert (a.scenario, b.scenario, generate(3, 0.05).state.scenario) == (
        "breaking", "quiet", "scheduled")
    assert [e.major for e in a.news].count(True) == 1 and not any(e.major for e in b.news)
    assert len(b.news) >= 4 and len(b.guide.versions) == 1 < len(a.guide.versions)
    for seed in (1, 2):
        check_ordered(_small(seed), KINDS)


@pytest.mark.parametrize("seed", [1, 2])
def test_sizes_and_span(seed):
    """At scale 0.2: 250K..800K blocks over two days, every walk finished; the breaking day
    asks more than the quiet one, and far more of it is editors' burst."""
    r = _small(seed)
    blocks = blocks_by_kind(r)
    assert 250_000 <= sum(blocks.values()) <= 800_000
    assert 44 * HOUR < r.times[-1] < END and 0 <= r.times[0] < 3 * HOUR
    s = r.state
    walks = [w for *_, w in s.runs + s.translations + s.checks] + [e.walk for e in s.editions]
    assert all(w.pos == len(w.items) for w in walks if r.times[w.sent[0]] < END - HOUR)
    if seed == 1:
        quiet = _small(2)
        assert sum(map(len, r.trace)) > sum(map(len, quiet.trace))
        assert len(of_kind(r, "breaking")) > 2 * len(of_kind(quiet, "breaking"))


def test_prefix_chains_are_well_formed():
    """A block id always follows the same parent; a request is the full blocks of its
    segments, the same segments always the same ids; two requests share exactly the blocks
    of the segments they start with."""
    check_chains(_small(1), 3)


@pytest.mark.parametrize("seed", [1, 2])
def test_wire_versions_make_later_blocks_new(seed):
    """Every wire version is triaged in order: system prompt, the memo as it stands, the
    version, the cue. A later version shares the head and its unchanged leading paragraphs;
    every block from the first changed one on is new."""
    r, first = _small(seed), _first(seed)
    s, renewed = r.state, 0
    for n, sent in by_kind(r, "wire", lambda m: m[1]).items():
        story = s.stories[n]
        assert [r.meta[i][2] for i in sent] == list(range(len(story.ops)))
        for i in sent:
            v = story.text.versions[r.meta[i][2]][1]
            assert r.meta[i][3] == [s.system["wire"], *s.memo.at(r.times[i]), *v, s.wire_cue]
        for i, j in itertools.pairwise(sent):
            assert _new_from(r, first, i, j, 1 + len(s.memo.at(r.times[j])))
            renewed += common(r.trace[i], r.trace[j]) < len(r.trace[i]) - 1
    assert renewed > 50


def test_headline_variants_share_the_story():
    """A headline run fires 1..8 variants within seconds over one version: the system
    prompt, the headline guide, the version, a distinct cue; they share all but the cue."""
    for seed in (1, 2):
        r = _small(seed)
        s = r.state
        for n, v, w in s.runs:
            head = [s.system["headline"], s.hed_guide, *s.stories[n].text.versions[v][1]]
            assert len(set(w.items)) == len(w.items) and s.stories[n].published <= r.times[
                w.sent[0]]
            assert r.times[w.sent[-1]] - r.times[w.sent[0]] <= CLICK[1] * len(w.items)
            for i, c in zip(w.sent, w.items):
                assert r.meta[i] == ("headline", n, v, [*head, s.cues[c]])
            for i, j in itertools.pairwise(w.sent):
                assert common(r.trace[i], r.trace[j]) >= tokens(head) // BLOCK
        assert sum(len(w.items) > 2 for *_, w in s.runs) > 30


def test_top_stories_are_translated_into_every_language():
    """A top story's version goes into each language edition in turn (the language's head,
    then the story); the breaking event's main story again and again as it rolls."""
    r = _small(1)
    s = r.state
    for n, v, w in s.translations:
        assert s.stories[n].top and w.items == list(range(len(s.langs)))
        for i, k in zip(w.sent, w.items):
            assert r.meta[i] == ("translate", n, k, [s.system["translate"], s.langs[k],
                                                     *s.stories[n].text.versions[v][1],
                                                     s.tr_cues[k]])
        for i, j in itertools.pairwise(w.sent):
            assert common(r.trace[i], r.trace[j]) == tokens([s.system["translate"]]) // BLOCK
    major = next(e for e in s.news if e.major)
    assert sum(n == major.story for n, _, _ in s.translations) >= 5


def test_fact_checks_reread_documents_and_archive():
    """A pass checks claim by claim over the same prompt (system prompt, source documents,
    archive chunks, the story); a later pass of the story re-reads the documents and the
    archive, new only from the story's first changed paragraph."""
    again = 0
    for seed in (1, 2):
        r, first = _small(seed), _first(seed)
        s = r.state
        passes: dict[int, list] = {}
        for n, p, w in s.checks:
            story = s.stories[n]
            docs = [s.system["factcheck"], *story.docs, *story.archive]
            assert story.docs and p == len(passes.setdefault(n, []))
            for i, c in zip(w.sent, w.items):
                assert r.meta[i][:3] == ("factcheck", n, p) and r.meta[i][3][-1] == c
                assert r.meta[i][3][:len(docs)] == docs
            for i, j in itertools.pairwise(w.sent):
                assert r.meta[i][3][:-1] == r.meta[j][3][:-1]
            for prev in passes[n]:
                assert common(r.trace[prev.sent[0]], r.trace[w.sent[0]]) >= tokens(docs) // BLOCK
                again += 1
            if passes[n]:
                assert _new_from(r, first, passes[n][-1].sent[-1], w.sent[0])
            passes[n].append(w)
    assert again >= 5


@pytest.mark.parametrize("seed", [1, 2])
def test_newsletters_walk_the_days_stories_in_rank_order(seed):
    """An edition at its hour walks its desk's most newsworthy published stories in rank
    order (a blurb each over the story as it stands), then assembles the blurbs."""
    r = _small(seed)
    s = r.state
    assert len(s.editions) == 2 * len(NEWSLETTERS)
    for e, ed in enumerate(s.editions):
        name, hour, count, desk = NEWSLETTERS[ed.letter]
        t0 = r.times[ed.walk.sent[0]]
        assert t0 % DAY == pytest.approx(hour * HOUR)
        assert 0 < len(ed.picks) <= count and len(ed.walk.sent) == len(ed.picks) + 1
        score = [s.stories[n].weight * 0.5 ** ((t0 - s.stories[n].published) / HALF_LIFE)
                 for n in ed.picks]
        assert score == sorted(score, reverse=True)
        assert all(desk is None or s.stories[n].desk == desk for n in ed.picks)
        head = [s.system["newsletter"], s.voices[ed.letter]]
        for k, (i, n) in enumerate(zip(ed.walk.sent, ed.picks)):
            assert r.meta[i] == ("newsletter", e, k, [*head, *s.stories[n].text.at(r.times[i]),
                                                      s.blurb_cue])
        last = ed.walk.sent[-1]
        assert r.meta[last] == ("newsletter", e, len(ed.picks), [*head, *ed.blurbs,
                                                                 s.letter_cue])


def test_live_blog_summaries_grow_entry_by_entry():
    """A summary holds the header, the recap and the window's entries; the next one extends
    it exactly while the window holds; past WINDOW tokens the oldest entries give way."""
    extended = compacted = 0
    for seed in (1, 3):
        r = _small(seed)
        s = r.state
        for b, blog in enumerate(s.blogs):
            for (i, k), (j, m) in itertools.pairwise(blog.sent):
                a, c = r.meta[i][3][:-1], r.meta[j][3][:-1]
                assert m > k and r.times[j] - r.times[i] >= SUMMARY[2]
                if c[:len(a)] == a:
                    assert common(r.trace[i], r.trace[j]) >= tokens(a) // BLOCK
                    extended += 1
                else:
                    compacted += 1
            for i, k in blog.sent:
                assert r.meta[i][:3] == ("liveblog", b, k)
                assert tokens(r.meta[i][3]) < WINDOW + 3000
    assert extended > 100 and compacted >= 1


def test_the_breaking_burst_hits_the_main_story():
    """Editors' requests crowd the hours after the major event: the system prompt, the
    guide as it stands (with the style note once added), the story as it stands; one-click
    actions on one version are the same prompt."""
    r = _small(1)
    s = r.state
    e, major = next((e, ev) for e, ev in enumerate(s.news) if ev.major)
    chats = [(n, c) for n, c in enumerate(s.chats) if c.kind == "breaking" and c.owner == e]
    near = [c for _, c in chats if r.times[c.sent[0]] - major.start < 5 * HOUR]
    assert len(near) > 0.6 * len(chats) > 20
    note = s.guide.versions[1][0]
    assert HOUR <= note - major.start <= 2 * HOUR
    same = Counter()
    for n, c in chats:
        assert c.story in (major.story, major.wire)
        for i in c.sent:
            segs = r.meta[i][3]
            assert segs[:1 + len(s.guide.at(r.times[i]))] == [s.chat_system["breaking"],
                                                               *s.guide.at(r.times[i])]
            assert (major.note in segs) == (r.times[i] >= note)
        if c.preset >= 0:
            i, t = c.sent[0], r.times[c.sent[0]]
            assert len(c.sent) == 1 and r.meta[i][3] == [
                s.chat_system["breaking"], *s.guide.at(t), *s.stories[c.story].text.at(t),
                s.presets[c.preset]]
            same[tuple(r.trace[i])] += 1
    assert sum(same.values()) > 10 and sum(k - 1 for k in same.values()) >= 1


@pytest.mark.parametrize("seed", [1, 2])
def test_reporter_chats_grow_their_history(seed):
    """A reporter's turn re-sends the desk prompt, the guide, the attachment and the history:
    it extends the last turn exactly unless the guide changed in between."""
    r = _small(seed)
    s, grown = r.state, 0
    for n, c in enumerate(s.chats):
        if c.kind != "chat":
            continue
        for i in c.sent:
            assert r.meta[i][3][0] == s.desk_system[c.owner]
        grown += extends(r, c.sent, lambda i, j: s.guide.at(r.times[i]) == s.guide.at(
            r.times[j]))
    assert grown > 60


def test_readers_questions_retrieve_the_topic():
    """A reader's question holds the bot's prompt and chunks of its topic's archive or
    stories; a follow-up extends the last turn exactly."""
    r = _small(1)
    s, grown = r.state, 0
    for n, c in enumerate(s.chats):
        if c.kind != "ask":
            continue
        mine = set(s.archive[c.owner]) | {p for st in s.stories if st.topic == c.owner
                                          for _, v in st.text.versions for p in v}
        assert set(c.fixed) <= mine
        assert r.meta[c.sent[0]][3][:1 + len(c.fixed)] == [s.chat_system["ask"], *c.fixed]
        grown += extends(r, c.sent, lambda i, j: True)
    assert grown > 10


@pytest.mark.parametrize("seed", [1, 2])
def test_comments_are_moderated_once(seed):
    """A comment is the policy, the story's headline and summary, the comment, the cue:
    every block from the comment on is new; comments pile onto the breaking event."""
    r, first = _small(seed), _first(seed)
    s = r.state
    cut = tokens([s.policy]) // BLOCK
    for i in of_kind(r, "moderate"):
        n, segs = r.meta[i][1], r.meta[i][3]
        assert segs[0] == s.policy and segs[-1] == s.mod_cue
        assert s.stories[n].published <= r.times[i] and segs[1] in [d for _, d in s.stories[
            n].deks]
        assert all(first[b] == i for b in r.trace[i][tokens(segs[:2]) // BLOCK:])
        assert r.trace[i][:cut] == r.trace[of_kind(r, "moderate")[0]][:cut]
    if seed == 1:
        major = next(e for e, ev in enumerate(s.news) if ev.major)
        on = [i for i in of_kind(r, "moderate") if s.stories[r.meta[i][1]].event == major]
        assert len(on) > 0.1 * len(of_kind(r, "moderate"))
