"""bench/heldout_gateway.py: the held-out shape api_gateway has the properties its docstring
names (bench.heldout replays it as one of SHAPES)."""

from __future__ import annotations

import itertools
import statistics
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench import heldout_gateway_parts as parts
from bench.heldout_fewshot import BLOCK, Blocks
from bench.heldout_gateway import KINDS, api_gateway, generate
from tests.bench.shape_sizes import check_size
from tests.bench.trace_parts import by_kind, common, registered_small_runs, tokens

DAY = 86400.0


@pytest.fixture(scope="module")
def run():
    return generate(1, 0.25)


@pytest.fixture(scope="module")
def full():
    return generate(3)


def _version(r, c, app, segs):
    """The index of the version of customer ``c``'s ``app`` prompt that ``segs`` starts with."""
    for v, (_, _, prompt) in enumerate(r.customers[c].prompts[app].versions):
        if segs[:len(prompt)] == prompt:
            return v
    raise AssertionError("no version of the prompt")


def _prompted(r):
    """(request index, customer, app, version) of every template call and chat turn."""
    out = []
    for i, m in enumerate(r.meta):
        if m[0] in ("task", "chat"):
            app = m[2] if m[0] == "task" else r.conversations[m[2]].app
            out.append((i, m[1], app, _version(r, m[1], app, m[4])))
    return out


def test_registered_deterministic_and_seeded():
    runs = registered_small_runs("api_gateway", api_gateway, generate)
    for small in runs:  # every part but agents (at least 1 session a day) in a small trace
        assert {m[0] for m in small.meta} >= set(KINDS) - {"agent"}
        assert {m[2] for m in small.meta if m[0] == "eval"} == {0, 1}  # both eval runs
    assert any(m[0] == "agent" for small in runs for m in small.meta)


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(1, 100_000), scale=st.sampled_from([0.01, 0.02, 0.03]))
def test_any_seed_and_scale_is_ordered_whole_blocks_and_isolated(seed, scale):
    r = generate(seed, scale)
    assert len(r.trace) == int(9000 * scale) and all(r.trace) and r.times == sorted(r.times)
    owner = {}
    for q, m in zip(r.trace, r.meta):
        assert len(q) == tokens(m[4]) // BLOCK
        for h in q:  # the provider isolates each customer's cache
            assert owner.setdefault(h, m[1]) == m[1]


def test_block_ids_are_the_full_blocks_of_the_segments(run):
    again, first = Blocks(), {}
    for q, m in zip(run.trace, run.meta):
        assert first.setdefault((m[1], tuple(m[4])), q) == q
    for q, m in itertools.islice(zip(run.trace, run.meta), 300):
        assert len(again.ids(m[1], m[4])) == len(q)


def test_time_order_span_and_the_customers_local_day(full):
    assert full.times == sorted(full.times) and 30 * 3600 < full.times[-1] < 40 * 3600
    hours = Counter()
    for t, m in zip(full.times, full.meta):
        if m[0] == "task":
            hours[int(parts.local_hour(t, full.customers[m[1]].zone))] += 1
    assert sum(hours[h] for h in range(9, 17)) > 2.5 * sum(hours[h] for h in range(8))
    zones = Counter(full.customers[m[1]].zone for m in full.meta if m[0] == "chat")
    assert len(zones) >= 5  # customers from around the world
    weights = Counter(m[1] for m in full.meta)
    top = sum(n for _, n in weights.most_common(10))
    assert len(weights) > 200 and top > 0.3 * len(full.trace)  # many customers, heavy top


def test_clients_send_a_version_once_its_rollout_reaches_them(full):
    both = 0
    for i, c, app, v in _prompted(full):
        versions = full.customers[c].prompts[app].versions
        assert full.times[i] >= versions[v][0]
        if v + 1 < len(versions):
            assert full.times[i] < versions[v + 1][0] + versions[v + 1][1]
        if v and full.times[i] < versions[v][0] + versions[v][1]:
            both += 1  # the new version while the old one is still sent
    assert both >= 5


def test_a_deploy_makes_later_blocks_new_but_keeps_its_head_and_other_customers(full):
    by_version = {}
    for i, c, app, v in _prompted(full):
        by_version.setdefault((c, app, v), i)
    changed = 0
    for (c, app, v), i in by_version.items():
        if v and (c, app, v - 1) in by_version:
            kept = tokens(full.customers[c].prompts[app].versions[v][2][:-1])
            old = full.trace[by_version[c, app, v - 1]]
            assert common(old, full.trace[i]) == kept // BLOCK
            changed += 1
    assert changed >= 10
    deploys = sorted((s, c) for c, cu in enumerate(full.customers) for p in cu.prompts
                     for s, _, _ in p.versions[1:])
    last, straddles = {}, 0  # (customer, app, version) -> its last request
    for i, c, app, v in _prompted(full):
        if (c, app, v) in last:
            h = last[c, app, v]
            prompt = tokens(full.customers[c].prompts[app].versions[v][2]) // BLOCK
            assert full.trace[h][:prompt] == full.trace[i][:prompt]
            straddles += any(full.times[h] < s < full.times[i] and d != c for s, d in deploys)
        last[c, app, v] = i
    assert len(deploys) > 100 and straddles > 100  # others' deploys leave a prompt alone


