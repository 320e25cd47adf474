"""bench/heldout_legal_review.py: the held-out shape legal_review has the properties its
docstring names (bench.heldout replays it as one of SHAPES). Structure only: no hit rate."""

from __future__ import annotations

import functools
import itertools
import math
from collections import Counter, defaultdict

import pytest

from bench.heldout_bi_parts import local_hour
from bench.heldout_fewshot import BLOCK
from bench.heldout_legal_desk import CITES, DOC_CAP
from bench.heldout_legal_jobs import QC_SHARE
from bench.heldout_legal_parts import DAY, HOUR, MATTER_KINDS, first_change
from bench.heldout_legal_review import BATCH, KINDS, LAWYER, generate, legal_review
from tests.bench.trace_parts import (by_kind, check_chains, common, registered_small_runs,
                                     shared_tokens, tokens)

BOOK = ("draft", "issues")  # the kinds with the firm's playbook after its profile


@functools.cache
def _quarter(seed):
    """The quarter-scale trace of ``seed`` (4 firms, 2250 requests), generated once."""
    return generate(seed, 0.25)


@pytest.fixture(scope="module")
def run():
    return _quarter(5)  # a seed with discovery and an amended protocol


def _firm(r, i):
    return r.firms[r.matters[r.meta[i][1]].firm]


def _book(r, i):
    """The playbook versions request ``i``'s firm keeps for its matter's practice."""
    return _firm(r, i).playbooks[MATTER_KINDS[r.matters[r.meta[i][1]].kind]]


def _head(r, i):
    """What request ``i`` must start with: the system prompt, then for a lawyer's request the
    firm's profile, the playbook as of its time (drafting, issues), the task, the matter's
    header; for a batch request the task."""
    kind, mid, _, _ = r.meta[i]
    if kind in BATCH:
        return [r.system, r.tasks["extract" if kind == "extract" else "review"]]
    book = _book(r, i).at(r.times[i]) if kind in BOOK else []
    return [r.system, _firm(r, i).profile, *book, r.tasks[kind], r.matters[mid].header]


def test_registered_deterministic_and_seeded():
    runs = registered_small_runs("legal_review", legal_review, generate)
    kinds = [{m[0] for m in small.meta} for small in runs]
    assert all(k >= {"ask", "draft", "summary", "redline"} for k in kinds)
    assert set().union(*kinds) == set(KINDS)
    assert all(small.times == sorted(small.times) for small in runs)


@pytest.mark.parametrize("seed", [1, 2])
def test_request_and_block_counts(seed):
    """A quarter-scale trace (4 firms): a quarter of the requests and of the 3.1M..3.9M
    blocks a full one has, most blocks sent more than once, over days."""
    r = _quarter(seed)
    blocks = sum(map(len, r.trace))
    distinct = len({b for q in r.trace for b in q})
    assert len(r.trace) == 2250 and len(r.firms) == 4
    assert 600_000 <= blocks <= 1_500_000
    assert 0.2 < distinct / blocks < 0.45
    assert r.times[-1] > 3 * DAY


def test_prefix_chains_are_well_formed(run):
    """A block id always follows the same parent (none for a first block), and each request
    is the full blocks of its segments: two requests share exactly the blocks of the
    segments they start with."""
    check_chains(run, 5)


def test_every_prompt_starts_with_the_system_prompt_and_its_head(run):
    heads = set()
    for i, (kind, _, _, segs) in enumerate(run.meta):
        head = _head(run, i)
        assert segs[:len(head)] == head
        if kind in BOOK:
            heads.add((id(_book(run, i)), tuple(segs[2:len(head) - 2])))
    books = {b for b, _ in heads}
    assert len(heads) > len(books)  # a playbook was edited between two of its requests


def test_a_playbook_edit_makes_every_later_section_new(run):
    """Across an edit, two requests of the firm and practice share the system prompt, the
    profile and the playbook's sections before the first changed one, nothing after."""
    users = defaultdict(list)
    for i, m in enumerate(run.meta):
        if m[0] in BOOK:
            users[id(_book(run, i))].append(i)
    seen = 0
    for ids in users.values():
        for i, j in itertools.pairwise(ids):
            a, b = _book(run, i).at(run.times[i]), _book(run, j).at(run.times[j])
            if a != b:
                k = first_change(a, b)
                expect = tokens([run.system, _firm(run, i).profile, *a[:k]])
                assert shared_tokens(run.meta[i][3], run.meta[j][3]) == expect
                seen += 1
    assert seen >= 3


