"""bench/heldout_companion_chat.py: the held-out shape companion_chat has the properties its
docstring names. Structure only: no policy, no hit rate."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from bench.heldout_companion_chat import KINDS, companion_chat, generate
from bench.heldout_companion_chats import DEPLOY, GROWTH, SWIPE, TRIGGER
from bench.heldout_companion_world import (DAY, END, HOUR, LAYOUTS, MEMBERS, RESERVE,
                                           tokens)
from bench.heldout_fewshot import BLOCK
from tests.bench.trace_parts import (SmallRuns, blocks_by_kind, check_chains, check_ordered,
                                     common, of_kind, shared_tokens)

SCALE = 0.2
SMALL = SmallRuns(generate, SCALE)  # each seed's run and first_seen, made once
_small, _first = SMALL.run, SMALL.first


def _new_from(r, first, i, prefix) -> bool:
    """Every block of request ``i`` after the segments ``prefix`` is new there."""
    return all(first[b] == i for b in r.trace[i][tokens(prefix) // BLOCK:])


def _head(s, chat, t: float, lore: tuple = ()) -> list:
    """The head a request of ``chat`` at ``t`` sends, rebuilt from the docstring's order."""
    out = [*s.platform.at(t), *chat.fixed]
    for k in chat.cast:
        card = s.cards[k]
        out += card.definition.at(t)
        if chat.kind == "chat":
            out += [card.lore[e] for e in lore] + ([card.examples] if card.examples else [])
    user = s.users[chat.owner]
    out += [user.persona] if user.persona else []
    return out + (user.memory.at(t) if user.memory else [])


def _turns(s, kind: str):
    """(chat, position in ``sent``, request) of every request of a chat of ``kind``."""
    return [(c, k, i) for c in s.chats if c.kind == kind for k, i in enumerate(c.sent)]


def test_deterministic_and_seeded():
    """Same seed, same trace; seeds 1..4 have the four layouts; every request is in time
    order, memory requests only where users have a memory, every kind in the four runs."""
    one = companion_chat(1, 0.05)
    assert one == generate(1, 0.05).trace != companion_chat(2, 0.05) and one
    runs = [_small(seed) for seed in (1, 2, 3, 4)]
    assert [r.state.layout for r in runs] == list(LAYOUTS)
    for r in runs:
        s = r.state
        kinds = {m[0] for m in r.meta}
        check_ordered(r, kinds)
        assert {"chat", "swipe"} <= kinds and ("memory" in kinds) == s.layout.memory
        assert all((u.memory is not None) == s.layout.memory for u in s.users)
        assert len(s.cards) == s.layout.cards and len(s.users) >= 6
    assert set().union(*({m[0] for m in r.meta} for r in runs)) == set(KINDS)


@pytest.mark.parametrize("seed", [1, 2])
def test_sizes_span_and_the_evening_peak(seed):
    """At scale 0.2: 150K..600K blocks over the weekend, no kind over 80 %; the users' turns
    peak in their local evening and the small hours are nearly empty."""
    r = _small(seed)
    blocks = blocks_by_kind(r)
    assert 150_000 <= sum(blocks.values()) <= 600_000
    assert max(blocks.values()) < 0.8 * sum(blocks.values())
    assert r.times[-1] < END and r.times[-1] - r.times[0] > 30 * HOUR
    s, hours = r.state, Counter()
    for c, _, i in _turns(s, "chat") + _turns(s, "group"):
        hours[int((r.times[i] / HOUR + s.users[c.owner].zone) % 24)] += 1
    assert sum(hours[h] for h in range(19, 24)) > 4 * sum(hours[h] for h in range(3, 8))
    check_chains(r, 5)


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_prompts_are_built_as_described(seed):
    """Each turn sends the platform prompt, the card(s), lorebook entries, examples, persona
    and memory as they stood, then the history, then the message and the post-history
    instruction (a group: the speaker's line); it fits the context unless no history is
    left to drop."""
    r = _small(seed)
    s = r.state
    for c, k, i in _turns(s, "chat") + _turns(s, "group"):
        segs, h = r.meta[i][3], s.heads[i]
        lore = c.lores[k] if c.kind == "chat" else ()
        assert segs[:h] == _head(s, c, r.times[i], lore) and len(lore) <= TRIGGER[1]
        tail = [s.post] if c.kind == "chat" else [s.nudge(r.meta[i][2])]
        assert segs[-len(tail):] == tail
        history = segs[h:-1 - (c.kind == "chat")]
        if history and k >= max(c.rewinds, default=0):  # a rewind deletes what was before
            x = c.history.index(history[0])
            assert history == c.history[x:x + len(history)]
        assert tokens(segs) <= s.layout.context - RESERVE or len(history) <= 1
    groups = [c for c in s.chats if c.kind == "group"]
    assert all(MEMBERS[0] <= len(c.cast) == len(set(c.cast)) <= MEMBERS[1] for c in groups)
    assert all(r.meta[i][2] in c.cast for c in groups for i in c.sent)


