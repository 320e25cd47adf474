"""bench/heldout_compaction_chat.py: the held-out shape compaction_chat has the properties its
docstring names (bench.heldout replays it as one of SHAPES)."""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict

import pytest

from bench.heldout_compaction_chat import DAYS, compaction_chat, generate
from bench.heldout_fewshot import BLOCK
from tests.bench.shape_sizes import check_size
from tests.bench.trace_parts import common, registered_small_runs, shared_tokens, tokens

KINDS = {"turn", "compact", "chunk", "extract", "retry"}


@pytest.fixture(scope="module")
def run():
    return generate(1, 0.3)


def _day(run, n):
    return min(DAYS - 1, n * DAYS // len(run.trace))


def _system(run, i):
    """The system prompt (and custom instructions) chat request ``i`` must start with."""
    user, a = run.owners[run.meta[i][1]]
    app = run.apps[a]
    out = [app.head, run.dates[_day(run, i)], app.body] if app.dated else [app.head, app.body]
    return out + [run.custom[user]] if run.custom[user] else out


def _groups(run, kinds):
    """key -> the indices of its requests of ``kinds``, in order."""
    out = defaultdict(list)
    for i, m in enumerate(run.meta):
        if m[0] in kinds:
            out[m[1]].append(i)
    return out


def _first_use(run):
    """segment -> the first request whose segments hold it."""
    out = {}
    for i, m in enumerate(run.meta):
        for s in m[3]:
            out.setdefault(s, i)
    return out


def test_registered_deterministic_and_seeded():
    for small in registered_small_runs("compaction_chat", compaction_chat, generate):
        assert {m[0] for m in small.meta} == KINDS and len(small.nights) == DAYS
        assert any(m[0] == "extract" and m[2] >= 0 for m in small.meta)  # a batch


def test_block_ids_are_the_full_blocks_of_the_shared_segments(run):
    last = {}
    for i, m in enumerate(run.meta):
        assert len(run.trace[i]) == tokens(m[3]) // BLOCK
        group = ("turn" if m[0] == "compact" else m[0], m[1])  # conversation, job, template
        for j in (i - 1, last.get(group, i - 1)):
            shared = shared_tokens(run.meta[j][3], m[3]) // BLOCK
            assert common(run.trace[j], run.trace[i]) == shared
            assert len(set(run.trace[j]) & set(run.trace[i])) == shared
        last[group] = i


def test_a_turn_resends_the_conversation_so_far(run):
    resent = 0
    for idx in _groups(run, ("turn", "compact")).values():
        assert run.meta[idx[0]][0] == "turn" and run.meta[idx[0]][1] == idx[0]
        for i, j in zip(idx, idx[1:]):
            assert run.meta[j][3][:len(_system(run, j))] == _system(run, j)
            if run.meta[i][0] == "turn" and _day(run, i) == _day(run, j):
                assert run.trace[j][:len(run.trace[i])] == run.trace[i]
                assert len(run.trace[j]) > len(run.trace[i])
                resent += 1
    assert resent > 600


def test_users_come_back_after_minutes_hours_or_days(run):
    minutes = sorted((j - i) / run.rpm for idx in _groups(run, ("turn",)).values()
                     for i, j in zip(idx, idx[1:]))
    assert minutes[len(minutes) // 2] < 10  # within a session
    assert sum(60 <= m < 18 * 60 for m in minutes) > 20  # hours later
    assert sum(m >= 18 * 60 for m in minutes) > 20  # days later
    assert 2.5 < statistics.mean(map(len, _groups(run, ("turn",)).values())) < 5


def test_a_compaction_sends_the_whole_conversation_past_the_threshold(run):
    sends = _groups(run, ("turn", "compact"))
    compactions = 0
    for c, m in enumerate(run.meta):
        if m[0] != "compact":
            continue
        app = run.apps[run.owners[m[1]][1]]
        assert m[3][-1] == app.compact and tokens(m[3][:-1]) > app.limit
        idx = sends[m[1]]
        prev = idx[idx.index(c) - 1]
        assert run.meta[prev][0] == "turn"
        if _day(run, prev) == _day(run, c):  # the last turn, its reply, the instruction
            assert m[3][:len(run.meta[prev][3])] == run.meta[prev][3]
            assert len(m[3]) == len(run.meta[prev][3]) + 2
            assert run.trace[c][:len(run.trace[prev])] == run.trace[prev]
        compactions += 1
    assert compactions > 10


def test_after_a_compaction_a_turn_shares_only_the_system_prompt_and_summary(run):
    sends, first = _groups(run, ("turn", "compact")), _first_use(run)
    for c, m in enumerate(run.meta):
        if m[0] != "compact":
            continue
        t = c + 1  # the waiting turn is the next request
        assert run.meta[t][:2] == ("turn", m[1])
        system = _system(run, t)
        summary = run.meta[t][3][len(system)]
        assert first[summary] == t  # the model's summary: new content
        k = tokens(system) // BLOCK
        earlier = set().union(*(run.trace[i] for i in sends[m[1]] if i < t))
        assert set(run.trace[t]) & earlier <= set(run.trace[t][:k])
        if _day(run, t) == _day(run, c):
            assert common(run.trace[t], run.trace[c]) == k
        idx = sends[m[1]]
        for j in idx[idx.index(t) + 1:]:  # later turns build on the summary
            if run.meta[j][0] == "compact":
                break
            assert run.meta[j][3][len(system)] == summary


def test_a_dated_prompt_is_new_content_from_the_date_on_each_day(run):
    crossed = 0
    for idx in _groups(run, ("turn", "compact")).values():
        app = run.apps[run.owners[run.meta[idx[0]][1]][1]]
        for i, j in zip(idx, idx[1:]):
            if _day(run, i) == _day(run, j):
                continue
            shared = common(run.trace[i], run.trace[j])
            if app.dated:  # only the head's full blocks
                assert shared == app.head[1] // BLOCK
                crossed += 1
            else:  # the whole system prompt, at least
                assert shared >= tokens(_system(run, j)) // BLOCK
    assert crossed > 10
    for i, m in enumerate(run.meta):
        dates = {s for s in m[3] if s in run.dates}
        if m[0] in ("turn", "compact"):
            dated = run.apps[run.owners[m[1]][1]].dated
            assert dates == ({run.dates[_day(run, i)]} if dated else set())


def test_translation_chunks_share_the_glossary_prefix_and_carry_the_previous_translation(run):
    first = _first_use(run)
    uses = Counter(s for m in run.meta for s in m[3])
    jobs = _groups(run, ("chunk",))
    assert len(jobs) > 10
    for j, idx in jobs.items():
        job = run.jobs[j]
        lang = run.languages[job.language]
        assert [run.meta[i][2] for i in idx] == list(range(len(job.chunks)))
        for k, i in enumerate(idx):
            segs = run.meta[i][3]
            assert segs[:2] == [lang.instruction, lang.glossary(i)] and segs[-1] == job.chunks[k]
            if k:  # the previous chunk's translation: model output, only in this request
                assert len(segs) == 4 and first[segs[2]] == i and uses[segs[2]] == 1
                prefix = tokens(segs[:2]) // BLOCK
                same = lang.glossary(i) == lang.glossary(idx[k - 1])
                assert common(run.trace[i], run.trace[idx[k - 1]]) == (
                    prefix if same else lang.instruction[1] // BLOCK)
            else:
                assert len(segs) == 3
        night = max(n for n in run.nights if n <= idx[0])
        assert idx[-1] - night < len(run.trace) / DAYS / 2  # done by the morning


def test_documents_in_two_languages_share_text_but_no_blocks(run):
    pairs = 0
    for r in (run, generate(2, 0.3)):
        by_doc = defaultdict(list)
        for j, idx in _groups(r, ("chunk",)).items():
            by_doc[r.jobs[j].doc].append(idx)
        for jobs in by_doc.values():
            for a, b in zip(jobs, jobs[1:]):
                assert r.meta[a[0]][3][-1] == r.meta[b[0]][3][-1]  # the same first chunk
                assert r.jobs[r.meta[a[0]][1]].language != r.jobs[r.meta[b[0]][1]].language
                assert not {h for i in a for h in r.trace[i]} & {h for i in b for h in r.trace[i]}
                pairs += 1
    assert pairs > 3


def test_a_glossary_revision_makes_later_chunks_share_only_the_instruction():
    checked = 0
    for seed in (1, 2, 3):
        run = generate(seed, 0.3)
        sides = defaultdict(lambda: ([], []))  # language -> (chunks before, after)
        for j, idx in _groups(run, ("chunk",)).items():
            lang = run.languages[run.jobs[j].language]
            for start, glossary in lang.glossaries[1:]:
                assert start % (len(run.trace) // DAYS) == len(run.trace) // DAYS // 2  # noon
                assert all((run.meta[i][3][1] == glossary) == (i >= start) for i in idx)
                for i in idx:
                    sides[run.jobs[j].language][i >= start].append(i)
        for language, (before, after) in sides.items():
            k = run.languages[language].instruction[1] // BLOCK
            assert all(common(run.trace[i], run.trace[j]) == k for i in before for j in after)
            checked += bool(before and after)
    assert checked >= 2


def test_extractions_share_their_templates_schema_and_forms_are_unique(run):
    first, counts = _first_use(run), Counter()
    for i, m in enumerate(run.meta):
        if m[0] != "extract":
            continue
        template = run.templates[m[1]]
        assert m[3][:2] == [run.preamble, template.schema] and len(m[3]) == 3
        assert first[m[3][2]] == i and i >= template.birth
        counts[m[1]] += 1
    top = counts.most_common()
    assert top[0][1] > 10 * top[len(top) // 2][1]  # Zipf-popular templates
    assert any(t.birth for t in run.templates if counts[run.templates.index(t)])
    for i, j in [(i, j) for idx in _groups(run, ("extract",)).values()
                 for i, j in zip(idx, idx[1:])][:500]:
        k = tokens(run.meta[i][3][:2]) // BLOCK
        assert common(run.trace[i], run.trace[j]) == k


def test_batches_send_forms_of_one_template(run):
    batches = defaultdict(list)
    for i, m in enumerate(run.meta):
        if m[0] == "extract" and m[2] >= 0:
            batches[m[2]].append(i)
    assert len(batches) > 5
    for b, idx in batches.items():
        assert idx[0] == b and len(idx) <= 50
        assert {run.meta[i][1] for i in idx} == {run.meta[b][1]}
    forms = sum(m[0] == "extract" for m in run.meta)
    assert 0.4 < sum(map(len, batches.values())) / forms < 0.75


def test_a_retry_resends_the_identical_request_minutes_later(run):
    extracts = sum(m[0] == "extract" for m in run.meta)
    retries = [(i, m[1], m[2]) for i, m in enumerate(run.meta) if m[0] == "retry"]
    assert 0.03 < len(retries) / extracts < 0.08
    firsts = set()
    for i, original, attempt in retries:
        assert run.meta[original][0] == "extract" and run.trace[i] == run.trace[original]
        assert 0 < i - original <= 2 * 5 * run.rpm + 4
        if attempt == 1:
            firsts.add(original)
        else:
            assert attempt == 2 and original in firsts
    assert any(a == 2 for _, _, a in retries)


def test_requests_mix_as_documented(run):
    kinds = Counter(m[0] for m in run.meta)
    n = len(run.trace)
    assert 0.45 < (kinds["turn"] + kinds["compact"]) / n < 0.65
    assert 0.22 < kinds["extract"] / n < 0.38 and 0.07 < kinds["chunk"] / n < 0.16


def test_size_at_scale_one_and_scaled_down():
    check_size(compaction_chat, (700_000, 1_050_000), (230_000, 300_000), (0.24, 0.38), 0.35)
