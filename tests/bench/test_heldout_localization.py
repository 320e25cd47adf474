"""bench/heldout_localization.py: the held-out shape localization has the properties its
docstring names (bench.heldout replays it as one of SHAPES). Structure only: no hit rate."""

from __future__ import annotations

import functools
import itertools
from collections import Counter

import pytest

from bench.heldout_bi_parts import local_hour, weekday
from bench.heldout_fewshot import BLOCK
from bench.heldout_localization import KINDS, generate, localization
from bench.heldout_localization_jobs import CHECKS
from bench.heldout_localization_parts import DAY, TZ
from tests.bench.trace_parts import (check_chains, common, registered_small_runs,
                                     shared_tokens, tokens)

ROLE = {"push": "translate", "translate": "translate", "release": "translate", "qa": "review",
        "audit": "review", "postedit": "assist"}
GLOSSARY_FLOOR = 2000  # tokens: system prompt, style guide and a glossary of 100+ terms


@functools.cache
def _quarter(seed):
    """The quarter-scale trace of ``seed`` (3 customers, 2250 requests), generated once."""
    return generate(seed, 0.25)


@pytest.fixture(scope="module")
def run():
    return _quarter(1)  # a seed with every kind, a release and audits


@functools.cache
def _items(seed):
    """Request index -> (locale, instruction kind or None for a chat turn) of ``seed``'s run."""
    r, out = _quarter(seed), {}
    for job in r.jobs:
        for k, i in enumerate(job.sent):
            out[i] = job.items[k][1:3]
    for s in r.sessions:
        out.update({i: (s.lang, None) for i in s.sent})
    return out


def _jobs(r, kind):
    return [j for j in r.jobs if j.kind == kind and j.sent]


def test_registered_deterministic_and_seeded():
    runs = registered_small_runs("localization", localization, generate)
    kinds = [{m[0] for m in small.meta} for small in runs]
    assert all(k >= {"push", "translate", "qa", "postedit"} for k in kinds)
    assert all(small.times == sorted(small.times) for small in runs)


@pytest.mark.parametrize("seed", [1, 2])
def test_request_and_block_counts(seed):
    """A quarter-scale trace (3 customers): 2250 requests, 0.6M..1.2M blocks, most of them
    sent more than once, over days."""
    r = _quarter(seed)
    blocks = sum(map(len, r.trace))
    distinct = len({b for q in r.trace for b in q})
    assert len(r.trace) == 2250 and len(r.customers) == 3
    assert 600_000 <= blocks <= 1_200_000
    assert 0.2 < distinct / blocks < 0.45
    assert r.times[-1] > 3 * DAY
    assert {m[0] for m in r.meta} == set(KINDS)


def test_prefix_chains_are_well_formed(run):
    """A block id always follows the same parent, and each request is the full blocks of its
    segments: two requests share exactly the blocks of the segments they start with."""
    check_chains(run, 7)


def test_every_prompt_has_its_head_and_instruction(run):
    """System prompt of the role, the customer's style guide as of then, the locale's section;
    a job's request ends with the instruction for its kind and locale. The style guide was
    edited between two requests of some customer."""
    items, styles = _items(1), set()
    for i, (kind, cid, _, segs) in enumerate(run.meta):
        style = run.customers[cid].style.at(run.times[i])
        assert segs[:1 + len(style)] == [run.system[ROLE[kind]], *style]
        lang, tag = items[i]
        if tag is not None:
            assert segs[-1] == run.instructions[(tag, lang)]
        styles.add((cid, tuple(style)))
    assert len(styles) > len(run.customers)


def test_shared_prefixes_are_shared(run):
    """Every request shares the system prompt's full blocks with every other of its role;
    two customers share nothing more; a language-major job's neighbours in one locale share
    the head and locale section, a document-major job's neighbours the head."""
    sys_blocks = run.system["translate"][1] // BLOCK
    firsts = {}
    for i, m in enumerate(run.meta):
        if ROLE[m[0]] == "translate":
            firsts.setdefault(m[1], i)
            assert run.trace[i][:sys_blocks] == run.trace[firsts[m[1]]][:sys_blocks]
    a, b = list(firsts.values())[:2]
    assert common(run.trace[a], run.trace[b]) == sys_blocks
    items, same = _items(1), Counter()
    for job in (j for j in run.jobs if j.kind in ("translate", "release") and len(j.sent) > 2):
        c = run.customers[job.customer]
        for i, j in itertools.pairwise(job.sent):
            style = c.style.at(run.times[i])
            if style != c.style.at(run.times[j]):
                continue
            head = [run.system["translate"], *style]
            a, b = run.meta[i][3], run.meta[j][3]
            if items[i][0] == items[j][0] and a[len(head)] == b[len(head)]:
                head.append(a[len(head)])  # the locale's section
            assert shared_tokens(a, b) >= tokens(head)
            same[len(head) > 1 + len(style)] += 1
    assert same[True] > 100 and same[False] > 10