@pytest.mark.parametrize("seed", [1, 2, 3, 4])
def test_turns_resend_the_whole_chat(seed):
    """A chat's next request shares exactly the blocks of the segments both start with, and
    over an unchanged head and no drop it extends the last (its tail aside): the next turn
    or, in a group, the next speaker; a rewind keeps only the history before the dropped
    exchanges. Users come back to a chat hours later."""
    r = _small(seed)
    s = r.state
    grown = back = 0
    for c in s.chats:
        trims = {j for j, _ in c.trims}
        for k, (i, j) in enumerate(itertools.pairwise(c.sent), 1):
            a, b = r.meta[i][3], r.meta[j][3]
            assert common(r.trace[i], r.trace[j]) == shared_tokens(a, b) // BLOCK
            same = a[:s.heads[i]] == b[:s.heads[j]] and j not in trims
            if k in c.rewinds:
                n = next(x for x, (u, v) in enumerate(zip(a, b)) if u != v)
                assert n <= len(a) - 2 and (not same or n >= s.heads[i])
            elif j not in trims:
                ha, hb = s.heads[i], s.heads[j]
                assert b[hb:][:len(a) - ha - 1] == a[ha:-1]  # the history and the message
                back += k in c.sessions and r.times[j] - r.times[i] > HOUR
                if same:
                    assert b[:len(a) - 1] == a[:-1]
                    grown += 1
    assert grown >= 80 and back >= 2


@pytest.mark.parametrize("seed", [1, 2])
def test_swipes_resend_the_prompt_exactly(seed):
    """A swipe re-sends its request's prompt unchanged once the reply was read, before the
    chat's next request; about a fifth of the replies are swiped."""
    r = _small(seed)
    s = r.state
    swiped = 0
    for c in s.chats:
        for orig, copies in c.swipes:
            later = [i for i in c.sent if i > orig]
            assert copies and copies == sorted(copies) and orig < copies[0]
            assert all(r.trace[x] == r.trace[orig] and r.meta[x][3] == r.meta[orig][3]
                       for x in copies)
            assert r.times[copies[-1]] - r.times[orig] < 15 * 60
            assert not later or later[0] > copies[-1]
            swiped += 1
    replies = len(of_kind(r, "chat")) + len(of_kind(r, "group"))
    assert 0.5 * SWIPE[0] < swiped / replies < 2 * SWIPE[0]
    assert sum(len(x) for c in s.chats for _, x in c.swipes) == len(of_kind(r, "swipe"))


@pytest.mark.parametrize("seed", [2, 4])
def test_slide_drops_just_enough(seed):
    """"slide": at a drop the history sent starts at the chat's first kept message, and one
    message more would not have fit."""
    r = _small(seed)
    s = r.state
    assert s.layout.drop == "slide"
    drops = 0
    for c in s.chats:
        for j, start in c.trims:
            segs = r.meta[j][3]
            assert segs[s.heads[j]] == c.history[start]
            assert tokens(segs) + c.history[start - 1][1] > s.layout.context - RESERVE
            drops += 1
    assert drops >= 10


