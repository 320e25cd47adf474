"""bench/heldout_moderation.py: the held-out shape moderation has the properties its docstring
names. Structure only: no policy, no hit rate."""

from __future__ import annotations

from collections import Counter

import pytest

from bench.heldout_fewshot import BLOCK
from bench.heldout_moderation import KINDS, generate, moderation
from bench.heldout_moderation_desk import SENIOR_DELAY
from bench.heldout_moderation_world import END, HOUR, LAYOUTS, MINUTE, REGIONS, USERS
from tests.bench.trace_parts import SmallRuns, blocks_by_kind, check_chains, tokens

SCALE = 0.2
SMALL = SmallRuns(generate, SCALE)  # each seed's run and first_seen, made once
_small, _first = SMALL.run, SMALL.first
FIRST_PASS = ("classify", "viral", "quote", "spam")


def _new_from(r, first, i, prefix) -> bool:
    """Every block of request ``i`` after the segments ``prefix`` is new there."""
    return all(first[b] == i for b in r.trace[i][tokens(prefix) // BLOCK:])


def _first_passes(r) -> list[int]:
    return [i for i, m in enumerate(r.meta) if m[0] in FIRST_PASS]


def test_deterministic_and_seeded():
    """Same seed, same trace; seeds 1..4 have the four layouts; every kind is there (quotes
    on the short network only), in time order."""
    assert moderation(1, 0.05) == moderation(1, 0.05) != moderation(2, 0.05)
    assert generate(3, 0.05).trace == moderation(3, 0.05)
    for seed, layout in zip((1, 2, 3, 4), LAYOUTS):
        r = _small(seed)
        assert r.state.layout == layout
        assert r.times == sorted(r.times) and all(r.trace)
        kinds = set(KINDS) - ({"quote"} if layout.quotes == 0 else set())
        assert {m[0] for m in r.meta} == kinds


@pytest.mark.parametrize("seed", [1, 2])
def test_sizes_and_each_regions_local_evening(seed):
    """At scale 0.2: 150K..700K blocks over two days; each region's organic items peak in
    its own local evening; requests are the full blocks of their segments."""
    r = _small(seed)
    assert 150_000 <= sum(blocks_by_kind(r).values()) <= 700_000
    assert r.times[-1] > 44 * HOUR and r.times[0] < 4 * HOUR
    s = r.state
    for region, (_, offset, _) in enumerate(REGIONS):
        hours = Counter(int((r.times[s.first[i][0]] / HOUR + offset) % 24)
                        for i, item in enumerate(s.items) if item.region == region)
        assert sum(hours[h] for h in range(18, 23)) > 3 * sum(hours[h] for h in range(1, 6))
    check_chains(r, 3 if seed == 1 else 7)


@pytest.mark.parametrize("seed", [1, 4])
def test_first_pass_sends_the_policy_head_the_item_and_each_part(seed):
    """A first pass sends system, guidelines (its version), the surface's rules and
    examples as they stand, the language's guidance, then the item's context and text (one
    request more per part, each with its part) and the cue."""
    r = _small(seed)
    s = r.state
    parted = 0
    for i, sent in s.first.items():
        item = s.items[i]
        s.now = r.times[sent[0]]
        head = s.head(item)
        assert head == [s.system["classify"], *s.guidelines[item.version],
                        *s.rules[item.surface].at(s.now), *s.examples[item.surface].at(s.now),
                        s.language[item.lang]]
        texts = item.texts()
        assert len(sent) == len(texts) == 1 + len(item.parts)
        for k, j in enumerate(sent):
            assert r.meta[j][1:] == (i, k, [*head, *texts[k], s.cue["classify"]])
        if item.context:
            assert item.context[0] == s.items[_root_of(s, i)].body[0]
        parted += bool(item.parts)
    s.now = END  # head reads the clock; leave it where the run ended
    assert parted >= 10


def _root_of(s, i: int) -> int:
    return next(n for n, x in enumerate(s.items) if i in x.children)


def test_guidelines_roll_out_behind_a_canary():
    """A guidelines version goes to a few requests in its canary window, to all after it;
    its first request is new from the rewritten policy area on, and everything after."""
    canary = Counter()
    for seed in (1, 2, 3):
        r, first = _small(seed), _first(seed)
        s = r.state
        assert len(s.rollouts) == len(s.guidelines) - 1 >= 2
        for v, ((start, full), (_, k)) in enumerate(zip(s.rollouts, s.revisions), 1):
            got = [s.items[r.meta[i][1]].version for i in _first_passes(r)
                   if start <= r.times[i] < full and r.meta[i][2] == 0]
            canary.update(x == v for x in got)
            assert set(got) <= {v - 1, v}
            after = [i for i in _first_passes(r) if r.times[i] >= full]
            assert all(s.items[r.meta[i][1]].version >= v for i in after)
            on = min(i for i in _first_passes(r) if s.items[r.meta[i][1]].version == v)
            assert _new_from(r, first, on, [s.system["classify"], *s.guidelines[v][:k]])
    assert canary[False] > 4 * canary[True] > 0


@pytest.mark.parametrize("seed", [1, 3])
def test_trends_echo_with_copypasta_and_quotes(seed):
    """A trending root's echoes sit under it and follow it; a share of them are a copypasta
    variant and a short tail; on the short network quote-posts resend the original under
    the post surface's head; organic replies pile onto the trend too."""
    r = _small(seed)
    s = r.state
    dups = quotes = piled = 0
    for b in s.bursts:
        root = s.items[b.root]
        assert r.meta[s.first[b.root][0]][0] == "viral"
        for i in b.echoes:
            item = s.items[i]
            assert item.context[:len(root.body)] == root.body and item.time >= root.time
            dups += item.body[0] in b.templates
            quotes += item.surface == root.surface
            assert r.meta[s.first[i][0]][0] == ("quote" if item.surface == root.surface
                                                 else "viral")
        piled += sum(s.items[c].region >= 0 for c in root.children)
    echoes = sum(len(b.echoes) for b in s.bursts)
    assert echoes >= 40 and 0.25 * echoes < dups < 0.55 * echoes and piled > 0
    assert (quotes > 0.15 * echoes) == (s.layout.quotes > 0)


@pytest.mark.parametrize("seed", [2, 4])
def test_spam_waves_are_templated_from_fresh_accounts(seed):
    """A wave's items fall in its span, come from fresh accounts, carry no parts, and most
    start with one of the wave's templates; most are removed."""
    r = _small(seed)
    s = r.state
    assert s.waves
    for w in s.waves:
        assert len(w.items) >= 30
        for i in w.items:
            item = s.items[i]
            assert w.start <= item.time <= w.start + w.span
            assert item.author >= USERS and not item.parts and item.surface == w.surface
        templated = sum(s.items[i].body[0] in w.templates for i in w.items)
        assert 0.6 * len(w.items) < templated < len(w.items)
        assert sum(s.items[i].removed for i in w.items) > 0.7 * len(w.items)


@pytest.mark.parametrize("seed", [1, 2])
def test_escalations_and_appeals(seed):
    """An escalation follows its first pass within seconds behind the senior prompt (its
    playbook, the same guidelines version, the item with its parts, the first verdict); an
    appeal re-reviews a removed item minutes to hours later with its decision and the
    user's history (their strikes included); some appeals go on to the senior reviewer."""
    r = _small(seed)
    s = r.state
    steps = Counter(step for _, step, _ in s.escalations)
    assert steps[0] >= 5 and steps[1] >= 1 and len(s.appeals) >= 5
    for i, step, j in s.escalations:
        item, segs = s.items[i], r.meta[j][3]
        assert segs[0] == s.system["senior"] and segs[-1] == s.cue["senior"]
        assert s.playbook[0] in segs and item.body[0] in segs
        if step == 0:
            gap = r.times[j] - r.times[s.first[i][0]]
            assert SENIOR_DELAY[0] <= gap <= SENIOR_DELAY[1]
            assert segs[1:1 + len(s.guidelines[item.version])] == s.guidelines[item.version]
            assert len(r.trace[j]) > len(r.trace[s.first[i][0]])
    for i, j, history in s.appeals:
        item, segs = s.items[i], r.meta[j][3]
        assert item.removed and r.times[j] - item.time >= 10 * MINUTE
        tail = [*item.context, *item.body, *item.parts, item.decision, *history]
        assert segs[0] == s.system["appeal"] and s.rubric in segs
        n = segs.index(s.rubric) + 1
        assert segs[n:n + len(tail)] == tail and len(history) >= 2


def test_rule_edits_and_example_refreshes_make_later_blocks_new():
    """After a surface's rules change (one section) or its examples grow (new ones at the
    end), that surface's next first pass is new from the first changed part on."""
    checked = Counter()
    for seed in (1, 2, 3, 4):
        r, first = _small(seed), _first(seed)
        s = r.state
        for t, what, surface, k in s.edits:
            later = [i for i in _first_passes(r)
                     if r.times[i] > t and s.items[r.meta[i][1]].surface == surface]
            if not later:
                continue
            segs = r.meta[later[0]][3]
            n = 1 + len(s.guidelines[s.items[r.meta[later[0]][1]].version]) + k
            if what == "examples":
                n += len(s.rules[surface].at(t))
            assert _new_from(r, first, later[0], segs[:n])
            checked[what] += 1
    assert checked["rules"] >= 2 and checked["examples"] >= 2
