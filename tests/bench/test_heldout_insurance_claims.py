"""bench/heldout_claims.py: the held-out shape insurance_claims has the structure its
docstring names. Structure only: no policy, no hit rate."""

from __future__ import annotations

import itertools
from collections import Counter

import pytest

from bench.heldout_claims import KINDS, generate, insurance_claims
from bench.heldout_claims_desk import DEPLOY, OFFICE, REFRESH, TALK
from bench.heldout_claims_jobs import ACK_HOURS, NIGHT, SUBRO_LINES, TRIAGE
from bench.heldout_claims_parts import DAY, END, HOUR, REGIONS
from bench.heldout_fewshot import BLOCK
from tests.bench.trace_parts import SmallRuns, check_chains, check_full_blocks, common, tokens

SCALE = 0.2
SEEDS = (1, 2)


SMALL = SmallRuns(generate, SCALE)  # each seed's run and first_seen, made once
_small, _first = SMALL.run, SMALL.first


def _sessions(r, kind):
    return [(n, s) for n, s in enumerate(r.sessions) if s.kind == kind and s.sent]


def _walks(r, kind):
    return [w for w in r.walks if w.kind == kind]


def test_deterministic_and_seeded():
    assert insurance_claims(1, 0.05) == insurance_claims(1, 0.05) != insurance_claims(2, 0.05)
    assert generate(3, 0.05).trace == insurance_claims(3, 0.05)
    for seed in SEEDS:
        r = _small(seed)
        assert r.times == sorted(r.times) and all(r.trace) and 0 <= r.times[0]
        assert {m[0] for m in r.meta} == set(KINDS)
    storms = [_small(s).storm for s in SEEDS] + [generate(s, 0.05).storm for s in (3, 4)]
    assert len({round(s.landfall) for s in storms}) == 4  # the storm lands at other times
    assert len({(s.region, s.claims, len(s.bulletin.versions)) for s in storms}) >= 3
    assert _small(1).trace[:20] != _small(2).trace[:20]


@pytest.mark.parametrize("seed", SEEDS)
def test_sizes_and_span(seed):
    """At scale 0.2: 200K..400K blocks over two days, the storm's share of new claims at
    least half; a request is the full blocks of its segments, the same segments the same
    ids."""
    r = _small(seed)
    total = sum(len(q) for q in r.trace)
    assert 200_000 <= total <= 400_000
    assert 40 * HOUR < r.times[-1] < END
    new = [c for c in r.claims if c.opened >= 0]
    assert sum(c.cat for c in new) > len(new) / 2
    check_full_blocks(r)


def test_prefix_chains_are_well_formed():
    check_chains(_small(1), 3)


def _turns_extend(r, ses):
    """Each turn re-sends the head and history: its blocks extend the last turn's."""
    for i, j in itertools.pairwise(ses.sent):
        assert r.meta[j][3][:len(r.meta[i][3])] == r.meta[i][3]
        assert r.trace[j][:len(r.trace[i])] == r.trace[i]


@pytest.mark.parametrize("seed", SEEDS)
def test_intake_chats_open_their_claims(seed):
    """An intake turn is the intake prompt, the line's script, the bulletin as it stood
    (storm claims), the declarations, the history; the claim opens after the last turn on
    that policy. Storm intakes start after the CAT is declared and are shorter."""
    r, st = _small(seed), _small(seed).state
    turns = Counter()
    for n, ses in _sessions(r, "fnol"):
        p, region, cat = ses.intake
        t0 = r.times[ses.sent[0]]
        bulletin = r.storm.bulletin.at(t0) if cat else []
        assert ses.head == [st.system["fnol"], st.lines[p.line].script, *bulletin,
                            p.declarations]
        assert all(r.meta[i][:3] == ("fnol", n, k) for k, i in enumerate(ses.sent))
        assert r.meta[ses.sent[0]][3][:len(ses.head)] == ses.head
        _turns_extend(r, ses)
        lo, hi = TALK["cat" if cat else "fnol"][0][2:]
        assert len(ses.sent) <= hi and (ses.turns > 0 or len(ses.sent) >= lo)
        if ses.claim >= 0:
            c = r.claims[ses.claim]
            assert (c.policy, c.region, c.cat) == (p, region, cat)
            assert c.opened > r.times[ses.sent[-1]] and ses.turns == 0
        assert not cat or t0 >= r.storm.declared
        turns[cat] += len(ses.sent)
    assert turns[True] >= 50 and turns[False] >= 50


