"""bench/heldout_marketplace.py: the held-out shape marketplace has the properties its docstring
names (bench.heldout replays it as one of SHAPES)."""

from __future__ import annotations

import itertools
from collections import Counter, defaultdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench import heldout_marketplace_parts as parts
from bench.heldout_fewshot import BLOCK
from bench.heldout_marketplace import KINDS, generate, marketplace
from bench.heldout_marketplace_jobs import JOB_AT
from tests.bench.shape_sizes import check_size
from tests.bench.trace_parts import check_full_blocks, common, registered_small_runs, tokens

SHOPPERS = ("qa", "assist", "support")
HOUR, DAY = 3600.0, 86400.0


@pytest.fixture(scope="module")
def run():
    return generate(1, 0.25)


@pytest.fixture(scope="module")
def full():
    r = generate(2)
    assert r.times[-1] > 2.5 * DAY and len(r.nights) >= 3
    return r


def _system(r, i):
    """What request ``i`` starts with: its kind's prompt (and a shopper's storefront line)."""
    kind, key = r.meta[i][:2]
    if kind in SHOPPERS:
        return r.convs[key].system
    return [r.heads["seller" if kind == "upload" else kind]]


def _rest(r, i):
    """Request ``i``'s segments after its system part."""
    return r.meta[i][3][len(_system(r, i)):]


def _qa(r):
    """(request, product, storefront) of every product question."""
    return [(i, r.convs[m[1]].product, r.convs[m[1]].locale)
            for i, m in enumerate(r.meta) if m[0] == "qa"]


def test_registered_deterministic_and_seeded():
    runs = registered_small_runs("marketplace", marketplace, generate)
    kinds = [{m[0] for m in small.meta} for small in runs]
    assert all(k >= {"qa", "assist", "reviews"} for k in kinds)
    assert set().union(*kinds) == set(KINDS)


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(1, 100_000), scale=st.sampled_from([0.02, 0.03, 0.05]))
def test_any_seed_and_scale_starts_every_prompt_with_its_head(seed, scale):
    r = generate(seed, scale)
    assert len(r.trace) == int(9000 * scale) and all(r.trace)
    assert r.times == sorted(r.times) and r.times[0] >= 0
    for i, m in enumerate(r.meta):
        head = _system(r, i)
        assert m[3][:len(head)] == head
        if m[0] in SHOPPERS:
            assert head[:2] == [r.heads[m[0]], r.lines[r.convs[m[1]].locale]]


def test_block_ids_are_the_full_blocks_of_the_segments(run):
    check_full_blocks(run)


def test_a_price_or_stock_change_makes_the_pages_later_blocks_new(run):
    cat, seen = run.catalog, {}
    changed = same = 0
    for i, p, loc in _qa(run):
        page = run.meta[i][3][2:6]
        assert page == cat.page(p, loc, run.times[i])[:2] + page[2:]
        assert page[2] == cat.products[p].descriptions[loc]
        j = seen.get((p, loc))
        seen[p, loc] = i
        if j is None:
            continue
        before = run.meta[j][3][2:6]
        head = tokens(run.meta[i][3][:3]) // BLOCK
        if cat.version(p, run.times[j]) != cat.version(p, run.times[i]):
            assert before[1] != page[1] and common(run.trace[i], run.trace[j]) == head
            changed += 1
        elif before == page:
            assert common(run.trace[i], run.trace[j]) >= tokens(run.meta[i][3][:6]) // BLOCK
            same += 1
    assert changed > 20 and same > 20


def test_the_same_product_in_other_storefronts_is_other_content(run):
    first = {}
    pairs = 0
    for i, p, loc in _qa(run):
        for other, j in first.get(p, {}).items():
            if other != loc:
                assert run.meta[i][3][2] != run.meta[j][3][2]  # the page's head
                assert common(run.trace[i], run.trace[j]) == run.heads["qa"][1] // BLOCK
                pairs += 1
        first.setdefault(p, {})[loc] = i
    assert pairs > 20


