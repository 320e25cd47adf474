"""bench/heldout_npc.py: the held-out shape npc_world has the properties its docstring names
(bench.heldout replays it as one of SHAPES)."""

from __future__ import annotations

import bisect
import itertools
import statistics
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench import heldout_npc_parts as parts
from bench.heldout_fewshot import BLOCK
from bench.heldout_npc import KINDS, MEMORY_CAP, SUMMARY, generate, npc_world
from tests.bench.shape_sizes import check_size
from tests.bench.trace_parts import (by_kind, check_full_blocks, common, registered_small_runs,
                                     tokens)


@pytest.fixture(scope="module")
def run():
    return generate(1, 0.25)


@pytest.fixture(scope="module")
def full():
    return generate(2)


def _world_at(r, t):
    """The world-state segment current at ``t``."""
    return r.worlds[bisect.bisect_right([w[0] for w in r.worlds], t) - 1][1]


def _lore_blocks(r):
    return r.lore[1] // BLOCK


def _per_minute(r, kind, lo, hi):
    """Requests of ``kind`` a minute in the window lo..hi seconds."""
    return sum(1 for t, m in zip(r.times, r.meta) if m[0] == kind and lo <= t < hi) / (
        (hi - lo) / 60)


def test_registered_deterministic_and_seeded():
    for small in registered_small_runs("npc_world", npc_world, generate):  # every part
        assert {m[0] for m in small.meta} == set(KINDS)
        assert {m[1] for m in small.meta if m[0] == "raid"} == {0, 1}  # both raids


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(1, 100_000), scale=st.sampled_from([0.02, 0.03, 0.05]))
def test_any_seed_and_scale_share_the_lore_and_the_moderation_head(seed, scale):
    r = generate(seed, scale)
    assert len(r.trace) == int(9000 * scale) and all(r.trace) and r.times == sorted(r.times)
    lore, head = _lore_blocks(r), r.templates["mod"][0][1] // BLOCK
    prompts = [q for q, m in zip(r.trace, r.meta) if m[0] != "mod"]
    mods = [q for q, m in zip(r.trace, r.meta) if m[0] == "mod"]
    assert len({tuple(q[:lore]) for q in prompts}) == 1
    assert len({tuple(q[:head]) for q in mods}) == 1
    assert not set(prompts[0][:lore]) & {h for q in mods for h in q}


def test_block_ids_are_the_full_blocks_of_the_segments(run):
    check_full_blocks(run)


