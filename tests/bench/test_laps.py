"""bench/laps.py: a block revived from main earns a lap (at most MAX_LAPS), main's victim
with a lap goes to its queue's tail instead, new content and a window block start with none,
and the report replays each configuration without and with laps."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from bench.laps import CONFIGS, MAX_LAPS, LapsPolicy, cell, main
from kvpool.core.eviction import AdaptivePolicy
from kvpool.core.eviction.admit_tuner import GHOST_FILTER, LRU, WIN
from tests.core.policy_helpers import key


def filled(cls=LapsPolicy, cfg=LRU, n: int = 6) -> AdaptivePolicy:
    p = cls(100, cfg)
    for b in range(n):
        p.insert(b, key(b), 0, 0.0)
    return p


def test_a_block_revived_from_main_gets_one_more_lap():
    p, plain = filled(), AdaptivePolicy(100, cfg=LRU)
    for b in range(6):
        plain.insert(b, key(b), 0, 0.0)
    for q in (p, plain):  # 0 is revived (a lap), then 6 and 7 are released after it
        q.remove(0)
        q.insert(0, key(0), 0, 0.0)
        q.insert(6, key(6), 0, 0.0)
        q.insert(7, key(7), 0, 0.0)
        assert [q.evict() for _ in range(5)] == [1, 2, 3, 4, 5]  # no laps: release order
    assert plain.evict() == 0  # LRU: the oldest release goes
    assert p.evict() == 6 and p.queue(0)[-1] == 0  # its lap: 0 to the tail, 6 goes instead
    assert p._laps[0] == 0 and p.evict() == 7 and p.evict() == 0
    p.check_invariants()


def test_laps_are_capped_and_new_content_starts_with_none():
    p = filled()
    for _ in range(MAX_LAPS + 2):
        p.remove(2)
        p.insert(2, key(2), 0, 0.0)
    assert p._laps[2] == MAX_LAPS
    p.remove(2)
    p.insert(2, key(99), 0, 0.0)  # other content in the block: no lap
    assert p._laps[2] == 0
    p.check_invariants()


def test_a_block_revived_from_the_window_earns_no_lap():
    p = filled(cfg=GHOST_FILTER)
    assert 3 in p.queue(WIN)
    p.remove(3)
    p.insert(3, key(3), 0, 0.0)
    assert 3 not in p.queue(WIN) and p._laps[3] == 0


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("ire"), st.integers(0, 15)), max_size=200),
       st.sampled_from(list(CONFIGS.values())))
def test_random_operations_keep_the_invariants(ops, cfg):
    p = LapsPolicy(16, cfg)
    held: dict[int, int] = {}
    for op, b in ops:
        if op == "i" and b not in p:
            held[b] = held.get(b, b)
            p.insert(b, key(held[b]), 0, 0.0)
        elif op == "r" and b in p:
            p.remove(b)
            p.insert(b, key(held[b]), 0, 0.0)
        elif op == "e" and len(p):
            held.pop(p.evict())
        p.check_invariants()
    assert sorted(p.evict() for _ in range(len(p))) == sorted(held)


def test_the_report(tmp_path, capsys):
    k = "agent@1@300"
    r = cell(k, 0.05)
    assert set(r) == {"lru_hit_rate"} | {f"{c}{s}" for c in CONFIGS for s in ("", "+laps")}
    assert r["lru"] == 0.0 and 0 < r["lru_hit_rate"] < 1
    out = tmp_path / "l.json"
    res = main(["--cells", k, "--scale", "0.05", "--json", str(out)])
    assert res["cells"][k] == r and json.loads(out.read_text())["cells"][k] == r
    assert f"{k}: lru hit rate" in capsys.readouterr().out