def test_storefronts_and_their_products_follow_the_clock(full):
    asia = [k for k, loc in enumerate(parts.LOCALES) if loc[3] == 2]
    by_hour = {"asia evening": (11, 15), "americas evening": (0, 4)}
    share, home = {}, {}
    for name, (lo, hi) in by_hour.items():
        idx = [(i, p, loc) for i, p, loc in _qa(full) if lo <= parts.hour(full.times[i], 0) < hi]
        share[name] = sum(loc in asia for _, _, loc in idx) / len(idx)
        home[name] = sum(full.catalog.products[p].region == 2 for _, p, _ in idx) / len(idx)
    assert share["asia evening"] > 1.4 * share["americas evening"]
    assert home["asia evening"] > 1.2 * home["americas evening"]


def test_the_nightly_review_job_walks_the_catalog_in_order(full):
    cat = full.catalog
    assert full.nights[0].start == JOB_AT * HOUR
    for night in full.nights:
        if not night.sent:
            continue
        assert parts.hour(night.start, 0.0) == JOB_AT
        assert full.times[night.sent[0]] == night.start
        products = [p for p, _ in night.requests]
        assert products == sorted(products) and list(night.reviews) == sorted(night.reviews)
        for p in night.reviews:
            assert [loc for q, loc in night.requests if q == p] == cat.products[p].locales
            assert cat.products[p].live < night.start
        for k, (i, j) in enumerate(itertools.pairwise(night.sent)):
            assert full.meta[j][2] == k + 1 and full.times[j] > full.times[i]
            shared = 4 if night.requests[k][0] == night.requests[k + 1][0] else 1
            assert common(full.trace[i], full.trace[j]) == tokens(full.meta[i][3][:shared]) // BLOCK
    top = set(cat.ranked[:50])
    walked = [p for night in full.nights for p in night.reviews]
    assert sum(p in top for p in walked) > 0.15 * len(walked)  # the popular get reviews


def test_a_new_review_summary_ends_the_page_from_the_job_on(full):
    for i, p, loc in _qa(full):
        versions = full.catalog.products[p].summaries[loc]
        now = [seg for t, seg in versions if t <= full.times[i]][-1]
        assert full.meta[i][3][5] == now
    renewed = [(p, loc) for night in full.nights for p, loc in night.requests[:len(night.sent)]]
    asked = {(p, loc) for _, p, loc in _qa(full)}
    assert len(set(renewed) & asked) > 50


def _turns(r, conv):
    """The (tool, request indices) of a conversation's turns (one request, or two when the
    turn called a tool)."""
    sent = iter(conv.sent)
    for tool in conv.tools:
        idx = [i for i in itertools.islice(sent, 1 if tool == "none" else 2)]
        if idx:
            yield tool, idx


def test_assistant_sessions_come_back_with_a_grown_context(full):
    gaps = []
    for conv in (c for c in full.convs if c.kind in ("assist", "support")):
        for i, j in itertools.pairwise(conv.sent):
            assert _rest(full, j)[:len(_rest(full, i))] == _rest(full, i)
            assert common(full.trace[i], full.trace[j]) == len(full.trace[i])
        for k in conv.sittings[1:]:
            i, j = conv.sent[k - 1], conv.sent[k]
            gaps.append((conv.kind, (full.times[j] - full.times[i]) / HOUR))
            note = full.meta[j][3][len(full.meta[i][3]) + 1]  # after the reply: the note
            assert note[1] >= 40 and note not in full.meta[i][3]
    assist = [g for kind, g in gaps if kind == "assist"]
    assert sum(g < 4 for g in assist) >= 5 and sum(g > 0.6 * 24 for g in assist) >= 2
    assert any(kind == "support" for kind, _ in gaps)


def test_the_cart_grows_and_views_open_product_pages(full):
    carts = views = 0
    for conv in (c for c in full.convs if c.kind == "assist"):
        k = v = 0
        for tool, idx in _turns(full, conv):
            first, second = (full.meta[i][3] for i in (idx * 2)[:2])
            result = second[len(first) + 1:]  # after the tool call
            if tool == "cart":
                k += 1
                assert len(idx) == 1 or result == [(result[0][0], 40 + 45 * k)]
                carts += len(idx) - 1
            elif tool == "view":
                p, v = conv.viewed[v], v + 1
                summaries = full.catalog.products[p].summaries[conv.locale]
                if len(idx) == 2:
                    page = full.catalog.page(p, conv.locale, full.times[idx[1]])
                    assert result[:3] == page[:3] and result[3] in [s for _, s in summaries]
                    views += 1
    assert carts > 20 and views > 50