def test_time_order_span_and_the_players_day(run, full):
    for r in (run, full):
        assert r.times == sorted(r.times) and 24 * 3600 < r.times[-1] < 28 * 3600
    hours = Counter(int(t // 3600) for t, m in zip(full.times, full.meta) if m[0] == "mod")
    level = {h: parts.online(h * 3600.0) for h in range(24)}
    peak, trough = max(level, key=level.get), min(level, key=level.get)
    assert hours[peak] > 1.6 * hours[trough]


def test_npc_prompts_start_with_the_lore_and_the_current_world(run):
    for t, m in zip(run.times, run.meta):
        segs = m[3]
        if m[0] in ("talk", "raid"):
            assert segs[:2] == [run.lore, _world_at(run, t)]
        elif m[0] == "quest":
            assert segs[:2] == [run.lore, run.templates["quest"]]
        else:
            assert run.lore not in segs
    gaps = [b[0] - a[0] for a, b in zip(run.worlds, run.worlds[1:]) if b[2] == "tick"]
    assert {w[2] for w in run.worlds} == {"start", "tick", "raid", "event", "event over"}
    assert max(gaps) <= 90 * 60 and len(run.worlds) > 20


def test_a_world_regeneration_makes_later_blocks_new_but_keeps_the_lore(run):
    lore = _lore_blocks(run)
    owner = {}
    for q, m in zip(run.trace, run.meta):
        if m[0] in ("talk", "raid"):
            for h in q[lore:]:  # a block after the lore belongs to one world version
                assert owner.setdefault(h, m[3][1]) == m[3][1]
    straddle = 0
    for idx in by_kind(run, "talk", lambda m: m[1]).values():
        for i, j in itertools.pairwise(idx):
            if run.meta[i][3][1] != run.meta[j][3][1]:
                assert common(run.trace[i], run.trace[j]) == lore
                straddle += 1
    assert straddle >= 5


def test_a_visit_resends_its_memory_and_players_come_back(full):
    bonds = by_kind(full, "talk", lambda m: m[1])
    think, away, long_visits = [], [], 0
    for b, idx in bonds.items():
        starts = set(full.bonds[b].visits)
        assert idx[0] in starts and [full.meta[i][2] for i in idx] == list(range(len(idx)))
        for i, j in itertools.pairwise(idx):
            a, c = full.meta[i][3], full.meta[j][3]
            assert a[2:4] == c[2:4]  # one NPC: region and persona
            if j not in starts:
                assert c[:len(a)][2:] == a[2:] and len(c) == len(a) + 2  # line, reply, line
                think.append(full.times[j] - full.times[i])
            else:
                away.append(full.times[j] - full.times[i])
                _check_memory_kept_or_summarised(a, c)
        long_visits += len(idx) - len(starts) >= 5
    assert statistics.median(think) < 60 and min(think) >= 3
    assert len(away) >= 20 and min(away) >= 900 and statistics.median(away) > 3600
    assert long_visits >= 20


def _check_memory_kept_or_summarised(before, after):
    """A return visit's memory: the last one plus its line and reply, or a summary of it."""
    memory = after[4:-1]
    if memory[:len(before) - 4] == before[4:]:
        assert tokens(memory) <= MEMORY_CAP
    else:
        assert len(memory) == 1 and SUMMARY[0] <= memory[0][1] <= SUMMARY[1]
        assert tokens(before[4:]) + 300 > MEMORY_CAP  # the reply is at most 300 tokens


def test_popular_npcs_are_the_quest_givers_and_merchants(full):
    firsts = Counter(full.bonds[full.meta[i][1]].npc for i, m in enumerate(full.meta)
                     if m[0] == "talk" and m[2] == 0)
    by_rank = Counter()
    for n, c in firsts.items():
        by_rank[min(full.npcs[n].rank, 3)] += c
    assert by_rank[0] > by_rank[1] > by_rank[2] and by_rank[0] > 0.3 * sum(by_rank.values())
    hot = sum(c for n, c in firsts.items() if full.npcs[n].role != "villager")
    share = sum(npc.role != "villager" for npc in full.npcs) / len(full.npcs)
    assert hot / sum(firsts.values()) > 1.5 * share


def test_the_event_pulls_players_to_the_new_zone_and_back(full):
    start, end = full.event
    zone = Counter()
    for i, m in enumerate(full.meta):
        if m[0] == "talk" and m[2] == 0:
            when = "before" if full.times[i] < start else "during" if full.times[i] < end \
                else "after"
            zone[when, full.npcs[full.bonds[m[1]].npc].region == parts.REGIONS] += 1
    assert zone["before", True] == zone["after", True] == 0
    assert zone["during", True] > zone["during", False] and zone["after", False] > 50
    assert 2 * 3600 < end - start <= 5 * 3600 and 16 <= parts.server_hour(start) < 18.001
    assert _per_minute(full, "mod", start, start + 3600) > 1.4 * _per_minute(
        full, "mod", start - 3600, start)


def test_a_raid_is_a_burst_of_short_requests_to_one_boss(full):
    for r, idx in by_kind(full, "raid", lambda m: m[1]).items():
        raid = full.raids[r]
        assert len(idx) == len(raid.times) >= 160
        assert parts.RAID_LENGTH[0] <= raid.end - raid.start <= parts.RAID_LENGTH[1]
        assert next(w for w in full.worlds if w[0] == raid.start)[2] == "raid"
        phases = []
        for i in idx:
            segs = full.meta[i][3]
            assert raid.start < full.times[i] < raid.end and segs[3] == raid.boss
            assert segs[2] == full.regions[raid.region] and segs[5][1] <= 60
            phases.append(raid.phases.index(segs[4]))
        assert phases == sorted(phases) and set(phases) == {0, 1, 2}
        burst = _per_minute(full, "raid", raid.start, raid.end)
        assert burst > 10 * _per_minute(full, "talk", 0.0, full.times[-1])  # one NPC
        assert _per_minute(full, "mod", raid.start, raid.end) > 1.5 * _per_minute(
            full, "mod", raid.start - 3600, raid.start)
    bosses = {r.boss for r in full.raids}
    assert not any(bosses & set(m[3]) for m in full.meta if m[0] != "raid")


def test_moderation_requests_share_only_the_head(run):
    head, tail = run.templates["mod"]
    idx = [i for i, m in enumerate(run.meta) if m[0] == "mod"]
    messages = [run.meta[i][3][1] for i in idx]
    assert len(set(messages)) == len(idx)
    for i in idx:
        assert run.meta[i][3] == [head, run.meta[i][3][1], tail]
    for i, j in itertools.pairwise(idx):
        assert common(run.trace[i], run.trace[j]) == head[1] // BLOCK
    others = {h for q, m in zip(run.trace, run.meta) if m[0] != "mod" for h in q}
    assert not others & {h for i in idx for h in run.trace[i]}
    exchanges = by_kind(run, "mod", lambda m: m[1])
    assert 2.0 < statistics.mean(map(len, exchanges.values())) < 3.0
    for e in exchanges.values():
        for i, j in itertools.pairwise(e):
            assert parts.MESSAGE_GAP[0] <= run.times[j] - run.times[i] <= parts.MESSAGE_GAP[1]


def test_the_nightly_quest_walk_scans_the_catalog_in_order(run):
    idx = [i for i, m in enumerate(run.meta) if m[0] == "quest"]
    assert abs(parts.server_hour(run.times[idx[0]]) - 3.0) < 1e-6
    assert [run.meta[i][1] for i in idx] == run.walk == list(range(len(run.npcs)))
    assert [run.meta[i][2] for i in idx] == list(range(len(idx)))
    regions = [run.npcs[n].region for n in run.walk]
    assert regions == sorted(regions) and regions[-1] == parts.REGIONS  # the event zone last
    assert set(regions) == {r for r, npcs in enumerate(run.region_npcs) if npcs}
    gaps = {round(run.times[j] - run.times[i], 6) for i, j in itertools.pairwise(idx)}
    assert gaps == {parts.QUEST_GAP}
    talk = next(i for i, m in enumerate(run.meta) if m[0] == "talk")
    for i in idx:
        npc = run.npcs[run.meta[i][1]]
        segs = run.meta[i][3]
        assert segs[:4] == [run.lore, run.templates["quest"], run.regions[npc.region],
                            npc.persona]
        assert common(run.trace[i], run.trace[talk]) == _lore_blocks(run)


def test_requests_mix_as_documented(full):
    kinds = Counter(m[0] for m in full.meta)
    n = len(full.trace)
    assert 0.79 < kinds["mod"] / n < 0.84 and 0.085 < kinds["talk"] / n < 0.125
    assert 0.04 < kinds["raid"] / n < 0.07 and 0.025 < kinds["quest"] / n < 0.035


def test_size_at_scale_one_and_scaled_down():
    check_size(npc_world, (500_000, 760_000), (50_000, 85_000), (0.08, 0.16), 0.3)
