"""bench/heldout_pv_intake.py: the held-out shape pv_intake has the properties its docstring
names. Structure only: no policy, no hit rate."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from bench.heldout import SHAPES
from bench.heldout_fewshot import BLOCK
from bench.heldout_pv_cases import DUP, LIT_HOUR
from bench.heldout_pv_desk import CHATS, OFFICE_HOURS
from bench.heldout_pv_intake import KINDS, generate, pv_intake
from bench.heldout_pv_world import DAY, END, HOUR
from tests.bench.trace_parts import (SmallRuns, blocks_by_kind, check_chains, check_full_blocks,
                                     check_ordered, common, extends, of_kind, shared_tokens,
                                     tokens)
from tests.bench.trace_parts import chats_of

SCALE = 0.2
SMALL = SmallRuns(generate, SCALE)  # each seed's run and first_seen, made once
_small, _first = SMALL.run, SMALL.first


def test_deterministic_and_seeded():
    """Same seed, same trace; seeds differ in structure (the products under signal review,
    the PSUR projects, the label updates), not just in noise; requests are non-empty and in
    time order, and every kind is there."""
    assert SHAPES["pv_intake"] is pv_intake  # registered in bench.heldout
    assert pv_intake(1, 0.05) == pv_intake(1, 0.05) != pv_intake(2, 0.05)
    assert generate(3, 0.05).trace == pv_intake(3, 0.05)
    a, b = _small(1).state, _small(2).state
    assert (a.signals, [p for p, _ in a.psurs]) != (b.signals, [p for p, _ in b.psurs])
    assert a.label_updates != b.label_updates
    for seed in (1, 2):
        check_ordered(_small(seed), KINDS)


@pytest.mark.parametrize("seed", [1, 2])
def test_sizes_and_span(seed):
    """At scale 0.2: 250K..500K blocks over two days, intake the largest kind; every
    literature walk finished."""
    r = _small(seed)
    blocks = blocks_by_kind(r)
    assert 250_000 <= sum(blocks.values()) <= 500_000
    assert max(blocks, key=blocks.__getitem__) == "intake"
    assert 44 * HOUR < r.times[-1] < END and r.times[0] < 2 * HOUR
    assert all(w.pos == len(w.items) == len(w.sent) for w in r.state.walks)


def test_prefix_chains_are_well_formed():
    """A block id always follows the same parent; a request is the full blocks of its
    segments, the same segments always the same ids; two requests share exactly the blocks
    of the segments they start with."""
    check_chains(_small(1), 3)
    check_full_blocks(_small(2))


@pytest.mark.parametrize("seed", [1, 2])
def test_intake_extracts_then_codes_over_one_head(seed):
    """Step 0 (extraction) and step 1 (coding, over the extraction) send the system prompt,
    the guide as it stands, the area's excerpt and the source; step 1 follows within
    minutes and re-sends step 0 up to its cue; every block from the source on is new."""
    r, first = _small(seed), _first(seed)
    s = r.state
    for c, case in enumerate(s.cases):
        if len(case.outputs) < 2:
            continue
        i, j = case.sent[:2]
        area = s.products[case.product].area
        head = [s.system["intake"], *s.guide.at(r.times[i]), s.excerpts[area], case.source]
        assert r.meta[i] == ("intake", c, 0, [*head, s.cue["extract"]])
        assert r.meta[j][:3] == ("intake", c, 1) and r.meta[j][3][-2] == case.outputs[0]
        assert r.times[i] == case.time and 0 < r.times[j] - r.times[i] < 5 * 60
        assert common(r.trace[i], r.trace[j]) >= tokens(head) // BLOCK
        cut = tokens(head[:-1]) // BLOCK
        assert all(first[b] == i for b in r.trace[i][cut + 1:])


def test_a_guide_update_makes_later_intake_blocks_new():
    """After the coding guide's update, intake shares the old prompts' blocks only up to the
    changed section; every block after that is new after the update."""
    checked = 0
    for seed in (1, 2, 3, 4):
        r, first = _small(seed), _first(seed)
        s = r.state
        if s.guide_update is None:
            continue
        t, k = s.guide_update
        old, new = s.guide.versions[0][1], s.guide.versions[1][1]
        before = [i for i in of_kind(r, "intake") if r.times[i] < t]
        after = [i for i in of_kind(r, "intake") if r.times[i] >= t]
        cut = tokens([s.system["intake"], *old[:k]]) // BLOCK
        assert before and after and old[:k] == new[:k] and new[k] not in old
        for i in after:
            assert r.meta[i][3][1:1 + len(new)] == new
            assert common(r.trace[before[-1]], r.trace[i]) <= cut + 1
            assert all(first[b] >= after[0] for b in r.trace[i][cut + 1:])
            checked += 1
    assert checked >= 20


@pytest.mark.parametrize("seed", [1, 2])
def test_followups_reread_the_original_source(seed):
    """A follow-up, hours after the case, re-sends the intake head (the source included)
    with the new document and a cue: it shares step 0's blocks up to the source."""
    r = _small(seed)
    s = r.state
    found = 0
    for i in of_kind(r, "followup"):
        _, c, step, segs = r.meta[i]
        case = s.cases[c]
        assert step == 2 and segs[-2] == s.followups[c] and segs[-3] == case.source
        assert r.times[i] - case.time >= HOUR
        assert common(r.trace[case.sent[0]], r.trace[i]) == shared_tokens(
            r.meta[case.sent[0]][3], segs) // BLOCK
        found += 1
    assert found >= 5