def test_flash_sales_and_viral_items_spike_their_products(full):
    asked = defaultdict(list)
    for i, p, _ in _qa(full):
        asked[p].append(full.times[i])
    end = full.times[-1]
    during = before = 0
    kinds = Counter()
    for b in full.boosts:
        length = HOUR if b.kind == "flash" else 4 * HOUR
        lo = b.start + b.rise
        if lo + length > end or b.start < length:
            continue
        kinds[b.kind] += 1
        during += sum(lo <= t < lo + length for t in asked[b.product])
        before += sum(b.start - length <= t < b.start for t in asked[b.product])
        if b.kind == "flash":
            changes = full.catalog.products[b.product].changes
            assert all(b.start + k * 900 in changes for k in range(5))
    assert kinds["flash"] >= 5 and kinds["viral"] >= 2
    assert during > 4 * max(1, before), (during, before)


def test_sellers_list_new_products_in_batches_before_they_go_on_sale(full):
    cat, launched = full.catalog, set()
    for b, batch in enumerate(full.batches):
        seller = full.sellers[batch.seller]
        assert batch.requests == [(p, loc) for p in batch.attributes for loc in seller.locales]
        for k, (i, j) in enumerate(itertools.pairwise(batch.sent)):
            assert full.meta[j][:3] == ("listing", b, k + 1) and full.times[j] > full.times[i]
            same = batch.requests[k][0] == batch.requests[k + 1][0]
            assert common(full.trace[i], full.trace[j]) == tokens(
                full.meta[i][3][:3 if same else 2]) // BLOCK
        if batch.sent and len(batch.sent) == len(batch.requests):
            last = full.times[batch.sent[-1]]
            assert all(cat.products[p].live >= last + 0.25 * HOUR for p in batch.attributes)
            launched |= set(batch.attributes)
    picked = [(i, c.product) for c in full.convs if c.kind == "qa" for i in c.sent]
    assert all(full.times[i] >= cat.products[p].live for i, p in picked)
    assert sum(p in launched for _, p in picked) > 20


def test_support_chats_share_a_policy_and_have_their_own_order(full):
    chats = [c for c in full.convs if c.kind == "support"]
    orders = Counter(c.system[3] for c in chats)
    assert len(orders) == len(chats)
    firsts = {}
    pairs = 0
    for c in chats:
        key = (c.issue, c.locale)
        assert c.system[2] == full.policies[c.issue, parts.LOCALES[c.locale][3]]
        if key in firsts:
            i, j = firsts[key], c.sent[0]
            assert common(full.trace[i], full.trace[j]) == tokens(c.system[:3]) // BLOCK
            pairs += 1
        firsts.setdefault(key, c.sent[0])
    assert pairs > 20


def test_bulk_pastes_are_long_and_one_off(full):
    seen = Counter(s for m in full.meta for s in set(m[3]))
    pastes = [m[3] for m in full.meta if m[0] == "upload"]
    assert len(pastes) >= 20
    for segs in pastes:
        assert segs[0] == full.heads["seller"] and 3000 <= segs[1][1] <= 40000
        assert seen[segs[1]] == 1 and seen[segs[2]] == 1


def test_requests_mix_as_documented(full):
    kinds = Counter(m[0] for m in full.meta)
    n = len(full.trace)
    assert 0.3 < kinds["qa"] / n < 0.55 and 0.12 < kinds["assist"] / n < 0.3
    assert 0.04 < kinds["support"] / n < 0.1 and 0.05 < kinds["listing"] / n < 0.3
    assert 0.08 < kinds["reviews"] / n < 0.2 and 0.002 < kinds["upload"] / n < 0.01


def test_size_at_scale_one_and_scaled_down():
    check_size(marketplace, (2_000_000, 2_900_000), (240_000, 380_000), (0.09, 0.16), 0.35)
