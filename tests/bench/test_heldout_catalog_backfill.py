"""bench/heldout_catalog_backfill.py: the held-out shape catalog_backfill has the properties its
docstring names (bench.heldout replays it as one of SHAPES). Structure only: no hit rate."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from bench.heldout import SHAPES
from bench.heldout_catalog_backfill import KINDS, catalog_backfill, generate
from bench.heldout_catalog_jobs import REC_HOURS, RETRY
from bench.heldout_catalog_parts import DAY, DESCRIPTION, HOUR, MINUTE
from bench.heldout_fewshot import BLOCK
from tests.bench.trace_parts import (SmallRuns, blocks_by_kind, check_chains, check_ordered,
                                     common, shared_tokens, tokens)


SMALL = SmallRuns(generate, 0.2)  # each seed's run and first_seen, made once
_small, _first_seen = SMALL.run, SMALL.first


@pytest.fixture(scope="module")
def run():
    return _small(1)


def _record(r, k, i):
    """Item ``k``'s record as it stood when request ``i`` was sent."""
    return r.catalog.record(k, r.times[i])


def test_registered_deterministic_and_seeded():
    assert SHAPES["catalog_backfill"] is catalog_backfill
    assert catalog_backfill(1, 0.05) == catalog_backfill(1, 0.05) != catalog_backfill(2, 0.05)
    assert generate(3, 0.05).trace == catalog_backfill(3, 0.05)
    for seed in (1, 2):
        check_ordered(_small(seed), KINDS)
    assert _small(1).trace[:50] != _small(2).trace[:50]


@pytest.mark.parametrize("seed", [1, 2])
def test_sizes_and_span(seed):
    """At scale 0.2: 250K..450K blocks, a day and a bit, two passes that make 35..65 % of
    the blocks, the first pass alone more distinct blocks than a 16000-block pool holds."""
    r = _small(seed)
    blocks = blocks_by_kind(r)
    total = sum(blocks.values())
    assert 250_000 <= total <= 450_000
    assert 0.35 < blocks["backfill"] / total < 0.65
    assert 24 * HOUR < r.times[-1] < 30 * HOUR
    first = {b for j in r.passes[0].sent for b in r.trace[j]}
    assert len(first) > 16000


def test_prefix_chains_are_well_formed(run):
    """A block id always follows the same parent, and each request is the full blocks of its
    segments: two requests share exactly the blocks of the segments they start with."""
    check_chains(run, 5)


@pytest.mark.parametrize("seed", [1, 2])
def test_the_first_pass_is_every_record_once_sharing_nothing(seed):
    """The first night's pass sends every live record once in catalog order, the record then
    the cue (no system prompt); no two of its requests share a first block and none of its
    blocks was requested before it."""
    r, first = _small(seed), _first_seen(seed)
    p = r.passes[0]
    start = r.times[p.sent[0]]
    assert 0.5 * HOUR <= start <= 1.5 * HOUR and p.night == 0
    assert p.items == r.catalog.order(start) and len(set(p.items)) == len(p.items)
    assert len(p.sent) == len(p.items) and p.sent == sorted(p.sent)
    for k, j in zip(p.items, p.sent):
        assert r.meta[j][:3] == ("backfill", 0, k)
        assert r.meta[j][3] == [*_record(r, k, j), r.cue]
        assert all(first[b] == j for b in r.trace[j])
    assert len({r.trace[j][0] for j in p.sent}) == len(p.sent)
    assert sum(m[0] == "backfill" and m[1] == 0 for m in r.meta) == len(p.items)


