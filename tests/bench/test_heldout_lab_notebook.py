"""bench/heldout_lab_notebook.py: the held-out shape lab_notebook has the properties its docstring
names. Structure only: no policy, no hit rate."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from bench.heldout_fewshot import BLOCK
from bench.heldout_lab_desk import GRANT_BUDGET
from bench.heldout_lab_jobs import QC_AT
from bench.heldout_lab_notebook import KINDS, generate, lab_notebook
from bench.heldout_lab_world import DAY, END, HOUR, LAYOUTS
from tests.bench.trace_parts import (SmallRuns, blocks_by_kind, chats_of, check_chains,
                                     check_ordered, common, extends, of_kind, shared_tokens,
                                     tokens)

SCALE = 0.2
SMALL = SmallRuns(generate, SCALE)  # each seed's run and first_seen, made once
_small, _first = SMALL.run, SMALL.first


def _new_from(r, first, i, prefix) -> bool:
    """Every block of request ``i`` after the segments ``prefix`` is new there."""
    return all(first[b] == i for b in r.trace[i][tokens(prefix) // BLOCK:])


def test_deterministic_and_seeded():
    """Same seed, same trace; seeds 1..4 have the four layouts, which differ in structure
    (teams, instruments, whose SOPs); every kind is there, in time order."""
    assert lab_notebook(1, 0.05) == lab_notebook(1, 0.05) != lab_notebook(2, 0.05)
    assert generate(3, 0.05).trace == lab_notebook(3, 0.05)
    states = [_small(seed).state for seed in (1, 2, 3, 4)]
    assert [s.layout for s in states] == list(LAYOUTS)
    for s in states:
        lo, hi = s.layout.teams
        assert lo <= len(s.teams) <= hi and s.layout.units[0] <= len(s.units)
        assert s.units[:2] == ["plate_reader", "lcms"]
    assert all(t.sops and t.digest for t in states[1].teams)  # silo: every team its own
    assert all(not t.sops and t.digest is None for t in states[2].teams)  # startup: shared
    for seed in (1, 2, 3, 4):
        check_ordered(_small(seed), KINDS)


@pytest.mark.parametrize("seed", [1, 2])
def test_sizes_span_and_the_lab_day(seed):
    """At scale 0.2: 200K..500K blocks over two days, no kind over half; the QC walks done;
    the scientists' chats follow the lab's day."""
    r = _small(seed)
    blocks = blocks_by_kind(r)
    assert 200_000 <= sum(blocks.values()) <= 500_000
    assert max(blocks.values()) < 0.5 * sum(blocks.values())
    assert 44 * HOUR < r.times[-1] < END and r.times[0] < 10 * HOUR
    assert all(w.pos == len(w.items) == len(w.sent) for w in r.state.qcs)
    hours = Counter(int(r.times[c.sent[0]] / HOUR % 24) for _, c in chats_of(r, "ask"))
    assert sum(hours[h] for h in range(9, 17)) > 5 * sum(hours[h] for h in range(0, 6))
    check_chains(r, 3 if seed == 1 else 7)


@pytest.mark.parametrize("seed", [2, 3])
def test_chats_sit_behind_the_lab_prompt_and_the_teams_sop_index(seed):
    """A team's chat turns send the lab system prompt, the lab-wide index and the team's own
    as they stand; with one shared library (startup) every team sends the same head, with
    team libraries (silo) teams differ after the lab-wide index. A protocol revision makes
    the index new from its row on."""
    r, first = _small(seed), _first(seed)
    s = r.state
    heads = {}
    for n, chat in chats_of(r, "ask"):
        for i in chat.sent:
            s.now = r.times[i]
            head = [s.lab_system, *s.digest_of(chat.team)]
            assert r.meta[i][3][:len(head)] == head
            heads.setdefault(tuple(head), set()).add(chat.team)
    s.now = END  # digest_of reads the clock; leave it where the run ended
    for n, chat in chats_of(r, "protocol") + chats_of(r, "lit") + chats_of(r, "grant"):
        assert all(r.meta[i][3][0] == s.lab_system for i in chat.sent)
    if s.layout.name == "startup":
        assert max(len(teams) for teams in heads.values()) == len(s.teams) > 1
    else:
        assert all(len(teams) == 1 for teams in heads.values())
    assert s.sop_edits
    for t, p, _, row in s.sop_edits:
        team = s.sops[p].team
        index = s.lab_digest if team < 0 else s.teams[team].digest
        later = [i for n, c in chats_of(r, "ask") if team < 0 or c.team == team
                 for i in c.sent if r.times[i] > t]
        if later:
            lab = s.lab_digest.at(t) if team >= 0 else []
            assert _new_from(r, first, min(later), [s.lab_system, *lab, *index.at(t)[:row]])


def test_protocol_lookups_reread_the_standard_ones():
    """Lookups send the protocol as it stands; a few standard protocols take most of them;
    the share in the lab-wide library follows the layout; a revision keeps the blocks before
    the rewritten section and makes the rest new."""
    shares = {}
    for seed in (1, 2, 3):
        r, first = _small(seed), _first(seed)
        s = r.state
        reads = Counter()
        for n, chat in chats_of(r, "protocol"):
            for i in chat.sent:
                head = [s.lab_system, s.chat_system["protocol"],
                        *s.sops[chat.owner].text.at(r.times[i])]
                assert r.meta[i][3][:len(head)] == head
            reads[chat.owner] += 1
        top = sum(c for _, c in reads.most_common(8))
        assert top > 0.3 * sum(reads.values()) and reads.most_common(1)[0][1] >= 5
        shares[s.layout.name] = sum(c for p, c in reads.items() if s.sops[p].team < 0) / sum(
            reads.values())
        for t, p, k, _ in s.sop_edits:
            after = [c.sent[0] for _, c in chats_of(r, "protocol")
                     if c.owner == p and r.times[c.sent[0]] > t]
            if after:
                text = s.sops[p].text.at(t)
                assert _new_from(r, first, after[0], [s.lab_system, s.chat_system["protocol"],
                                                      *text[:k]])
    assert shares["silo"] < shares["core"] < shares["startup"] == 1.0


@pytest.mark.parametrize("seed", [1, 4])
def test_runs_are_analysed_on_finish_with_bursts_and_followups(seed):
    """A run is read once it finishes (guide, whole log); a sample sheet's burst follows
    within seconds, each sharing the head and header, new from the sample on (the first
    sample is the log's first block too); a follow-up
    chat extends the run's request exactly, minutes after or the next morning."""
    r, first = _small(seed), _first(seed)
    s = r.state
    runs = {r.meta[i][1]: i for i in of_kind(r, "run")}
    for q, i in runs.items():
        run = s.runs[q]
        assert r.times[i] == run.finish and r.meta[i][3] == [*s.run_head(q), *run.log,
                                                             s.cue["run"]]
    assert s.bursts
    for q, sent in s.bursts:
        head = [*s.run_head(q), s.runs[q].log[0]]
        assert len(sent) == len(s.runs[q].samples) >= 8
        assert r.times[sent[-1]] - r.times[runs[q]] <= 1.5 * len(sent)
        for k, i in enumerate(sent):
            assert r.meta[i][:3] == ("burst", q, k) and r.meta[i][3][:len(head)] == head
            a, b = r.meta[i][3], r.meta[runs[q]][3]
            assert common(r.trace[i], r.trace[runs[q]]) == shared_tokens(a, b) // BLOCK
            assert k == 0 or _new_from(r, first, i, head)
    follows = chats_of(r, "followup")
    assert len(follows) >= 5
    for n, chat in follows:
        i, j = runs[chat.owner], chat.sent[0]
        assert r.trace[j][:len(r.trace[i])] == r.trace[i]
        wait, hour = r.times[j] - r.times[i], r.times[j] / HOUR % 24
        assert 0 < wait <= 1800 and 8 <= hour < 19 or 8 <= hour < 10


@pytest.mark.parametrize("seed", [1, 2])
def test_the_nightly_qc_walks_every_run_of_the_day(seed):
    """Each day at 22:30..23:30 one walk takes every run finished since the last, unit by
    unit in finish order: the QC system prompt, the policy, the type's spec, the log."""
    r = _small(seed)
    s = r.state
    assert len(s.qcs) == 2
    since = 0.0
    for day, w in enumerate(s.qcs):
        t = r.times[w.sent[0]]
        assert QC_AT[0] <= (t - day * DAY) / HOUR < QC_AT[1]
        todo = [q for q, run in enumerate(s.runs) if since <= run.finish < t]
        assert sorted(w.items) == sorted(todo) and len(todo) >= 5
        assert w.items == sorted(w.items, key=lambda q: (s.runs[q].unit, s.runs[q].finish))
        for i, q in zip(w.sent, w.items):
            assert r.meta[i] == ("qc", day, q, s.qc_prompt(q))
        since = t


def test_notebook_entries_grow_and_edits_make_the_rest_new():
    """An entry's requests fall on its day; each later one extends the last (its instruction
    aside) unless an earlier section was rewritten, which keeps only the blocks before it;
    a closed entry joins its project's archive."""
    grown = edited = 0
    for seed in (1, 2):
        r, first = _small(seed), _first(seed)
        s = r.state
        for e, entry in enumerate(s.entries):
            assert all(int(r.times[i] // DAY) == entry.day for i in entry.sent)
            for k, (i, j) in enumerate(itertools.pairwise(entry.sent), 1):
                a, b = r.meta[i][3], r.meta[j][3]
                assert common(r.trace[i], r.trace[j]) == shared_tokens(a, b) // BLOCK
                if k in entry.edits:
                    n = next(x for x, (u, v) in enumerate(zip(a, b)) if u != v)
                    assert n < len(a) - 1 and _new_from(r, first, j, b[:n])
                    edited += 1
                else:
                    assert b[:len(a) - 1] == a[:-1]
                    grown += 1
            if not entry.left:
                project = s.teams[entry.team].projects[entry.project]
                assert any(segs[0] == entry.sections[0] for _, segs in project.entries)
    assert grown >= 50 and edited >= 3


def test_inventory_versions_make_later_blocks_new():
    """Inventory questions send the table as the LIMS last synced it; the first question
    on a new version is new from the first rewritten row on."""
    checked = 0
    for seed in (1, 2):
        r, first = _small(seed), _first(seed)
        s = r.state
        versions = s.inventory.versions
        assert len(s.syncs) == len(versions) - 1 >= 10
        for n, chat in chats_of(r, "inventory"):
            for i in chat.sent:
                table = s.inventory.at(r.times[i])
                assert r.meta[i][3][:2 + len(table)] == [s.lab_system,
                                                         s.chat_system["inventory"], *table]
        firsts = {}
        for i in of_kind(r, "inventory"):
            firsts.setdefault(max(k for k, x in enumerate(versions) if x[0] <= r.times[i]), i)
        for v, i in firsts.items():
            if v:
                rows = versions[v][1][:s.syncs[v - 1][1]]
                head = [s.lab_system, s.chat_system["inventory"], *rows]
                assert _new_from(r, first, i, head)
                checked += 1
    assert checked >= 3


def test_lit_papers_plate_maps_and_grant_sessions():
    """Hot papers are read far more than the rest and the preprint only after it lands; a
    revised plate map keeps the rows before the first rewritten one; a grant session sends
    the project's aims and its latest entries (oldest first, within the budget) and each
    turn extends the last."""
    hot = cold = revised = grants = 0
    for seed in (1, 2, 4):
        r, first = _small(seed), _first(seed)
        s = r.state
        papers = Counter(p for _, c in chats_of(r, "lit") for p in c.fixed)
        hot += sum(papers[s.papers[k]] for k in s.hot)
        cold += sum(papers.values()) / len(s.papers)
        t, k = s.preprint
        lit = [(r.times[c.sent[0]], c.fixed) for _, c in chats_of(r, "lit")]
        assert any(s.papers[k] in f for w, f in lit) and all(w > t for w, f in lit
                                                             if s.papers[k] in f)
        for n, when, row in s.remaps:
            chat = s.chats[n]
            i = chat.sent[1]
            head = [s.lab_system, s.chat_system["platemap"], s.teams[chat.team].conventions]
            assert _new_from(r, first, i, [*head, *chat.plate.versions[0][1][:row]])
            revised += 1
        for n, chat in chats_of(r, "grant"):
            project = next(p for p in s.teams[chat.team].projects if p.aims == chat.fixed[0])
            entries = [x for w, segs in project.entries for x in segs
                       if w <= r.times[chat.sent[0]]]
            assert 0 < tokens(chat.fixed[1:]) <= GRANT_BUDGET
            assert chat.fixed[1:] == entries[len(entries) - len(chat.fixed) + 1:]
            grants += extends(r, chat.sent, lambda i, j: True)
    assert hot > 4 * cold and revised >= 5 and grants >= 5