def test_redlines_send_the_old_version_then_the_new(run):
    """A redline holds two consecutive versions of a negotiated contract in full, the second
    mostly the first's sections (1..8 edits); a playbook review of the newer follows it."""
    after: dict[tuple, float] = {}
    n = 0
    for i in by_kind(run, "redline", lambda m: 0)[0]:
        d, segs = run.meta[i][2], run.meta[i][3]
        rest = segs[len(_head(run, i)):]
        v = [s for _, s in run.docs[d].text.versions]
        k = next(k for k in range(1, len(v)) if rest == [*v[k - 1], *v[k]])
        assert len(set(v[k]) - set(v[k - 1])) <= 8 and run.times[i] >= \
            run.docs[d].text.versions[k][0]
        after[(d, tuple(v[k]))] = run.times[i]
        n += 1
    for i in by_kind(run, "issues", lambda m: 0)[0]:
        rest = tuple(run.meta[i][3][len(_head(run, i)):])
        assert after[(run.meta[i][2], rest)] <= run.times[i]
    assert n > 50 and len(by_kind(run, "issues", lambda m: 0)[0]) > 20


def test_negotiations_stop_at_signing(run):
    """No version of a negotiated contract is made after its matter's signing date, and the
    rounds come once a day or more often."""
    rounds = 0
    for m in run.matters:
        for d in m.negotiated:
            times = [t for t, _ in run.docs[d].text.versions if t > 0]
            assert times == sorted(times)
            assert not m.deadlines or all(t <= max(m.deadlines) for t in times)
            rounds += len(times)
    assert rounds > 0.5 * sum(len(m.negotiated) for m in run.matters) * run.times[-1] / DAY


def _strip(r, i):
    """Request ``i``'s segments without its playbook (a session's turns agree on the rest)."""
    segs = r.meta[i][3]
    if r.meta[i][0] != "draft":
        return segs
    n = len(_book(r, i).at(r.times[i]))
    return [*segs[:2], *segs[2 + n:]]


def test_sessions_grow_turn_by_turn_and_come_back(run):
    """A session's next turn re-sends the last one whole, then the reply and a new question;
    where the playbook did not change, its blocks start with all of the last one's. Some are
    resumed half a day or more later."""
    resumed = grown = 0
    for s in run.sessions:
        for i, j in itertools.pairwise(s.sent):
            a, b = _strip(run, i), _strip(run, j)
            assert b[:len(a)] == a and len(b) == len(a) + 2
            if run.meta[i][0] == "ask" or _book(run, i).at(run.times[i]) == \
                    _book(run, j).at(run.times[j]):
                assert run.trace[j][:len(run.trace[i])] == run.trace[i]
            grown += 1
            resumed += run.times[j] - run.times[i] > 12 * HOUR
    assert grown > 500 and resumed >= 10


def test_ask_sessions_hold_popular_documents_in_workspace_order(run):
    """The documents picked when a session starts, in the matter's workspace order, at most
    DOC_CAP tokens unless a single one is larger; the negotiated agreements (a small part of a
    deal's documents) are picked far more than their share."""
    picked = Counter()
    for s in (s for s in run.sessions if s.kind == "ask"):
        m, t = run.matters[s.matter], run.times[s.sent[0]]
        at = [m.docs.index(d) for d in s.docs]
        assert at == sorted(at)
        assert s.base == [x for d in s.docs for x in run.docs[d].body(t)]
        assert len(s.docs) <= 1 or tokens(s.base) <= DOC_CAP
        if m.kind == "deal":
            picked.update(d in m.negotiated for d in s.docs)
    deals = [m for m in run.matters if m.kind == "deal"]
    docs = sum(len(m.docs) for m in deals)
    share = sum(len(m.negotiated) for m in deals) / docs
    assert share < 0.15 and picked[True] / sum(picked.values()) > 3 * share


def _job_docs(job):
    return list(dict.fromkeys(d for d, _ in job.items))