@pytest.mark.parametrize("seed", [1, 3])
def test_half_drops_fold_into_the_memory(seed):
    """"half": a drop leaves at most half the room the head leaves (and a memory rewrite);
    the summarizer first reads the dropped messages behind the old memory, and the turn
    after it is new from the memory on."""
    r, first = _small(seed), _first(seed)
    s = r.state
    assert s.layout.drop == "half" and s.folds
    for m, j in s.folds:
        kind, u, step, segs = r.meta[m]
        c = s.chats[r.meta[j][1]]
        assert (kind, u, step) == ("memory", c.owner, 1) and r.times[m] == r.times[j]
        old, new = s.users[u].memory.at(r.times[m] - 1e-6), s.users[u].memory.at(r.times[j])
        dropped = segs[segs.index(old[0]) + 1:-1]
        x = c.history.index(dropped[0])
        assert old != new and c.history[x:x + len(dropped)] == dropped
        assert dict(c.trims)[j] >= x + len(dropped)
        chat, h, tail = r.meta[j][3], s.heads[j], 1 + (c.kind == "chat")
        assert chat[h - 1] == new[0] and _new_from(r, first, j, chat[:h - 1])
        room = s.layout.context - RESERVE - tokens(chat[-tail:])
        history = chat[h:-tail]
        assert tokens(history) <= (room - tokens(chat[:h]) + GROWTH[1]) / 2 or len(history) <= 1


@pytest.mark.parametrize("seed", [1, 3])
def test_the_summarizer_rewrites_the_memory(seed):
    """Each memory request reads the summarizer prompt, the persona and the memory as it
    stood, and makes a new version; the user's next turn is new from the memory on."""
    r, first = _small(seed), _first(seed)
    s = r.state
    memos = of_kind(r, "memory")
    assert sum(len(u.memory.versions) - 1 for u in s.users) == len(memos) >= 10
    later = 0
    for m in memos:
        u, segs, t = r.meta[m][1], r.meta[m][3], r.times[m]
        user = s.users[u]
        head = [s.summarizer[0], *([user.persona] if user.persona else []),
                *user.memory.at(t - 1e-6)]
        assert segs[:len(head)] == head and segs[-1] == s.summarizer[1]
        nxt = [i for c in s.chats if c.owner == u for i in c.sent if r.times[i] > t]
        i = min(nxt, default=None)
        if r.meta[m][2] == 0 and i and not any(m < f < i for f, _ in s.folds):
            assert _new_from(r, first, i, r.meta[i][3][:s.heads[i] - 1])
            later += 1
    assert later >= 5


def test_popularity_groups_and_the_platforms_changes():
    """Mega-popular characters take most chats in "hits" and far fewer in "longtail"; after
    the deploy (Sunday 10..16 UTC) the first turn is new from the rewritten section on, and
    after a creator's edit the card's next chat is new from the edited section on."""
    tops, edits = {}, 0
    for seed in (1, 2, 3, 4):
        r, first = _small(seed), _first(seed)
        s = r.state
        ranked = sorted(range(len(s.cards)), key=lambda k: -s.cards[k].weight)[:5]
        chats = [k for c in s.chats for k in c.cast]
        tops[s.layout.name] = sum(k in ranked for k in chats) / len(chats)
        t, sec = s.deploy
        assert DEPLOY[0] <= (t - DAY) / HOUR < DEPLOY[1]
        turns = [i for c in s.chats for i in c.sent if r.times[i] > t]
        assert _new_from(r, first, min(turns), s.platform.at(t)[:sec])
        for when, card, k in s.card_edits:
            nxt = [i for c in s.chats if c.kind == "chat" and c.cast[0] == card
                   for i in c.sent if r.times[i] > when]
            if nxt:
                i = min(nxt)
                text = s.cards[card].definition.at(r.times[i])
                prefix = [*s.platform.at(r.times[i]), *text[:k]]
                assert _new_from(r, first, i, prefix)
                edits += 1
    assert tops["hits"] > 0.5 > 0.2 > tops["longtail"] and edits >= 1