@pytest.mark.parametrize("seed", [1, 2])
def test_duplicate_checks_hold_the_products_earlier_cases(seed):
    """The duplicate check follows coding: the system prompt, DUP[0]..DUP[1] candidates of
    the same product (prior narratives, then earlier in-trace cases' extractions), the new
    case's extraction, the cue."""
    r = _small(seed)
    s = r.state
    mixed = 0
    for i in of_kind(r, "dupcheck"):
        _, c, step, segs = r.meta[i]
        case, cands = s.cases[c], s.dups[c]
        assert step == 3 and r.times[i] > r.times[case.sent[1]]
        assert DUP[0] <= len(cands) <= DUP[1]
        assert all(x < c and s.cases[x].product == case.product for k, x in cands if k == "case")
        assert segs == [s.system["dupcheck"], *(s.candidate_text(case.product, x) for x in cands),
                        case.outputs[0], s.cue["dupcheck"]]
        mixed += len({k for k, _ in cands}) == 2
    assert mixed >= 20


@pytest.mark.parametrize("seed", [1, 2])
def test_literature_walks_screen_each_protocols_abstracts(seed):
    """Each day's walk starts at LIT_HOUR UTC over the products whose weekly search runs that
    day, abstract by abstract behind the product's protocol; a flagged abstract's extraction
    follows and extends the screen exactly."""
    r = _small(seed)
    s = r.state
    flagged = total = 0
    for w in s.walks:
        t = r.times[w.sent[0][0]] - w.day * DAY
        assert LIT_HOUR[0] * HOUR <= t < LIT_HOUR[1] * HOUR
        for (p, abstract), sent in zip(w.items, w.sent):
            assert s.products[p].weekday == w.day + 1
            head = [s.system["literature"], s.products[p].protocol]
            assert r.meta[sent[0]][3] == [*head, abstract, s.cue["screen"]]
            if len(sent) == 2:
                assert r.trace[sent[1]][:len(r.trace[sent[0]])] == r.trace[sent[0]]
                flagged += 1
            total += 1
    assert total >= 100 and 0.04 < flagged / total < 0.25