def test_conversations_resend_their_history(full):
    turns, gaps, switched = 0, [], 0
    for k, idx in by_kind(full, "chat", lambda m: m[2]).items():
        conv = full.conversations[k]
        versions = full.customers[conv.customer].prompts[conv.app].versions
        assert idx == conv.sent and len(idx) <= conv.turns
        for i, j in itertools.pairwise(idx):
            a, b = full.meta[i][4], full.meta[j][4]
            pa = len(versions[_version(full, conv.customer, conv.app, a)][2])
            pb = len(versions[_version(full, conv.customer, conv.app, b)][2])
            assert b[pb:-2] == a[pa:] and len(b) - pb == len(a) - pa + 2  # + reply, message
            if a[:pa] == b[:pb]:
                assert full.trace[j][:len(full.trace[i])] == full.trace[i]
                turns += 1
            else:  # a deploy reached the app's server mid-conversation
                assert common(full.trace[i], full.trace[j]) <= tokens(b[:pb]) // BLOCK
                switched += 1
            gaps.append(full.times[j] - full.times[i])
    assert turns > 500 and switched >= 1
    assert statistics.median(gaps) < 120 and max(gaps) > 3600  # seconds to hours


def test_agent_sessions_grow_keep_their_prompt_and_compact(full):
    calls, compacted = 0, 0
    for k, idx in by_kind(full, "agent", lambda m: m[2]).items():
        s = full.sessions[k]
        assert idx == s.sent
        for i, j in itertools.pairwise(idx):
            a, b = full.meta[i][4], full.meta[j][4]
            assert b[:len(s.prompt)] == s.prompt  # the client's version, all session long
            if i in s.compactions:  # the summary replaces the context
                assert len(b) == len(s.prompt) + 1
                assert common(full.trace[i], full.trace[j]) <= tokens(s.prompt) // BLOCK
                compacted += 1
            else:
                assert b[:len(a)] == a and full.trace[j][:len(full.trace[i])] == full.trace[i]
                calls += 1
    assert calls > 50 and compacted >= 1
    assert max(len(full.trace[i]) for i in itertools.chain(*(s.sent for s in full.sessions))) \
        * BLOCK > 40_000


def test_the_retry_storm_repeats_identical_requests_with_backoff(full):
    storm = full.storm
    sends = by_kind(full, "retry", lambda m: m[2])
    assert len(sends) == len(storm["requests"]) >= 20
    for idx in sends.values():
        assert len(idx) == storm["tries"] and len({tuple(full.trace[i]) for i in idx}) == 1
        assert {full.meta[i][1] for i in idx} == {storm["customer"]}
        assert storm["start"] <= full.times[idx[0]] <= storm["start"] + storm["window"]
        for k, (i, j) in enumerate(itertools.pairwise(idx)):
            delay = min(parts.BACKOFF_CAP, parts.BACKOFF * 2 ** k)
            assert 0.5 * delay <= full.times[j] - full.times[i] <= 1.5 * delay + 1e-6
    firsts = {tuple(full.trace[idx[0]]) for idx in sends.values()}
    assert len(firsts) == len(sends)  # distinct requests, each retried


def test_the_eval_suite_runs_again_a_day_later(full):
    runs = by_kind(full, "eval", lambda m: m[2])
    first, second = runs[0], runs[1]
    assert [full.trace[i] for i in first] == [full.trace[i] for i in second]
    assert [full.meta[i][3] for i in first] == list(range(len(full.evals["items"])))
    start = full.evals["starts"][0]
    assert full.times[first[0]] == start and full.times[second[0]] == start + DAY
    shared = [common(full.trace[i], full.trace[j]) for i, j in itertools.pairwise(first)]
    assert statistics.median(shared) >= 320 // BLOCK  # a task's instruction + 3..10 shots
    assert all(full.times[i] < full.times[second[0]] - 20 * 3600 for i in first)


def test_nightly_batches_share_a_template_at_a_local_night_hour(full):
    jobs = by_kind(full, "batch", lambda m: m[2])
    assert len(jobs) == len(full.batches) == 3
    for b, idx in jobs.items():
        c, template, nights = full.batches[b]
        heads = {tuple(full.trace[i][:template[1] // BLOCK]) for i in idx}
        assert len(heads) == 1 and all(full.meta[i][4][0] == template for i in idx)
        hour = parts.local_hour(nights[0], full.customers[c].zone)
        assert abs(hour - round(hour)) < 1e-6 and 1 <= round(hour) <= 3
        assert len({full.meta[i][4][1] for i in idx}) == len(idx)  # every item new
        assert full.times[idx[0]] == nights[0] and len(idx) >= 300


def test_one_off_documents_are_never_reused(full):
    docs = [i for i, m in enumerate(full.meta) if m[0] == "doc"]
    uses = Counter(h for q in full.trace for h in q)
    for i in docs:
        before = tokens(full.meta[i][4][:-2]) // BLOCK  # the prompt's whole blocks
        assert all(uses[h] == 1 for h in full.trace[i][before:])
    assert len(docs) >= 30 and max(len(full.trace[i]) for i in docs) * BLOCK > 40_000


def test_the_live_working_set_passes_16000_blocks(full):
    diff, last = [0] * (len(full.trace) + 1), {}
    for i, q in enumerate(full.trace):
        for h in set(q):
            if h in last:  # live from its last use to this one
                diff[last[h]] += 1
                diff[i] -= 1
            last[h] = i
    live = list(itertools.accumulate(diff))
    assert max(live) > 20_000 and sum(x > 16_000 for x in live) > 0.3 * len(live)


def test_requests_mix_as_documented(full):
    kinds = Counter(m[0] for m in full.meta)
    n = len(full.trace)
    assert 0.3 < kinds["task"] / n < 0.46 and 0.25 < kinds["batch"] / n < 0.42
    assert 0.12 < kinds["chat"] / n < 0.2 and 0.05 < kinds["eval"] / n < 0.15
    assert 0.01 < kinds["retry"] / n < 0.05 and 0.003 < kinds["doc"] / n < 0.008


def test_size_at_scale_one_and_scaled_down():
    check_size(api_gateway, (700_000, 1_300_000), (150_000, 230_000), (0.14, 0.28), 0.4)
