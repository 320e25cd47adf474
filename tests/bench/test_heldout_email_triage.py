"""bench/heldout_email_triage.py: the held-out shape email_triage has the properties its
docstring names. Structure only: no policy, no hit rate."""

from __future__ import annotations

import os

import pytest

from bench.heldout_email_desk import ATTACH_CAP, SEND_AFTER
from bench.heldout_email_jobs import (DIGEST_CAP, DIGEST_HOURS, FILE_CAP, PREP_LEAD, THREAD_CAP,
                                      capped)
from bench.heldout_email_parts import ARRIVE, END, HOUR, LUNCH, MINUTE, local
from bench.heldout_email_triage import KINDS, email_triage, generate
from bench.heldout_fewshot import BLOCK
from tests.bench.trace_parts import (SmallRuns, blocks_by_kind, chats_of, check_chains,
                                     check_ordered, common, extends, of_kind, shared_tokens,
                                     tokens)

SCALE = 0.2
SMALL = SmallRuns(generate, SCALE)  # each seed's run and first_seen, made once
_small, _first = SMALL.run, SMALL.first


def _bodies(s, t: int, when: float) -> list:
    """Thread ``t``'s message bodies sent by ``when``."""
    return [s.msgs[m].body for m in s.threads[t].msgs if s.msgs[m].time <= when]


def test_deterministic_and_seeded():
    """Same seed, same trace; seeds differ in structure (the company's style, offices, how
    many users and lists, the heavy users' share), which does not depend on the scale;
    requests are non-empty and in time order, every kind there."""
    assert email_triage(1, 0.05) == email_triage(1, 0.05) != email_triage(2, 0.05)
    assert generate(3, 0.05).trace == email_triage(3, 0.05)
    shapes = []
    for seed in (1, 2, 3, 4):
        s = _small(seed).state if seed < 3 else generate(seed, 0.05).state
        shapes.append((s.style, tuple(s.tz), len(s.lists), round(s.heavy_share, 6)))
    assert len(set(shapes)) == 4 and len({x[0] for x in shapes}) >= 2
    tiny = generate(1, 0.05).state
    assert (tiny.style, tuple(tiny.tz), len(tiny.lists)) == shapes[0][:3]
    assert len(_small(1).state.users) != len(_small(2).state.users)
    for seed in (1, 2):
        check_ordered(_small(seed), KINDS)


@pytest.mark.parametrize("seed", [1, 2])
def test_sizes_and_span(seed):
    """At scale 0.2: 150K..500K blocks over two days, no kind over half of them; every
    nightly digest walk finished."""
    r = _small(seed)
    blocks = blocks_by_kind(r)
    total = sum(blocks.values())
    assert 150_000 <= total <= 500_000 and max(blocks.values()) < total / 2
    assert 0 <= r.times[0] < 3 * HOUR and 44 * HOUR < r.times[-1] < END
    assert all(w.pos == len(w.users) for w in r.state.walks) and len(r.state.walks) == 2


def test_prefix_chains_are_well_formed():
    """A block id always follows the same parent; a request is the full blocks of its
    segments, the same segments always the same ids; two requests share exactly the blocks
    of the segments they start with."""
    check_chains(_small(1), 3)