def test_jobs_walk_document_or_language_major(run):
    """A release walks one locale's batches after another; a translation job in the
    customer's order; pushes send one batch into every locale; no job has more in flight
    than its workers."""
    for job in run.jobs:
        c, langs = run.customers[job.customer], [it[1] for it in job.items]
        units = list(dict.fromkeys(it[0] for it in job.items))
        if job.kind == "release" or (job.kind == "translate" and c.order == "lang"):
            assert langs == sorted(langs)
        elif job.kind in ("translate", "push") and units:
            assert [it[0] for it in job.items] == [u for u in units for _ in
                                                   range(len(job.items) // len(units))]
        if job.kind == "push":
            assert len(units) == 1 and langs == c.langs
    assert _jobs(run, "release") and _jobs(run, "push")
    assert {run.customers[j.customer].order for j in _jobs(run, "translate")} == {"doc", "lang"}


def test_edits_rerun_only_changed_sections(run):
    """A published edit sends only sections that were not in the page before, each behind
    the section before it (the context); other units are whole pages in chunks."""
    edited = 0
    for job in _jobs(run, "translate"):
        for (ctx, text), _, _, d in job.items:
            versions = [set(v) for _, v in run.docs[d].text.versions]
            if ctx:
                assert len(ctx) == 1 and len(text) == 1
                assert any(text[0] in v and ctx[0] in v for v in versions)
                assert not all(text[0] in v for v in versions)
                edited += 1
    assert edited >= 20


def test_qa_walks_a_finished_job_again_with_each_check(run):
    """A QA job holds its translation job's items in order, each with the customer's checks
    back to back: the two checks of an item share every block but the instruction's."""
    done = [j for j in run.jobs if j.kind in ("push", "translate", "release")
            and len(j.sent) == len(j.items)]
    pairs = 0
    for qa in _jobs(run, "qa"):
        checks = CHECKS[run.customers[qa.customer].qa]
        src = next(j for j in done if j.customer == qa.customer and
                   [it[:2] for it in j.items] == [it[:2] for it in qa.items[::len(checks)]])
        assert run.times[qa.sent[0]] > run.times[src.sent[-1]]
        assert [it[2] for it in qa.items] == list(checks) * len(src.items)
        for i, j in zip(qa.sent[::2], qa.sent[1::2]):
            if len(checks) == 2:
                assert common(run.trace[i], run.trace[j]) >= tokens(run.meta[i][3][:-1]) // BLOCK
                pairs += 1
    assert len(_jobs(run, "qa")) >= 5 and pairs > 20


def test_postedit_chats_resend_the_thread(run):
    """A chat's next turn re-sends the last one whole, then the reply and a new question."""
    grown = 0
    for s in run.sessions:
        for i, j in itertools.pairwise(s.sent):
            a, b = run.meta[i][3], run.meta[j][3]
            style = run.customers[s.customer].style
            if style.at(run.times[i]) == style.at(run.times[j]):  # not edited in between
                assert b[:len(a)] == a and len(b) == len(a) + 2
                assert run.trace[j][:len(run.trace[i])] == run.trace[i]
                grown += 1
    assert grown > 50


def test_audits_walk_the_corpus_at_night_behind_the_glossary(run):
    """An audit is the customer's whole corpus in repository order in one locale, at night
    local time after a working day, and its requests share the head and whole glossary."""
    audits = _jobs(run, "audit")
    items = _items(1)
    for job in audits:
        c = run.customers[job.customer]
        assert [it[3] for it in job.items] == c.docs[:len(job.items)]
        assert len({it[1] for it in job.items}) == 1
        t = run.times[job.sent[0]]
        assert 1 <= local_hour(t, c.tz) < 3 and weekday(t, c.tz) in (1, 2, 3, 4, 5)
        for i, j in itertools.pairwise(job.sent[:20]):
            a, k = run.meta[i][3], job.sent.index(i)
            head = a[:len(a) - 2 * len(job.items[k][0][1]) - 1]  # all but page, translation
            assert items[i][0] == items[j][0]
            assert shared_tokens(a, run.meta[j][3]) >= tokens(head) > GLOSSARY_FLOOR
    assert len({items[j.sent[0]][0] for j in audits}) >= 2  # the locale rotates


def test_releases_come_in_the_morning_and_linguists_in_their_hours(run):
    """A string freeze starts 09:00..10:00 local on a weekday; post-editing chats start in
    the linguists' own hours (most between 07:00 and 21:00 local)."""
    for job in _jobs(run, "release"):
        c, t = run.customers[job.customer], run.times[job.sent[0]]
        assert 9 <= local_hour(t, c.tz) < 10 and weekday(t, c.tz) < 5
    local = [local_hour(run.times[s.sent[0]], TZ[s.lang]) for s in run.sessions]
    assert sum(7 <= h < 21 for h in local) > 0.85 * len(local)


def test_customer_sizes_and_the_mix_of_requests():
    """Zipf-sized customers (sizes 1, 1/2, 1/3 at quarter scale: the largest sends more than
    the smallest's requests) and the documented mix over two seeds."""
    for seed in (1, 2):
        r = _quarter(seed)
        per = Counter(m[1] for m in r.meta)
        sizes = sorted(c.weight for c in r.customers)
        assert sizes[-1] == pytest.approx(3 * sizes[0])
        assert max(per.values()) > 1.5 * min(per.values())
        kinds, n = Counter(m[0] for m in r.meta), len(r.trace)
        assert 0.1 < (kinds["translate"] + kinds["release"]) / n < 0.6
        assert 0.05 < kinds["push"] / n < 0.3 and 0.05 < kinds["postedit"] / n < 0.25
        assert 0.1 < kinds["qa"] / n < 0.6 and 0.05 < kinds["audit"] / n < 0.4
        assert all(5 <= len(c.langs) <= 40 for c in r.customers)
