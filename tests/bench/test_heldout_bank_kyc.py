"""bench/heldout_bank_kyc.py: the held-out shape bank_kyc has the properties its docstring
names. Structure only: no policy, no hit rate."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from bench.heldout_bank_kyc import KINDS, bank_kyc, generate
from bench.heldout_fewshot import BLOCK
from bench.heldout_kyc_desk import AUDITS, SESSIONS
from bench.heldout_kyc_jobs import NIGHT, QUEUE, TM_RUN, WORKERS
from bench.heldout_kyc_parts import BEFORE, DAY, END, HOUR, MINUTE, TYPES
from tests.bench.trace_parts import (SmallRuns, blocks_by_kind, check_chains, check_ordered,
                                     common, of_kind, shared_tokens, tokens)
from tests.bench.trace_parts import chats_of

SCALE = 0.2
SMALL = SmallRuns(generate, SCALE)  # each seed's run and first_seen, made once
_small, _first = SMALL.run, SMALL.first


def _hour(t):
    """The hour of the day (0..24) at ``t``."""
    return t % DAY / HOUR


def _new_from(r, first, i, k):
    """Whether every block of request ``i`` from block ``k`` on is first seen at ``i``."""
    return all(first[b] == i for b in r.trace[i][k:])


def test_deterministic_and_seeded():
    """Same seed, same trace; seeds differ in structure (jurisdictions, an offshore centre,
    the list's re-issues, when the guidance note lands), not just in noise; requests are
    non-empty and in time order, and every kind is there."""
    assert bank_kyc(1, 0.05) == bank_kyc(1, 0.05) != bank_kyc(2, 0.05)
    assert generate(3, 0.05).trace == bank_kyc(3, 0.05)
    states = [_small(seed).state for seed in (1, 2, 3, 4)]
    assert len({(len(s.jurs), s.offshore) for s in states}) >= 2
    assert len({len(s.issues) for s in states}) >= 2
    assert len({tuple(t for t, _, _ in s.issues) for s in states}) == 4
    assert len({s.landed < DAY for s in states}) == 2
    for seed in (1, 2):
        check_ordered(_small(seed), KINDS)


@pytest.mark.parametrize("seed", [1, 2])
def test_sizes_and_span(seed):
    """At scale 0.2: 250K..550K blocks over the two days, the alert agent one of the two
    largest kinds and every kind at least 0.3 % of the blocks."""
    r = _small(seed)
    blocks = blocks_by_kind(r)
    total = sum(blocks.values())
    assert 250_000 <= total <= 550_000 and 700 <= len(r.trace) <= 1600
    assert "alert" in sorted(blocks, key=blocks.__getitem__)[-2:]
    assert all(blocks[k] > 0.003 * total for k in KINDS)
    assert 44 * HOUR < r.times[-1] < END and r.times[0] < 3 * HOUR


def test_prefix_chains_are_well_formed():
    """A block id always follows the same parent; a request is the full blocks of its
    segments, the same segments always the same ids; two requests share exactly the blocks
    of the segments they start with."""
    check_chains(_small(1), 3)


def _round(r, s, a, walk, first):
    """One review walk of application ``a``: documents behind the shared head, then (the
    first walk) each party's screening, then the assessment over the findings."""
    app = s.apps[a]
    docs = [i for i in walk.sent if r.meta[i][0] == "onboard" and r.meta[i][2] >= 0]
    last = walk.sent[-1]
    head = [s.system["onboard"], *s.policy[app.type].at(r.times[last]),
            *s.jurs[app.jur].rules, app.form]
    assert r.meta[last] == ("onboard", a, -1, [*head, *r.meta[last][3][len(head):]])
    assert r.meta[last][3][-1] == s.cue["assess"]
    for i in docs:
        assert r.meta[i][3][-1] == s.cue["doc"] and r.meta[i][3][:-2] == head
        assert _new_from(r, first, i, tokens(head) // BLOCK)
    for i, j in itertools.pairwise([*docs, last]):
        assert common(r.trace[i], r.trace[j]) >= tokens(head) // BLOCK
    return docs


@pytest.mark.parametrize("seed", [1, 2])
def test_onboarding_reviews_read_each_document_behind_the_head(seed):
    """An application is reviewed 1..10 minutes after it arrives: each document behind the
    system prompt, the type's policy chapter, the jurisdiction's rules and the form (every
    block from the document on new), each party screened, then the assessment; a requested
    document re-read on upload changes the assessment from its finding on."""
    r, first = _small(seed), _first(seed)
    s, again = r.state, 0
    for a, app in enumerate(s.apps):
        if not app.rounds or not app.rounds[0].sent:
            continue
        start = r.times[app.rounds[0].sent[0]] - app.time
        assert QUEUE[0] * MINUTE <= start <= QUEUE[1] * MINUTE
        docs = _round(r, s, a, app.rounds[0], first)
        if app.rounds[0].pos == len(app.rounds[0].items):
            assert [r.meta[i][2] for i in docs] == list(range(len(app.docs)))
            screens = [i for i in app.rounds[0].sent if r.meta[i][0] == "screen"]
            assert len(screens) == app.parties
        if len(app.rounds) > 1 and len(app.rounds[1].sent) == 2:
            x, y = app.rounds[0].sent[-1], app.rounds[1].sent[-1]
            _round(r, s, a, app.rounds[1], first)
            diff = [k for k, (p, q) in enumerate(zip(r.meta[x][3], r.meta[y][3])) if p != q]
            policy = s.policy[app.type]
            assert len(diff) == 1 or policy.at(r.times[x]) != policy.at(r.times[y])
            assert r.times[y] - r.times[x] >= HOUR
            again += 1
    assert again >= 1 and sum(bool(a.rounds) for a in s.apps) >= 15


@pytest.mark.parametrize("seed", [1, 2])
def test_screening_carries_the_list_as_issued(seed):
    """A screening sends the screening policy, the list's header and the name's section as
    they stand, then the party; after a re-issue every block from the header on is new, the
    delta run walks potential matches of the changed sections in (section, id) order."""
    r, first = _small(seed), _first(seed)
    s = r.state
    starts = [0.0, *(t for t, _, _ in s.issues)]
    begin = [next((i for i, t in enumerate(r.times) if t >= x), len(r.trace)) for x in starts]
    cut = tokens([s.screen_system, *s.screening.at(0)]) // BLOCK
    for n, (source, subject, name, i) in enumerate(s.screens):
        t, (kind, v, step, segs) = r.times[i], r.meta[i]
        assert kind == "screen" and step == n and segs[0] == s.screen_system
        assert v == sum(vt <= t for vt in starts) - 1
        assert segs[-4] == s.header.at(t)[0] and segs[-3] == s.names[name].at(t)[0]
        if v:
            assert all(first[b] >= begin[v] for b in r.trace[i][cut:])
        if source == "payment":
            assert 6 <= _hour(t) < 20 and segs[-2][0] == subject
    for t, changed, walk in s.issues:
        assert walk.items == sorted(walk.items) and {k for k, _ in walk.items} <= set(changed)
        assert all(c in s.by_name[k] for k, c in walk.items) and len(walk.items) >= 3
        for i, j in itertools.pairwise(walk.sent):
            if r.meta[i][3][-3] == r.meta[j][3][-3]:
                assert common(r.trace[i], r.trace[j]) >= tokens(r.meta[i][3][:-2]) // BLOCK
    assert {"onboard", "delta", "payment"} <= {x[0] for x in s.screens}


@pytest.mark.parametrize("seed", [1, 2])
def test_periodic_reviews_walk_the_due_accounts_nightly(seed):
    """Each night's walk starts at 01:00..01:45, in id order; the second holds the first's
    deferred accounts (the same prompt again, exactly) and no account it completed; a
    completed review writes a new profile used from then on."""
    r = _small(seed)
    s = r.state
    (w0, d0, s0), (w1, _, s1) = s.nights
    assert w0 == sorted(w0) and w1 == sorted(w1) and len(w0) >= 30
    for night, walk in enumerate((s0, s1)):
        assert NIGHT[0] <= (r.times[walk.sent[0]] - night * DAY) / HOUR < NIGHT[1]
    assert set(w0) & set(w1) == d0 and d0
    again = dict(zip(w1, s1.sent))
    for c, i in zip(w0, s0.sent):
        assert r.meta[i][:3] == ("periodic", 0, c)
        assert r.meta[i][3][-4] == s.customers[c].profile.at(r.times[i])[0]
        if c in d0:
            assert r.trace[again[c]] == r.trace[i]
        else:
            assert any(v == r.times[i] + 1 for v, _ in s.customers[c].profile.versions)


@pytest.mark.parametrize("seed", [1, 2])
def test_the_alert_agent_resends_the_growing_case_file(seed):
    """Overnight alerts land at 04:30..05:30; at most WORKERS agent loops at once, taken in
    order; each step re-sends the last step's prompt (less its cue) exactly and adds a tool
    call and result; day-1 repeats carry the day-0 findings among their prior alerts."""
    r = _small(seed)
    s = r.state
    spans = []
    for a, x in enumerate(s.alerts):
        if not x.sent:
            continue
        spans.append((r.times[x.sent[0]], r.times[x.sent[-1]]))
        for k, i in enumerate(x.sent):
            assert r.meta[i][:3] == ("alert", a, k)
            assert r.meta[i][3][1] == s.playbooks[x.scenario] and r.meta[i][3][3] == x.window
        for i, j in itertools.pairwise(x.sent):
            a_, b_ = r.meta[i][3], r.meta[j][3]
            assert b_[:len(a_) - 1] == a_[:-1] and len(b_) == len(a_) + 2
            assert common(r.trace[i], r.trace[j]) == tokens(a_[:-1]) // BLOCK
    assert [t for t, _ in spans] == sorted(t for t, _ in spans)
    for t, _ in spans:
        assert sum(lo <= t < hi for lo, hi in spans) <= WORKERS
    runs = Counter(x.time for x in s.alerts).most_common(2)
    assert all(TM_RUN[0] <= _hour(t) < TM_RUN[1] and n >= 5 for t, n in runs)
    done = {x.findings for x in s.alerts if x.time < DAY}
    assert any(set(x.prior) & done for x in s.alerts if x.time >= DAY)


def test_analysts_chat_over_the_case_file():
    """A case chat starts on duty and sends the case file as it stands after its system
    prompt; a turn whose file did not change extends the last one exactly."""
    extended = 0
    for seed in (1, 2, 3):
        r = _small(seed)
        s = r.state
        for n, chat in chats_of(r, "chat"):
            assert s.on_duty(r.times[chat.sent[0]])
            file = s.cases[chat.owner].file
            for i in chat.sent:
                segs = r.meta[i][3]
                assert segs[:2] == [s.chat_system["chat"], file[0]]
            for i, j in itertools.pairwise(chat.sent):
                a, b = r.meta[i][3], r.meta[j][3]
                assert common(r.trace[i], r.trace[j]) == shared_tokens(a, b) // BLOCK
                extended += b[:len(a)] == a
    assert extended >= 10


def test_sar_revisions_share_the_draft_head():
    """A SAR draft is the system prompt, the jurisdiction's template, the exported case file
    and the notes; a revision adds the last draft and the reviewer's comments: it shares
    exactly the head, every block after it new; revisions come on duty, 30+ minutes on."""
    revised = 0
    for seed in (1, 2, 3):
        r, first = _small(seed), _first(seed)
        s = r.state
        for n, rep in enumerate(s.reports):
            jur = s.jurs[s.customers[s.cases[rep.case].customer].jur]
            head = [s.sar_system, jur.sar, *rep.file, rep.notes]
            for k, i in enumerate(rep.sent):
                tail = [rep.drafts[k - 1], rep.comments[k - 1]] if k else []
                assert r.meta[i] == ("sar", n, k, [*head, *tail, s.sar_cue])
                assert s.on_duty(r.times[i])
            for i, j in itertools.pairwise(rep.sent):
                assert common(r.trace[i], r.trace[j]) == tokens(head) // BLOCK
                assert _new_from(r, first, j, tokens(head) // BLOCK)
                assert r.times[j] - r.times[i] >= 30 * MINUTE
                revised += 1
    assert revised >= 3


@pytest.mark.parametrize("seed", [1, 2])
def test_adverse_media_reads_articles_once(seed):
    """The media job reads one check at a time: each article behind the system prompt and
    the profile (every block from the article on new), then a summary over its notes,
    which joins the case file."""
    r, first = _small(seed), _first(seed)
    s = r.state
    last = -1.0
    for m, (c, case, walk) in enumerate(s.media):
        if walk is None or not walk.sent:
            continue
        assert r.times[walk.sent[0]] >= last
        last = r.times[walk.sent[-1]]
        for k, i in enumerate(walk.sent):
            segs = r.meta[i][3]
            assert r.meta[i][:3] == ("media", m, k) and segs[0] == s.media_system
            if k < len(walk.items) - 1:
                assert len(segs) == 4 and _new_from(r, first, i, tokens(segs[:2]) // BLOCK)
        if m in s.summaries and case is not None:
            assert s.summaries[m] in s.cases[case].file
    assert len(s.summaries) >= 3


def _guidance(seed):
    r = _small(seed)
    return r, r.state, chats_of(r, "guidance")


def test_the_guidance_note_brings_a_burst_and_a_gap_walk():
    """When the note lands, analysts ask about it (on duty, most in the hours after), every
    turn behind the note as it stands; the gap analysis walks every policy section."""
    for seed in (1, 2, 3):
        r, s, chats = _guidance(seed)
        assert len(chats) >= SESSIONS[0] * SCALE * 0.5
        for n, chat in chats:
            t = r.times[chat.sent[0]]
            assert t > s.landed and s.on_duty(t)
            for i in chat.sent:
                head = [s.chat_system["guidance"], *s.note.at(r.times[i])]
                assert r.meta[i][3][:len(head)] == head
        soon = sum(r.times[c.sent[0]] < s.landed + 4 * HOUR for _, c in chats)
        assert soon >= 0.5 * len(chats) or s.landed % DAY > 14 * HOUR
        (walk,) = s.gaps
        assert 30 * MINUTE <= r.times[walk.sent[0]] - s.landed <= 60 * MINUTE
        assert [r.meta[i][2] for i in walk.sent] == list(range(len(walk.items)))


def test_an_erratum_makes_later_guidance_blocks_new():
    """On a seed whose note is corrected, turns after the erratum share with earlier ones
    exactly the sections before the corrected one."""
    r, s, chats = _guidance(6)
    assert s.erratum is not None
    old, new = s.note.versions[0][1], s.note.versions[1][1]
    k = next(k for k, (a, b) in enumerate(zip(old, new)) if a != b)
    before = [i for _, c in chats for i in c.sent if r.times[i] < s.erratum]
    after = [i for _, c in chats for i in c.sent if r.times[i] >= s.erratum]
    assert before and after
    cut = tokens([s.chat_system["guidance"], *old[:k]]) // BLOCK
    assert all(common(r.trace[before[-1]], r.trace[j]) == cut for j in after[:20])


def test_the_policy_amendment_versions_the_chapters_and_the_faq():
    """A day-0 note on seed 1 amends the policy the next morning: onboarding heads of an
    amended type change, and the FAQ gains a section at its end (earlier blocks shared)."""
    r = _small(1)
    s = r.state
    assert s.amended is not None and DAY < s.amended < DAY + 10 * HOUR
    amended = {t for t, _ in TYPES if len(s.policy[t].versions) > 1}
    assert amended or len(s.periodic.versions) > 1
    faq = of_kind(r, "faq")
    pre = [i for i in faq if r.times[i] < s.amended]
    post = [i for i in faq if r.times[i] >= s.amended]
    old = [s.chat_system["faq"], *s.faq.versions[0][1]]
    assert s.faq.versions[1][1][:-1] == old[1:] and pre and post
    assert all(common(r.trace[pre[-1]], r.trace[j]) >= tokens(old) // BLOCK - 1
               for j in post)
    for t in amended:
        ix = [i for i in of_kind(r, "onboard") if s.apps[r.meta[i][1]].type == t]
        pre = [i for i in ix if r.times[i] < s.amended]
        post = [i for i in ix if r.times[i] >= s.amended]
        assert pre and post and s.policy[t].at(s.amended) != s.policy[t].at(s.amended - 1)
        head = tokens([s.system["onboard"], *s.policy[t].at(s.amended - 1)]) // BLOCK
        assert all(common(r.trace[pre[-1]], r.trace[j]) < head for j in post)


@pytest.mark.parametrize("seed", [1, 2])
def test_audit_walks_sampled_closed_cases(seed):
    """Each sampling run starts in its hours and walks cases closed before the trace, then
    cases the trace closed before the run, each behind the checklist of its kind."""
    r = _small(seed)
    s = r.state
    assert len(s.audits) >= 2
    for k, walk in enumerate(s.audits):
        t = r.times[walk.sent[0]]
        assert any(lo <= t / HOUR < hi for lo, hi in AUDITS)
        closed = [s.cases[n].closed for n in walk.items]
        assert closed == sorted(closed) and all(c is not None and c < t for c in closed)
        assert BEFORE in closed
        for n, i in zip(walk.items, walk.sent):
            case = s.cases[n]
            assert r.meta[i][3][:2 + len(case.file)] == [s.audit_system,
                                                         s.checklists[case.kind], *case.file]
    assert any(s.cases[n].owner >= 0 for w in s.audits for n in w.items)


@pytest.mark.parametrize("seed", [1, 2])
def test_faq_sessions_share_the_faq(seed):
    """The FAQ bot's turns (on duty) all start with its system prompt and the FAQ as it
    stands, and a session's turns extend each other exactly."""
    r = _small(seed)
    s = r.state
    chats = chats_of(r, "faq")
    assert len(chats) >= 30
    for n, chat in chats:
        assert s.on_duty(r.times[chat.sent[0]])
        for i in chat.sent:
            head = [s.chat_system["faq"], *s.faq.at(r.times[i])]
            assert r.meta[i][3][:len(head)] == head
        for i, j in itertools.pairwise(chat.sent):
            if s.faq.at(r.times[i]) == s.faq.at(r.times[j]):
                assert r.trace[j][:len(r.trace[i])] == r.trace[i]