def test_serious_cases_get_a_narrative_chat_on_shift():
    """Each serious case coded early enough gets one narrative chat, opened at least 0.3 h
    after its coding in staffed hours; the head is fixed, so each turn extends the last."""
    turns = 0
    for seed in (1, 2):
        r = _small(seed)
        s = r.state
        chats = {c.owner: c for _, c in chats_of(r, "narrative")}
        assert all(s.cases[c].serious for c in chats)
        for c, chat in chats.items():
            t = r.times[chat.sent[0]]
            assert t - r.times[s.cases[c].sent[1]] >= 0.3 * HOUR
            assert OFFICE_HOURS[int(t // HOUR) % 24] >= 0.3
            assert r.meta[chat.sent[0]][3][2:5] == [s.cases[c].source, *s.cases[c].outputs]
            turns += extends(r, chat.sent, lambda i, j: True)
        late = [c for c, case in enumerate(s.cases) if case.serious and len(case.outputs) == 2
                and case.time < END - DAY]
        assert set(late) <= set(chats) and len(chats) >= 10
    assert turns >= 20


def test_psur_sessions_reread_the_listing():
    """PSUR drafting sessions send the guidance, the product's label as it stands and the
    project's whole line listing: two sessions share that head's blocks when the label did
    not change between them."""
    shared = 0
    for seed in (1, 2, 3, 4):
        r = _small(seed)
        s = r.state
        for n, (p, listing) in enumerate(s.psurs):
            firsts = [c.sent[0] for _, c in chats_of(r, "psur") if c.owner == n]
            for i in firsts:
                head = [s.chat_system["psur"], s.psur_guide, *s.products[p].label.at(r.times[i]),
                        *listing]
                assert r.meta[i][3][:len(head)] == head
            for i, j in itertools.pairwise(firsts):
                if r.meta[i][3][2:-1] == r.meta[j][3][2:-1]:
                    assert common(r.trace[i], r.trace[j]) >= tokens(r.meta[i][3][:-1]) // BLOCK
                    shared += 1
    assert shared >= 4


def test_signal_chats_see_the_nightly_dossier():
    """Signal chats are about the products under review: the label, then the dossier as it
    stands; a chat's turns on one dossier extend exactly, and across the 01:00 UTC refresh
    they share only up to the table, which is new."""
    same = crossed = 0
    for seed in (1, 2):
        r, first = _small(seed), _first(seed)
        s = r.state
        for n, chat in chats_of(r, "signal"):
            assert chat.owner in s.signals
            for i in chat.sent:
                dossier = s.dossiers[chat.owner].at(r.times[i])
                head = [s.chat_system["signal"], *s.products[chat.owner].label.at(r.times[i]),
                        *dossier]
                assert r.meta[i][3][:len(head)] == head
            same += extends(r, chat.sent, lambda i, j: r.meta[i][3][:-1] == r.meta[j][3][
                :len(r.meta[i][3]) - 1])
        for p, d in s.dossiers.items():
            assert d.versions[1][1][0] == d.versions[0][1][0] != d.versions[1][1][1]
            later = [i for i in of_kind(r, "signal") if r.times[i] >= d.versions[1][0]]
            crossed += sum(first[r.trace[i][-1]] == i for i in later)
    assert same >= 10 and crossed >= 5


def test_label_updates_make_later_blocks_new():
    """After a product's label update every prompt carrying its label carries the new
    version, sharing the old one's sections only before the first changed one."""
    checked = 0
    for seed in (1, 2, 3, 4):
        r = _small(seed)
        s = r.state
        for p, t, k in s.label_updates:
            old, new = s.products[p].label.versions[0][1], s.products[p].label.versions[1][1]
            assert old[:k] == new[:k] and not set(old[k:]) & set(new[k:])
            for i, m in enumerate(r.meta):
                segs = set(m[3])
                assert not segs & set(new[k:]) or r.times[i] >= t
                assert not segs & set(old[k:]) or r.times[i] < t
                checked += bool(segs & set(new[k:]))
    assert checked >= 10


def test_a_surge_brings_many_short_cases_of_one_product():
    """A surge's cases are emails and forms of its product inside its window, arriving far
    faster than that product's cases elsewhere."""
    surges = 0
    for seed in (1, 2, 3, 4):
        s = _small(seed).state
        if s.surge is None:
            continue
        p, start, end = s.surge
        mine = [c for c in s.cases if c.surge]
        assert mine and all(c.product == p and start <= c.time <= end
                            and c.source_kind in ("email", "form") for c in mine)
        inside = sum(c.product == p and start <= c.time <= end for c in s.cases)
        outside = sum(c.product == p for c in s.cases) - inside
        assert inside / (end - start) > 3 * outside / (END - (end - start))
        surges += 1
    assert surges >= 2


@pytest.mark.parametrize("seed", [1, 2])
def test_regulator_label_and_oneoff_heads(seed):
    """A regulator reply holds the letter, the label, then cases of the product; a label
    lookup the system prompt and the label; a one-off only its system prompt and message."""
    r = _small(seed)
    s = r.state
    for kind in ("regulator", "label", "oneoff"):
        assert len(chats_of(r, kind)) >= 2
        for n, chat in chats_of(r, kind):
            i = chat.sent[0]
            segs, label = r.meta[i][3], s.products[chat.owner].label.at(r.times[i])
            assert segs[0] == s.chat_system[kind] and r.meta[i][:3] == (kind, n, 0)
            if kind == "oneoff":
                assert len(segs) == 2
            elif kind == "label":
                assert segs[1:-1] == label
            else:
                prod = s.products[chat.owner]
                texts = set(prod.prior) | {s.cases[x].outputs[0] for x in prod.cases
                                           if s.cases[x].outputs}
                assert segs[2:2 + len(label)] == label and chat.fixed[0] == segs[1]
                assert set(chat.fixed[1:]) <= texts and chat.fixed[1:]
    assert all(len(c.sent) <= CHATS["label"][1][3] for _, c in chats_of(r, "label"))


def test_cases_follow_the_call_centres_day():
    """Cases arrive by the call centres' hours: more in 13..17 UTC than 02..06 UTC."""
    s = _small(1).state
    hours = Counter(int(c.time // HOUR) % 24 for c in s.cases if not c.surge)
    assert sum(hours[h] for h in range(13, 17)) > 3 * sum(hours[h] for h in range(2, 6)) > 0