@pytest.mark.parametrize("seed", [1, 2])
def test_triage_and_screen_on_arrival(seed):
    """Every delivery to a user with auto-triage on (list mail only without a folder rule)
    is triaged at once behind the org's prompt, the task and the user's profile, every block
    from the message on new; every message from outside is screened once, spam included."""
    r, first = _small(seed), _first(seed)
    s = r.state
    triage = of_kind(r, "triage")
    for i in triage:
        _, u, m, segs = r.meta[i]
        user, msg = s.users[u], s.msgs[m]
        assert segs == [s.org, s.task["triage"], user.profile, msg.body, s.cue["triage"]]
        assert r.times[i] == msg.time and user.triage
        assert not (s.threads[msg.thread].kind == "list" and user.folders)
        assert all(first[b] == i for b in r.trace[i][tokens(segs[:3]) // BLOCK:])
    due = [(u, m) for u, user in enumerate(s.users) if user.triage for at, m, _ in user.inbox
           if at >= 0 and not (user.folders and s.threads[s.msgs[m].thread].kind == "list")]
    assert sorted(due) == sorted(r.meta[i][1:3] for i in triage)
    outside = [m for m, msg in enumerate(s.msgs) if msg.author < 0 and msg.time >= 0]
    screen = of_kind(r, "screen")
    assert [r.meta[i][2] for i in screen] == outside
    assert all(r.meta[i][3][1] == s.msgs[r.meta[i][2]].body for i in screen)
    assert any(s.threads[r.meta[i][1]].kind == "spam" for i in screen)


def test_thread_summaries_are_shared_and_grow():
    """A summary is the org's prompt, the task, the thread as it stands (no profile), the
    cue: users on the same thread send the same prompt, and a later summary re-sends an
    earlier one's messages (but the cue) once replies arrived."""
    shared = grown = 0
    for seed in (1, 2):
        r = _small(seed)
        s = r.state
        last, users = {}, {}
        for u, t, i in s.summaries:
            segs = r.meta[i][3]
            body = capped(_bodies(s, t, r.times[i]), THREAD_CAP, True)
            assert r.meta[i][:3] == ("summary", u, t)
            assert segs == [s.org, s.task["summary"], *body, s.cue["summary"]]
            key = tuple(r.trace[i])
            shared += key in users and users[key] != u
            users.setdefault(key, u)
            if t in last and segs != r.meta[last[t]][3]:
                a = r.meta[last[t]][3]
                assert common(r.trace[last[t]], r.trace[i]) == shared_tokens(a, segs) // BLOCK
                grown += segs[:len(a) - 1] == a[:-1]
            last[t] = i
    assert shared >= 5 and grown >= 5


def test_drafts_and_inbox_chats_extend_turn_by_turn():
    """A draft holds the thread and its files as they stood at its first turn after the
    profile; redrafts extend the last turn exactly; minutes after the last turn the user's
    reply joins the thread. An "ask my inbox" chat holds the user's latest mail (newsletters
    aside) and extends turn by turn too."""
    redrafts = asks = 0
    for seed in (1, 2):
        r = _small(seed)
        s = r.state
        for n, chat in chats_of(r, "draft"):
            t0, tn = r.times[chat.sent[0]], r.times[chat.sent[-1]]
            files = [x for f in s.threads[chat.thread].files if s.files[f][1].versions[0][0] <= t0
                     for x in capped(s.files[f][1].at(t0), FILE_CAP)]
            assert chat.fixed == [*capped(_bodies(s, chat.thread, t0), THREAD_CAP, True), *files]
            head = [s.org, s.task["draft"], s.users[chat.owner].profile, *chat.fixed]
            assert all(r.meta[i][3][:len(head)] == head for i in chat.sent)
            redrafts += extends(r, chat.sent, lambda i, j: True)
            replies = [s.msgs[m].time for m in s.threads[chat.thread].msgs
                       if s.msgs[m].author == chat.owner and tn < s.msgs[m].time]
            if r.times[-1] > tn + 30 * MINUTE:
                assert replies and replies[0] <= tn + 700 / 35 + SEND_AFTER[1] * MINUTE
        for n, chat in chats_of(r, "ask"):
            mail = [m for _, m, _ in s.users[chat.owner].inbox
                    if s.msgs[m].time <= r.times[chat.sent[0]]
                    and s.threads[s.msgs[m].thread].kind != "news"]
            assert chat.fixed == [s.msgs[m].body for m in mail[-len(chat.fixed):]]
            asks += extends(r, chat.sent, lambda i, j: True)
    assert redrafts >= 5 and asks >= 5


def _first_new(old: list, new: list) -> int:
    """How many leading sections versions ``old`` and ``new`` share."""
    return len(os.path.commonprefix([old, new]))


def test_versions_make_later_blocks_new():
    """A file's new version keeps the sections before the first edited one, all later ones
    new; a question about the file reads its version then, every block from the edit on first
    seen after it. A policy update does the same to every compliance scan after it."""
    edited = updated = 0
    for seed in (1, 2):
        r, first = _small(seed), _first(seed)
        s = r.state
        for n, chat in chats_of(r, "attach"):
            text = s.files[chat.file][1]
            t0 = r.times[chat.sent[0]]
            assert chat.fixed == capped(text.at(t0), ATTACH_CAP)
            for (tv, v), (tw, w) in zip(text.versions, text.versions[1:]):
                k = _first_new(v, w)
                assert k < len(v) and not set(w[k:]) & set(v)
                if tw <= t0 and k < len(chat.fixed):
                    cut = tokens([s.org, s.task["attach"], *w[:k]]) // BLOCK
                    assert all(r.times[first[b]] >= tw for b in r.trace[chat.sent[0]][cut:])
                    edited += 1
        scans = of_kind(r, "compliance")
        for i in scans:
            p = s.policy.at(r.times[i])
            assert r.meta[i][3][:len(p) + 1] == [s.compliance_system, *p]
        if len(s.policy.versions) > 1:
            (_, a), (tb, b) = s.policy.versions
            i = max(i for i in scans if r.times[i] < tb)
            j = min(j for j in scans if r.times[j] >= tb)
            k = _first_new(a, b)
            assert common(r.trace[i], r.trace[j]) == tokens([s.compliance_system, *a[:k]]) // BLOCK
            updated += 1
    assert edited >= 2 and updated >= 1


@pytest.mark.parametrize("seed", [1, 2])
def test_the_nightly_digest_walks_unread_mail(seed):
    """Each night from HQ 01..02 one walk goes through the users in id order: the org's
    prompt, the task, the profile, the mail unread then (oldest first, capped), the cue; a
    user whose oldest unread mail is the same the second night re-sends it."""
    r = _small(seed)
    s = r.state
    for w in s.walks:
        users = sorted(w.sent)
        times = [r.times[w.sent[u]] for u in users]
        assert times == sorted(times) and len(users) > len(s.users) // 2
        assert DIGEST_HOURS[0] <= local(times[0], s.tz[0]) % 24 < DIGEST_HOURS[1]
        for u, t in zip(users, times):
            unread = [s.msgs[m].body for at, m, read in s.users[u].inbox if at <= t < read]
            mail = capped(unread[:DIGEST_CAP[0]], DIGEST_CAP[1])
            head = [s.org, s.task["digest"], s.users[u].profile]
            assert r.meta[w.sent[u]] == ("digest", u, w.night, [*head, *mail, s.cue["digest"]])
    a, b = s.walks
    again = [u for u in a.sent
             if u in b.sent and r.meta[a.sent[u]][3][3] == r.meta[b.sent[u]][3][3]]
    for u in again:
        segs = r.meta[a.sent[u]][3]
        assert common(r.trace[a.sent[u]], r.trace[b.sent[u]]) >= tokens(segs[:4]) // BLOCK
    assert len(again) >= 2


def test_meeting_prep_and_the_morning_bursts():
    """A prep brief comes 5..30 minutes before a meeting, for an attendee with briefs on:
    head, the day's agenda as rendered then, the invite; summaries and chats peak when people
    come in and come back from lunch."""
    preps = 0
    burst, quiet = [0, 0], [0, 0]
    for seed in (1, 2):
        r = _small(seed)
        s = r.state
        for i in of_kind(r, "prep"):
            _, n, u, segs = r.meta[i]
            x = s.meetings[n]
            assert PREP_LEAD[0] * MINUTE <= x.start - r.times[i] <= PREP_LEAD[1] * MINUTE
            assert u in x.attendees and s.prep_on[u]
            day = s.day_of(u, x.start)
            invite = s.msgs[s.threads[x.thread].msgs[0]].body
            assert segs[:5] == [s.org, s.task["prep"], s.users[u].profile,
                                *s.agendas[(u, day)].at(r.times[i]), invite]
            preps += 1
        for i, m in enumerate(r.meta):
            if m[0] == "summary" or (m[0] == "ask" and m[2] == 0):
                u = m[1] if m[0] == "summary" else s.chats[m[1]].owner
                h = local(r.times[i], s.user_tz(u)) % 24
                for k, (hot, calm) in enumerate(((ARRIVE, 11.0), (LUNCH, 15.5))):
                    burst[k] += abs(h - hot - 0.25) < 0.5
                    quiet[k] += abs(h - calm) < 0.5
    assert preps >= 20
    assert burst[0] > 2 * quiet[0] and burst[1] > 1.5 * quiet[1]