@pytest.mark.parametrize("seed", SEEDS)
def test_the_storm_opens_claims_in_its_region(seed):
    """Storm claims open from the declaration on, in the storm's region or the next one,
    never on liability policies, more by day than at night, and they are most of the new
    claims."""
    r = _small(seed)
    s = r.storm
    cat = [c for c in r.claims if c.cat]
    assert s.landfall + HOUR <= s.declared <= s.landfall + 3 * HOUR
    assert 12 * HOUR <= s.landfall <= 30 * HOUR
    assert len(cat) == len(r.state.cat_claims) >= 0.8 * s.claims >= 60
    assert all(c.opened >= s.declared for c in cat)
    regions = Counter(c.region for c in cat)
    assert set(regions) <= {s.region, (s.region + 1) % REGIONS}
    assert regions[s.region] > 3 * regions[(s.region + 1) % REGIONS]
    assert all(c.policy.line != "liability" for c in cat)
    hours = Counter(c.opened % DAY // HOUR for c in cat)
    assert sum(hours[h] for h in range(8, 13)) > sum(hours[h] for h in range(0, 5))


@pytest.mark.parametrize("seed", SEEDS)
def test_every_new_claim_is_triaged_once(seed):
    """Triage: its system prompt and rubric, the bulletin as it stands (storm claims), the
    notice; each new claim once, 5..60 s after it opens. After a bulletin update the next
    storm triage's blocks from the bulletin on are new."""
    r, st, first = _small(seed), _small(seed).state, _first(seed)
    triaged = {m[1]: i for i, m in enumerate(r.meta) if m[0] == "triage"}
    assert len(triaged) == sum(m[0] == "triage" for m in r.meta)
    for c, claim in enumerate(r.claims):
        if claim.opened < 0:
            assert c not in triaged
        if claim.opened < 0 or claim.opened > END - TRIAGE[1]:
            continue
        i = triaged[c]
        assert TRIAGE[0] <= r.times[i] - claim.opened <= TRIAGE[1]
        bulletin = r.storm.bulletin.at(r.times[i]) if claim.cat else []
        assert r.meta[i][3] == [*st.heads["triage"], *bulletin, claim.entries[0][2]]
    cut = tokens(st.heads["triage"]) // BLOCK
    checked = 0
    for t, _ in r.storm.bulletin.versions[1:]:
        j = min((i for c, i in triaged.items() if r.claims[c].cat and r.times[i] >= t),
                default=None)
        if j is not None:
            assert all(first[b] == j for b in r.trace[j][cut:])
            checked += 1
    assert checked >= 1


@pytest.mark.parametrize("seed", SEEDS)
def test_adjusters_work_over_the_file_as_it_stood(seed):
    """An adjuster's turn is the system prompt, the line's guide, the claim file as it stood
    when the session opened, the history; the session's note joins the file after it. A
    later session on the claim shares the earlier one's blocks up to the old file's end."""
    r, st = _small(seed), _small(seed).state
    last, shared = {}, 0
    for n, ses in _sessions(r, "adjuster"):
        c = r.claims[ses.claim]
        t0, t1 = r.times[ses.sent[0]], r.times[ses.sent[-1]]
        assert ses.head == [st.system["adjuster"], st.guides[c.policy.line], *c.file_at(t0)]
        assert all(r.meta[i][:2] == ("adjuster", n) for i in ses.sent)
        assert 8 * HOUR <= t0 % DAY < (8 + len(OFFICE)) * HOUR
        _turns_extend(r, ses)
        if ses.turns == 0 and t1 < END - 3 * HOUR:
            assert any(w == "note" and t1 < t < t1 + 3 * HOUR for t, w, _ in c.entries)
        if ses.claim in last:
            prev = r.sessions[last[ses.claim]]
            if prev.head != ses.head and ses.head[:len(prev.head)] == prev.head:
                cut = tokens(prev.head) // BLOCK
                assert common(r.trace[prev.sent[0]], r.trace[ses.sent[0]]) == cut
                shared += 1
        last[ses.claim] = n
    cat = [r.times[s.sent[0]] for _, s in _sessions(r, "adjuster") if r.claims[s.claim].cat]
    assert cat and min(cat) > r.storm.declared + DEPLOY * HOUR
    assert shared >= 1


@pytest.mark.parametrize("seed", SEEDS)
def test_coverage_questions_share_the_base_form(seed):
    """A coverage question is the system prompt and the policy's wording (base form,
    endorsements, declarations); two policies on the same form share the form's blocks,
    two on different forms only the system prompt's."""
    r, st = _small(seed), _small(seed).state
    firsts = []
    for n, ses in _sessions(r, "coverage"):
        p = r.claims[ses.claim].policy
        ln = st.lines[p.line]
        assert ses.head == [st.system["coverage"], *ln.forms[p.form],
                            *(ln.pool[k] for k in p.endorsements), p.declarations]
        _turns_extend(r, ses)
        firsts.append((p.line, p.form, r.trace[ses.sent[0]]))
    same = 0
    for (la, fa, a), (lb, fb, b) in itertools.combinations(firsts, 2):
        form = tokens([st.system["coverage"], *st.lines[la].forms[fa]]) // BLOCK
        if (la, fa) == (lb, fb):
            assert common(a, b) >= form
            same += 1
        else:
            assert common(a, b) == tokens([st.system["coverage"]]) // BLOCK
    assert same >= 2 and any(r.claims[s.claim].cat for _, s in _sessions(r, "coverage"))


@pytest.mark.parametrize("seed", SEEDS)
def test_status_questions_resend_the_summary(seed):
    """A status question is the system prompt, the claim's summary as it stood when the
    customer came, the history; customers come in 07..22; a refresh re-sends a question
    exactly 3..40 s later; a summary changes when a note or an estimate joins the file."""
    r, st = _small(seed), _small(seed).state
    for n, ses in _sessions(r, "status"):
        t0 = r.times[ses.sent[0]]
        assert ses.head == [st.system["status"], r.claims[ses.claim].summary_at(t0)]
        assert 7 * HOUR <= t0 % DAY < 22 * HOUR
        _turns_extend(r, ses)
    assert len(st.refreshes) >= 3
    for i, j in st.refreshes:
        assert r.meta[i] == r.meta[j] and r.trace[i] == r.trace[j]
        assert r.meta[i][0] == "status" and i not in r.sessions[r.meta[i][1]].sent
        assert REFRESH[1][0] <= r.times[i] - r.times[j] <= REFRESH[1][1]
    for c in r.claims:
        since = [t for t, _ in c.summary]
        assert since[1:] == [t for t, w, _ in c.entries if t > since[0] and w != "photos"]


@pytest.mark.parametrize("seed", SEEDS)
def test_estimates_are_reviewed_then_filed(seed):
    """An estimate review is its system prompt and rubric, the file as it stood, the new
    estimate (its blocks new), which then joins the file."""
    r, st, first = _small(seed), _small(seed).state, _first(seed)
    n = 0
    for j, (kind, c, _, segs) in enumerate(r.meta):
        if kind != "estimate":
            continue
        claim, t = r.claims[c], r.times[j]
        est = segs[-1]
        assert (t, "estimate", est) in claim.entries
        assert segs == [*st.heads["estimate"], *claim.file_at(t)[:-1], est]
        cut = tokens(segs[:-1]) // BLOCK
        assert all(first[b] == j for b in r.trace[j][cut:])
        n += 1
    assert n >= 20


@pytest.mark.parametrize("seed", SEEDS)
def test_acknowledgements_go_out_in_hourly_batches(seed):
    """Each batch starts at hh:05 in 08..20 and acknowledges, in order of opening, the
    claims opened since the last batch: the letter prompt, the line's (or the storm's)
    template, the claim's summary, the cue."""
    r, st = _small(seed), _small(seed).state
    done = []
    for w in _walks(r, "ack"):
        t0 = w.start
        assert r.times[w.sent[0][2]] == t0
        assert t0 % HOUR == 5 * 60 and ACK_HOURS[0] <= t0 % DAY // HOUR <= ACK_HOURS[1]
        assert w.todo == sorted(w.todo) and [c for c, _, _ in w.sent] == w.todo
        assert all(r.claims[c].opened < t0 for c in w.todo)
        for c, _, i in w.sent:
            claim = r.claims[c]
            tmpl = st.acks["cat" if claim.cat else claim.policy.line]
            assert r.meta[i] == ("ack", c, 0, [*st.heads["letter"], tmpl,
                                               claim.summary_at(r.times[i]), st.ack_cue])
        done += w.todo
    assert done == sorted(done) and len(set(done)) == len(done) >= 100


@pytest.mark.parametrize("seed", SEEDS)
def test_letter_redrafts_share_all_but_the_instruction(seed):
    """A letter is the letter prompt, a template, the claim's summary, an instruction; a
    redraft 30..300 s later shares every block before the new instruction."""
    r, st = _small(seed), _small(seed).state
    for i, m in enumerate(r.meta):
        if m[0] == "letter" and m[2] == 0:
            claim = r.claims[m[1]]
            assert m[3][0] == st.heads["letter"][0] and m[3][1] in st.templates
            assert m[3][2] == claim.summary_at(r.times[i])
    assert len(st.letters) >= 1
    for i, j in st.letters:
        assert r.meta[i][:3] == (r.meta[j][0], r.meta[j][1], 1)
        assert r.meta[i][3][:-1] == r.meta[j][3][:-1] != r.meta[i][3]
        assert common(r.trace[i], r.trace[j]) == tokens(r.meta[j][3][:-1]) // BLOCK
        assert 30 <= r.times[i] - r.times[j] <= 300


def _todo(r, kind, t):
    """What a nightly walk starting at ``t`` must walk (see Platform._on_night)."""
    book = [c for c, claim in enumerate(r.claims) if claim.opened <= t]
    changed = [c for c in book if r.claims[c].changed(t - DAY, t)]
    if kind == "subro":
        return [c for c in changed if r.claims[c].policy.line in SUBRO_LINES]
    if kind == "fraud":
        return [c for c in book if r.claims[c].opened >= t - DAY]
    if kind == "reserve":
        return [c for c in book if r.claims[c].review == int(t // DAY) % 7
                and r.claims[c].opened < t - DAY]
    return changed


@pytest.mark.parametrize("seed", SEEDS)
def test_nightly_walks_follow_the_book(seed):
    """Each night subro, fraud, audit and reserve walk their claims in order at their
    hour, one request at a time, each the rubric, the file as it stood, the cue (audit: three
    cues per claim); a flagged fraud screen's deep dive follows it and extends it."""
    r, st = _small(seed), _small(seed).state
    for kind in NIGHT:
        walks = _walks(r, kind)
        assert len(walks) == 2
        for w in walks:
            t0 = w.start
            assert all(r.times[i] >= t0 for _, _, i in w.sent)
            assert NIGHT[kind] * HOUR <= t0 % DAY <= NIGHT[kind] * HOUR + 1800
            todo = _todo(r, kind, t0)
            assert w.todo == sorted(w.todo) and (set(w.todo) <= set(todo) if kind == "audit"
                                                 else w.todo == todo)
            assert all(r.times[i] < r.times[j] for (_, _, i), (_, _, j)
                       in itertools.pairwise(w.sent))
            assert len(w.todo) == min(len(todo), round(36 * SCALE)) or kind != "audit"
            ncue = len(st.cues[kind])
            assert [(c, k) for c, k, _ in w.sent] == [(c, k) for c in w.todo
                                                     for k in range(ncue)]
            for c, k, i in w.sent:
                file = r.claims[c].file_at(r.times[i])
                assert r.meta[i] == (kind, c, k, [*st.heads[kind], *file, st.cues[kind][k]])
    for i, j in st.flags:
        assert r.meta[i][:3] == ("fraud", r.meta[j][1], 1) and i > j
        assert r.trace[i][:len(r.trace[j])] == r.trace[j]
        assert r.meta[i][3][-1] == st.deep_cue
    assert sum(len(w.todo) for w in _walks(r, "audit")) >= 10


@pytest.mark.parametrize("seed", SEEDS)
def test_the_cat_team_walks_the_storm_claims(seed):
    """On day 1 at 15..17 the CAT team reviews the reserves of every storm claim opened so
    far, oldest first: the reserve rubric, the bulletin as it stands, the file, the cue."""
    r, st = _small(seed), _small(seed).state
    (w,) = _walks(r, "cat_reserve")
    t0 = w.start
    assert r.times[w.sent[0][2]] == t0
    assert DAY + 15 * HOUR <= t0 <= DAY + 17 * HOUR
    assert w.todo == [c for c, claim in enumerate(r.claims) if claim.cat and claim.opened <= t0]
    assert [c for c, _, _ in w.sent] == w.todo and len(w.todo) >= 30
    for c, _, i in w.sent:
        t = r.times[i]
        segs = [*st.heads["reserve"], *r.storm.bulletin.at(t), *r.claims[c].file_at(t),
                st.cues["cat_reserve"][0]]
        assert r.meta[i] == ("cat_reserve", c, 0, segs)
