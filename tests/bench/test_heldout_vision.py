"""bench/heldout_vision.py: the held-out shape vision_mix has the properties its docstring
names (bench.heldout replays it as one of SHAPES)."""

from __future__ import annotations

import statistics
from collections import Counter

import pytest

from bench.heldout_fewshot import BLOCK
from bench.heldout_vision import KINDS, generate, vision_mix
from bench.heldout_vision_parts import (FRAME, MAX_PAGES, REINDEX_GAP, STRIDE, WINDOW,
                                        image_tokens, local_hour)
from tests.bench.shape_sizes import check_size
from tests.bench.trace_parts import (by_kind, common, registered_small_runs, shared_tokens,
                                     tokens)


@pytest.fixture(scope="module")
def run():
    return generate(1, 0.25)


@pytest.fixture(scope="module")
def full():
    return generate(2)


def test_registered_deterministic_and_seeded():
    for small in registered_small_runs("vision_mix", vision_mix, generate):  # every part
        assert {m[0] for m in small.meta} >= set(KINDS) - {"review"}
        assert any(c.viral is not None for c in small.conversations.values())


def test_block_ids_are_the_full_blocks_of_the_segments(run):
    last, first = {}, {}
    for i, m in enumerate(run.meta):
        assert len(run.trace[i]) == tokens(m[3]) // BLOCK
        for j in {i - 1, last.get(m[:2], i - 1)} - {-1}:
            shared = shared_tokens(run.meta[j][3], m[3]) // BLOCK
            assert common(run.trace[j], run.trace[i]) == shared
        last[m[:2]] = i
        assert first.setdefault(tuple(m[3]), run.trace[i]) == run.trace[i]


def test_time_order_and_the_consumer_day(run, full):
    for r in (run, full):
        assert r.times == sorted(r.times) and 22 * 3600 < r.times[-1] < 30 * 3600
    hours = Counter(int(local_hour(t)) for t, m in zip(full.times, full.meta) if m[0] == "chat")
    assert sum(hours[h] for h in range(19, 23)) > 3 * sum(hours[h] for h in range(2, 6))


def test_a_conversation_resends_system_images_and_history(run):
    chats = by_kind(run, "chat", lambda m: m[1])
    long_ones = several = 0
    for c, idx in chats.items():
        conv = run.conversations[c]
        assert idx[0] == c and [run.meta[i][2] for i in idx] == list(range(len(idx)))
        assert len(idx) <= conv.turns <= 8 and run.meta[c][3][0] == conv.system
        assert conv.system in run.systems
        for i, j in zip(idx, idx[1:]):
            a, b = run.meta[i][3], run.meta[j][3]
            assert b[:len(a)] == a and len(b) - len(a) in (2, 3)  # reply, (image), message
            assert run.trace[j][:len(run.trace[i])] == run.trace[i]
            assert run.times[j] - run.times[i] >= 3
        assert all(img in run.meta[idx[-1]][3] for img in conv.images)
        long_ones += len(idx) >= 4
        several += len(conv.images) >= 2
    assert len(chats) > 200 and long_ones > 20 and several > 20
    gaps = [run.times[j] - run.times[i] for idx in chats.values() for i, j in zip(idx, idx[1:])]
    assert statistics.median(gaps) < 120 and max(gaps) > 3600  # seconds to hours


def test_viral_images_recur_across_users_behind_one_system_prompt(run):
    copies = 0
    for v, viral in enumerate(run.virals):
        convs = [c for c, conv in run.conversations.items() if conv.viral == v]
        assert len(convs) == len(viral.uploads) >= 3
        same = [c for c in convs if run.meta[c][3][1] == viral.image]
        copies += len(convs) - len(same)
        assert len(same) >= 3
        for c in convs:
            assert run.meta[c][3][0] == run.systems[0]
            assert run.meta[c][3][1][1] == viral.image[1]  # a copy has as many tokens
        head = (run.systems[0][1] + viral.image[1]) // BLOCK
        for a, b in zip(same, same[1:]):  # different users, different questions
            assert run.meta[a][3][2] != run.meta[b][3][2]
            assert common(run.trace[a], run.trace[b]) == head
        delays = [run.times[c] - viral.start for c in same]
        assert min(delays) >= 0 and statistics.median(delays) < 3 * 3600
    assert copies >= 3