@pytest.mark.parametrize("seed", [1, 2])
def test_failed_batches_are_sent_again_exactly(seed):
    """The first night's failed batches (2..5) come back whole, in order, 10..45 minutes
    after they ended, each record's chain repeated exactly."""
    r = _small(seed)
    p = r.passes[0]
    assert 2 <= len(p.failed) <= 5
    again = [p.sent.index(orig) for _, orig in p.retries]
    assert {n // p.batch for n in again} == p.failed
    for b in p.failed:
        batch = [n for n in again if n // p.batch == b]
        assert batch == list(range(b * p.batch, min(len(p.sent), (b + 1) * p.batch)))
    for j, orig in p.retries:
        assert r.trace[j] == r.trace[orig] and r.meta[j][3] == r.meta[orig][3]
        assert r.meta[j][:3] == ("retry", 0, r.meta[orig][2])
        last = p.sent[min(len(p.sent), (p.sent.index(orig) // p.batch + 1) * p.batch) - 1]
        assert r.times[j] - r.times[last] >= RETRY[0] * MINUTE


@pytest.mark.parametrize("seed", [1, 2])
def test_the_sweep_resends_records_edited_after_the_pass(seed):
    """The change feed's sweep after each pass re-sends exactly the live records edited after
    the pass sent them, as they stand: same blocks up to the edited section, new after."""
    r = _small(seed)
    for p in r.passes:
        assert p.sweep
        when = r.times[p.sweep[0][0]]
        sent = dict(zip(p.items, p.sent))
        edited = {k for t, k, _, why in r.edits
                  if k in sent and r.times[sent[k]] < t < when and why != "launch"}
        edited = {k for k in edited if r.catalog.items[k].live(when)}
        assert [k for _, k in p.sweep] == [k for k in p.items if k in edited]
        for j, k in p.sweep:
            old, new = r.meta[sent[k]][3], r.meta[j][3]
            assert r.meta[j][:3] == ("delta", p.night, k) and new == [*_record(r, k, j), r.cue]
            assert old != new
            assert common(r.trace[j], r.trace[sent[k]]) == shared_tokens(old, new) // BLOCK


@pytest.mark.parametrize("seed", [1, 2])
def test_the_second_pass_resends_unchanged_records_and_edits_from_the_edit_on(seed):
    """The next night's pass: unchanged records repeat their first-night chain exactly;
    an edited one shares it up to the first edited section, and (unless the sweep sent that
    version) every block from there on is new; launched items are in it, retired ones not."""
    r, first = _small(seed), _first_seen(seed)
    p0, p1 = r.passes
    assert DAY < r.times[p1.sent[0]] <= DAY + 1.5 * HOUR
    assert p1.items == r.catalog.order(r.times[p1.sent[0]])
    before = dict(zip(p0.items, p0.sent))
    swept = {k for _, k in p0.sweep}
    same = changed = 0
    for k, j in zip(p1.items, p1.sent):
        if k not in before:
            assert r.catalog.items[k].added > 0
            continue
        i = before[k]
        old, new = r.meta[i][3], r.meta[j][3]
        if old == new:
            assert r.trace[j] == r.trace[i]
            same += 1
            continue
        cut = shared_tokens(old, new) // BLOCK
        assert common(r.trace[i], r.trace[j]) == cut < len(r.trace[j])
        edited = {s for t, x, s, _ in r.edits if x == k and r.times[i] < t < r.times[j]}
        assert min(edited) == next(n for n, (a, b) in enumerate(zip(old, new)) if a != b)
        if k not in swept:
            assert all(first[b] == j for b in r.trace[j][cut:])
        changed += 1
    assert same > 0.6 * len(p0.items) and changed > 50
    assert set(p0.items) - set(p1.items) and set(p1.items) - set(p0.items)


def test_chats_resend_their_history(run):
    """A chat turn is the system prompt, the policy pages as they stand, the history (the
    earlier messages, looked-up records and replies) and the new message with its lookups;
    while the pages stay the same, a turn's chain extends the previous turn's."""
    def head(i):
        return [run.system["chat"], *run.policies.at(run.times[i])]

    turns, away = Counter(), 0
    for c, chat in enumerate(run.chats):
        turns[len(chat.sent)] += 1
        for n, (i, j) in enumerate(itertools.pairwise(chat.sent)):
            x, y = run.meta[i][3], run.meta[j][3]
            assert run.meta[j][:3] == ("chat", c, n + 1)
            hx, hy = len(head(i)), len(head(j))
            assert x[:hx] == head(i) and y[:hy] == head(j)
            assert y[hy:hy + len(x) - hx] == x[hx:] and len(y) > len(x) - hx + hy + 1
            if hx == hy and x[:hx] == y[:hy]:
                assert run.trace[j][:len(run.trace[i])] == run.trace[i]
            away += run.times[j] - run.times[i] > 5 * MINUTE
        for i, items in zip(chat.sent, chat.looked):
            segs = run.meta[i][3]
            for k in items:
                rec = _record(run, k, i)
                assert any(segs[n:n + len(rec)] == rec for n in range(len(segs)))
    assert turns[1] and sum(v for n, v in turns.items() if n >= 4) and away >= 5


def test_a_policy_update_makes_later_chat_blocks_new():
    """After a policy page changes, the next chat turn holds no block from that page on that
    was requested before."""
    checked = 0
    for seed in (1, 2):
        r, first = _small(seed), _first_seen(seed)
        for (_, old), (t, new) in itertools.pairwise(r.policies.versions):
            d = next(n for n, (a, b) in enumerate(zip(old, new)) if a != b)
            j = next(i for i, m in enumerate(r.meta) if m[0] == "chat" and r.times[i] >= t)
            cut = tokens([r.system["chat"], *new[:d]]) // BLOCK
            assert all(first[b] == j for b in r.trace[j][cut:])
            checked += 1
    assert checked >= 1


def test_merchandisers_resend_each_item_record(run):
    """A rewrite prompt is the system prompt, the style guide, the group's brief, the item's
    record as it stands and the instruction; a regenerated draft repeats the prompt, a revised
    one extends it; an accepted rewrite is the item's description from then on. Groups are
    consecutive items of one department."""
    accepted, instructions = 0, set()
    for s, rw in enumerate(run.rewrites):
        if not rw.sent:
            continue
        day = run.times[rw.sent[0][0]] // DAY * DAY  # the groups are picked at midnight
        dept = [x for x in run.catalog.depts[rw.dept] if run.catalog.items[x].added < day]
        at = dept.index(rw.items[0])
        assert dept[at:at + len(rw.items)] == rw.items
        prev = None
        for i, k, step in rw.sent:
            segs = run.meta[i][3]
            assert run.meta[i][:3] == ("merch", s, k)
            if step == "draft":
                rec = _record(run, k, i)
                assert segs[:-1] == [run.system["merch"], *run.guide, rw.brief, *rec]
                instructions.add(segs[-1])
            elif step == "regenerate":
                assert run.trace[i] == run.trace[prev]
            else:
                assert segs[:len(run.meta[prev][3])] == run.meta[prev][3]
            prev = i
        for k, draft in rw.accepted:
            assert draft in [v[DESCRIPTION] for _, v in run.catalog.items[k].text.versions]
            accepted += 1
    assert accepted >= 10 and len(instructions) == 1
    assert {step for rw in run.rewrites for *_, step in rw.sent} == {"draft", "regenerate",
                                                                     "feedback"}


def test_recommendations_compare_an_anchor_with_its_neighbours(run):
    """A run's pairs: system prompt, the anchor's record, a neighbour's from its department,
    the question; an anchor's pairs are back to back and share the chain through its record."""
    hours = set()
    for rec in run.recs:
        for (a, c, i), (a2, _, j) in itertools.pairwise(rec.pairs):
            if a == a2:
                head = [run.system["rec"], *_record(run, a, i)]
                assert common(run.trace[i], run.trace[j]) >= tokens(head) // BLOCK
        for a, c, i in rec.pairs:
            head = [run.system["rec"], *_record(run, a, i), *_record(run, c, i)]
            assert run.meta[i][3][:-1] == head and a != c
            assert run.catalog.items[a].dept == run.catalog.items[c].dept
            hours.add(int(run.times[rec.pairs[0][2]] / HOUR) % 24)
    assert hours == set(REC_HOURS)