def test_extraction_walks_the_data_room_in_order(run):
    """A walk's items are its documents in data-room order (a contiguous run of the room),
    every column group of a document in a row, sent in that order; a document's groups share
    the document's blocks."""
    walks = 0
    for j, job in enumerate(run.jobs):
        if job.kind != "extract":
            continue
        room, docs = run.matters[job.matter].room, _job_docs(job)
        start = room.index(docs[0])
        assert room[start:start + len(docs)] == docs
        assert job.items == [(d, g) for d in docs for g in range(len(job.groups))]
        for k, i in enumerate(job.sent):
            d, g = job.items[k]
            body = run.docs[d].body()
            assert run.meta[i][3] == [run.system, run.tasks["extract"], *body, job.groups[g]]
            if g:
                n = tokens([run.system, run.tasks["extract"], *body]) // BLOCK
                assert common(run.trace[i], run.trace[job.sent[k - 1]]) >= n
        walks += 1
    assert walks >= 4


def test_added_columns_walk_the_same_documents_again():
    """A walk of added columns re-sends every document of the room behind the same head, so
    its requests share each document's blocks with the first walk's."""
    r = _quarter(1)  # a seed whose first walk and an added-column walk are in the trace
    firsts: dict[tuple[int, int], int] = {}
    again = 0
    for job in r.jobs:
        if job.kind != "extract":
            continue
        for k, i in enumerate(job.sent):
            d = job.items[k][0]
            if (job.matter, d) in firsts and len(job.groups) == 1:
                n = tokens([r.system, r.tasks["extract"], *r.docs[d].body()]) // BLOCK
                assert common(r.trace[i], r.trace[firsts[(job.matter, d)]]) == n
                again += 1
            firsts.setdefault((job.matter, d), i)
    assert again >= 20


def _review_prompt(r, job, k):
    """The review prompt of job ``job``'s ``k``-th request: the protocol as of its time, then
    the document."""
    i = job.sent[k]
    protocol = r.matters[job.matter].protocol.at(r.times[i])
    return [r.system, r.tasks["review"], *protocol, *r.docs[job.items[k][0]].body()]


def test_discovery_review_walks_a_production_behind_the_protocol(run):
    """One request a document in Bates order behind the protocol as of then; another
    custodian's copy of a document is sent again; template records share their head."""
    copies = 0
    seen: set[tuple[int, int]] = set()
    heads = Counter()
    for job in (j for j in run.jobs if j.kind == "review"):
        for k, i in enumerate(job.sent):
            d = job.items[k][0]
            assert run.meta[i][3] == _review_prompt(run, job, k)
            copies += (job.matter, d) in seen
            seen.add((job.matter, d))
            heads[run.docs[d].head] += 1
    assert copies >= 10
    assert sum(n > 1 for h, n in heads.items() if h is not None) >= 3


def test_an_amended_protocol_makes_its_later_sections_new(run):
    """Across an amendment, two review or QC requests of the matter share the system prompt,
    the task and the protocol's sections before the changed one, nothing after."""
    amended = 0
    for mid, ids in by_kind(run, "review", lambda m: m[1]).items():
        ids = sorted(ids + by_kind(run, "qc", lambda m: m[1]).get(mid, []))
        protocol = run.matters[mid].protocol
        for a, b in itertools.pairwise(ids):
            pa, pb = protocol.at(run.times[a]), protocol.at(run.times[b])
            if pa != pb:
                n = tokens([run.system, run.tasks["review"], *pa[:first_change(pa, pb)]])
                assert shared_tokens(run.meta[a][3], run.meta[b][3]) == n
                amended += 1
    assert amended >= 1


def test_qc_samples_a_review_hours_later_in_bates_order(run):
    """A QC job: QC_SHARE of a finished review's documents (at least 5) in its order, 2 or
    more hours after its last request, each the review prompt then the QC task."""
    reviews = [j for j in run.jobs if j.kind == "review" and len(j.sent) == len(j.items)]
    checked = 0
    for job in (j for j in run.jobs if j.kind == "qc"):
        docs = _job_docs(job)
        review = next(r for r in reviews if r.matter == job.matter and
                      set(docs) <= {d for d, _ in r.items} and
                      run.times[r.sent[-1]] < run.times[job.sent[0]])
        order = [d for d, _ in review.items]
        assert len(job.items) == min(len(order), max(5, math.ceil(QC_SHARE * len(order))))
        assert [order.index(d) for d in docs] == sorted(order.index(d) for d in docs)
        assert run.times[job.sent[0]] - run.times[review.sent[-1]] >= 2 * HOUR
        for i in job.sent:
            assert run.meta[i][3][-2] == run.tasks["qc"]
        checked += 1
    assert checked >= 3