def test_catalog_questions_are_skewed_and_drift(run):
    shop = [i for i, m in enumerate(run.meta) if m[0] == "shop"]
    counts = Counter(run.meta[i][1] for i in shop)
    for i in shop:
        p = run.catalog[run.meta[i][1]]
        assert run.meta[i][3][:3] == [run.templates["qa"], p.image, p.text]
    top = sum(n for _, n in counts.most_common(len(run.catalog) // 20))
    assert top > 0.3 * len(shop) and len(counts) > 0.5 * len(run.catalog)
    old = [i for i in shop if run.catalog[run.meta[i][1]].born < 0]  # ranks shift by trends
    third = len(old) // 3
    early = Counter(run.meta[i][1] for i in old[:third]).most_common(5)
    late = Counter(run.meta[i][1] for i in old[-third:]).most_common(5)
    assert len({p for p, _ in early} & {p for p, _ in late}) <= 1
    new = {p for p, prod in enumerate(run.catalog) if prod.born >= 0}
    assert len(new & set(counts)) > 0.5 * len(new)  # promoted new arrivals get asked about


def test_new_products_are_ingested_by_three_tasks(run):
    ingest = by_kind(run, "ingest", lambda m: m[1])
    born = [p for p, prod in enumerate(run.catalog) if prod.born >= 0]
    assert sorted(ingest) == born and len(born) >= 10
    for p, idx in ingest.items():
        prod = run.catalog[p]
        assert 8 <= local_hour(prod.born) < 24 and run.times[idx[0]] == prod.born
        assert [run.meta[i][2] for i in idx] == [0, 1, 2]
        for i in idx:
            t = run.meta[i][2]
            assert run.meta[i][3] == [run.templates["ingest"][t], prod.image, prod.text]


def test_the_nightly_reindex_walks_the_catalog_once_in_order(run):
    idx = [i for i, m in enumerate(run.meta) if m[0] == "reindex"]
    start = run.times[idx[0]]
    assert abs(local_hour(start) - 1.0) < 1e-6
    before = [p for p, prod in enumerate(run.catalog) if prod.born < start]
    assert [run.meta[i][1] for i in idx] == run.reindex == before  # once, in catalog order
    assert [run.meta[i][2] for i in idx] == list(range(len(idx)))
    gaps = {round(run.times[j] - run.times[i], 6) for i, j in zip(idx, idx[1:])}
    assert gaps == {REINDEX_GAP}
    attrs = {run.meta[i][1]: i for i, m in enumerate(run.meta) if m[0] == "ingest" and m[2] == 2}
    again = 0
    for i in idx:
        p = run.catalog[run.meta[i][1]]
        assert run.meta[i][3] == [run.templates["ingest"][2], p.image, p.text]
        if run.meta[i][1] in attrs:  # ingested the evening before: the same request
            assert run.trace[attrs[run.meta[i][1]]] == run.trace[i]
            again += 1
    assert again >= 1 and len(idx) > 150


def test_video_windows_overlap_but_share_only_the_system_prompt(full):
    jobs = by_kind(full, "video", lambda m: m[1])
    system = full.templates["video"]
    assert sorted(jobs) == list(range(len(full.jobs)))
    for j, idx in jobs.items():
        job, n = full.jobs[j], len(full.jobs[j].frames)
        if j < len(full.jobs) - 1:
            assert len(idx) == (n - WINDOW) // STRIDE + 1  # the last may be cut by the end
        for w, i in enumerate(idx):
            frames = list(job.frames[w * STRIDE:w * STRIDE + WINDOW])
            assert full.meta[i][2] == w and full.meta[i][3] == [system, *frames, job.task]
        for i, k in zip(idx, idx[1:]):
            a, b = full.meta[i][3][1:-1], full.meta[k][3][1:-1]
            assert a[STRIDE:] == b[:WINDOW - STRIDE]  # overlapping frames...
            assert common(full.trace[i], full.trace[k]) == system[1] // BLOCK  # ...not shared
    again = [j for j, job in enumerate(full.jobs) if job.first is not None]
    assert len(again) >= 3
    whole = (system[1] + WINDOW * FRAME) // BLOCK
    for j in again:
        old = full.jobs[full.jobs[j].first]
        assert old.frames == full.jobs[j].frames and old.task != full.jobs[j].task
        assert full.times[jobs[j][0]] - full.times[jobs[full.jobs[j].first][-1]] >= 600
        for i, k in zip(jobs[full.jobs[j].first], jobs[j]):
            assert common(full.trace[i], full.trace[k]) == whole


def test_ocr_questions_resend_the_pages_before_them(full):
    docs = by_kind(full, "ocr", lambda m: m[1])
    system = full.templates["ocr"]
    multi = split = 0
    for d, idx in docs.items():
        doc = full.docs[d]
        pages = [pg for part in doc.parts for pg in part]
        assert [full.meta[i][2] for i in idx] == list(range(len(idx))) and len(idx) <= len(pages)
        assert all(len(part) <= MAX_PAGES for part in doc.parts)
        assert {pg[1] for pg in pages} <= {image_tokens(6), image_tokens(3)}
        for p, i in enumerate(idx):
            k = p % MAX_PAGES + 1
            assert full.meta[i][3][:-1] == [system, *doc.parts[p // MAX_PAGES][:k]]
        for p, (i, j) in enumerate(zip(idx, idx[1:])):
            k = 0 if (p + 1) % MAX_PAGES == 0 else p % MAX_PAGES + 1
            assert common(full.trace[i], full.trace[j]) == (system[1] + k * pages[0][1]) // BLOCK
        multi += len(idx) >= 3
        split += len(doc.parts) > 1
    assert multi >= 20 and split >= 3
    reviews = [i for i, m in enumerate(full.meta) if m[0] == "review"]
    assert len(reviews) >= 10
    for i in reviews:
        doc = full.docs[full.meta[i][1]]
        assert full.meta[i][3][:-1] == [system, *doc.parts[0]]
        assert full.times[i] > full.times[docs[full.meta[i][1]][-1]]


def test_requests_mix_as_documented(full):
    kinds = Counter(m[0] for m in full.meta)
    n = len(full.trace)
    assert 0.32 < kinds["chat"] / n < 0.43 and 0.32 < kinds["shop"] / n < 0.43
    assert 0.085 < kinds["reindex"] / n < 0.1 and 0.02 < kinds["ingest"] / n < 0.04
    assert 0.05 < kinds["video"] / n < 0.12 and 0.03 < kinds["ocr"] / n < 0.06
    assert 0 < kinds["review"] / n < 0.01


def test_size_at_scale_one_and_scaled_down():
    check_size(vision_mix, (600_000, 760_000), (205_000, 285_000), (0.29, 0.41), 0.3)