def test_citation_checks_resend_the_brief(run):
    """A check is one request per CITES tokens of a brief version, one after another, each the
    whole brief then a citation group, so they share all the brief's blocks; every check comes
    before the brief's deadline."""
    checks: list[list[int]] = []
    for i in by_kind(run, "cite", lambda m: 0)[0]:
        prev = checks[-1][-1] if checks else None
        if prev is not None and run.meta[prev][2] == run.meta[i][2] and \
                run.meta[prev][3][:-1] == run.meta[i][3][:-1] and run.times[i] - \
                run.times[prev] < 30:
            checks[-1].append(i)
        else:
            checks.append([i])
    whole = 0
    for check in checks:
        b = run.meta[check[0]][2]
        m = run.matters[run.meta[check[0]][1]]
        brief = run.meta[check[0]][3][len(_head(run, check[0])):-1]
        assert brief in [s for _, s in run.docs[b].text.versions]
        assert run.times[check[-1]] < m.deadlines[m.briefs.index(b)]
        for i, j in itertools.pairwise(check):
            assert common(run.trace[i], run.trace[j]) >= tokens(run.meta[i][3][:-1]) // BLOCK
        whole += len(check) == math.ceil(tokens(brief) / CITES)
    assert whole >= 0.9 * len(checks) and len(checks) >= 10


def test_deadlines_bring_bursts_and_night_work(run):
    """A matter's lawyers send more in the 24 h before a deadline than in a day three to four
    days before it, and in a crunch a larger share of it at night."""
    lawyer = [i for i, m in enumerate(run.meta) if m[0] in LAWYER]
    near = far = 0
    night = defaultdict(lambda: [0, 0])
    for i in lawyer:
        m, t = run.matters[run.meta[i][1]], run.times[i]
        for d in (d for d in m.deadlines if d < run.times[-1]):
            near += 0 <= d - t < 24 * HOUR
            far += 72 * HOUR <= d - t < 96 * HOUR
        h = local_hour(t, run.firms[m.firm].tz)
        night[m.crunch(t)][0] += h < 7
        night[m.crunch(t)][1] += 1
    assert near > 2 * far > 0
    assert night[True][0] / night[True][1] > 2 * night[False][0] / night[False][1]


def test_lawyers_work_in_their_time_zones(run):
    """Sessions and uploads start in the firm's working hours (outside a crunch), so firms 3 h
    or more apart peak at other UTC hours."""
    starts = [s.sent[0] for s in run.sessions] + by_kind(run, "summary", lambda m: 0)[0]
    local = []
    for i in starts:
        m = run.matters[run.meta[i][1]]
        if not m.crunch(run.times[i]):
            tz = run.firms[m.firm].tz
            local.append((local_hour(run.times[i], tz), tz))
    assert sum(7 <= h < 23 for h, _ in local) > 0.9 * len(local)
    peaks = {tz: Counter(int(h) for h, z in local if z == tz).most_common(1)[0][0]
             for tz in {tz for _, tz in local}}
    assert all(8 <= p <= 18 for p in peaks.values())
    far = [(a, b) for a, b in itertools.combinations(peaks, 2) if abs(a - b) >= 3]
    assert far and all((peaks[a] - a) % 24 != (peaks[b] - b) % 24 for a, b in far)


def test_firm_sizes_and_the_mix_of_requests(run):
    """Zipf-sized firms (the largest sends several times the smallest's requests) and the
    documented mix: lawyers' questions and drafting, batch extraction and review."""
    per_firm = Counter(run.matters[m[1]].firm for m in run.meta)
    assert max(per_firm.values()) > 3 * min(per_firm.values())
    kinds = Counter(m[0] for m in run.meta)
    n = len(run.trace)
    assert 0.15 < kinds["ask"] / n < 0.45 and 0.08 < kinds["draft"] / n < 0.3
    assert 0.15 < sum(kinds[k] for k in BATCH) / n < 0.7
    assert 0.02 < kinds["redline"] / n < 0.12 and 0.01 < kinds["summary"] / n < 0.06
    assert kinds["cite"] > 0 and kinds["issues"] > 0 and kinds["qc"] > 0
