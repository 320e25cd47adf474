"""bench.rule_lab: choice rules replayed on step records (bench.step_log) make the choices
the tuner makes on the trace, and the splice and its ceilings add up."""

import json
from functools import cache

from hypothesis import given, settings
from hypothesis import strategies as st

from bench.cells import cell_trace
from bench.heldout import SLACK
from bench.rule_lab import COLD, ceilings, estimates, main, replay_rule, splice
from bench.rule_picks import RULES
from bench.step_log import logged
from kvpool.core.eviction.admit_tuner import AdmitTuner

N = len(AdmitTuner.GRID)


@cache
def zipf_record() -> dict:
    """The product on the first 1333 requests of zipf_prefix@1@1000: four configurations."""
    reqs, cap = cell_trace("zipf_prefix@1@1000")
    return logged(reqs[:1333], cap)


class Stays(AdmitTuner):
    """A rule that never moves."""

    def _nearest(self, passed, gain, cur):
        return cur


def synthetic(gains: dict[int, int], steps: int = 40, held: int = 0) -> dict:
    """A record at 1000 blocks where every miniature gets 100 hits a step but ``gains``'
    (index: hits more), the first ``held`` steps held by NOTE(cold)."""
    hits = [100 + gains.get(i, 0) for i in range(N)]
    starts = [(0, COLD)] if held else []
    return {"cap": 1000, "period": 250, "rate": 0.5, "starts": starts,
            "steps": [(0, hits, t < held) for t in range(steps)]}


def test_the_product_rule_on_its_record_makes_the_choices_it_made_on_the_trace():
    rec = zipf_record()
    pool, chose = replay_rule(rec, RULES["prod"])
    assert chose == [cur for cur, _, _ in rec["steps"]]
    assert len(set(chose)) >= 3  # it moved: the check is not of a rule that stays on LRU
    assert pool == chose  # nothing held on this trace


def test_the_product_scores_its_own_rate_and_a_rule_that_stays_scores_lru():
    rec = zipf_record()
    est = estimates(rec, ["prod"], [0.0, 300.0])
    assert est[0.0]["prod"] == rec["rate"] == est[300.0]["prod"]
    pool, _ = replay_rule(rec, Stays)
    assert set(pool) == {0}
    assert splice(rec, pool, 0.0) == sum(h[0] for _, h, _ in rec["steps"])


def test_a_penalty_is_charged_once_per_switch_of_the_pool():
    rec = zipf_record()
    pool, _ = replay_rule(rec, RULES["prod"])
    switches = sum(a != b for a, b in zip(pool, pool[1:]))
    assert switches >= 2
    assert splice(rec, pool, 50.0) == splice(rec, pool, 0.0) - 50.0 * switches


def test_dest_goes_to_the_largest_gain_where_the_product_goes_to_the_nearest():
    rec = synthetic({3: 30, 5: 40})  # bonus 1 and bonus 4 both far ahead of LRU
    first = {}
    for name in ("prod", "dest"):
        pool, _ = replay_rule(rec, RULES[name])
        first[name] = next(c for c in pool if c != 0)
    assert first == {"prod": 3, "dest": 5}


def test_hyst_stays_where_the_candidate_has_not_caught_up_over_the_whole_record():
    # a phase where bonus 1 leads, then one where bonus 0.25 leads by less than bonus 1 had
    # (a move down the index: NOTE(long) does not hold it back)
    steps = [(0, [100 + 40 * (i == 3) for i in range(N)], False) for _ in range(60)]
    steps += [(0, [100 + 10 * (i == 1) for i in range(N)], False) for _ in range(150)]
    rec = {"cap": 1000, "period": 250, "rate": 0.5, "starts": [], "steps": steps}
    prod, _ = replay_rule(rec, RULES["prod"])
    hyst, _ = replay_rule(rec, RULES["hyst"])
    assert 1 in prod[60:]  # the product follows the second phase
    assert set(hyst[60:]) == {3}  # bonus 0.25 never got ahead of bonus 1 in the sum


def test_a_held_step_runs_the_cold_duel_whatever_the_rule():
    rec = synthetic({3: 30}, held=12)
    for name in RULES:
        pool, _ = replay_rule(rec, RULES[name])
        assert pool[:12] == [COLD] * 12


@settings(max_examples=20, deadline=None)
@given(st.lists(st.lists(st.integers(0, 60), min_size=N, max_size=N), min_size=3,
                max_size=40), st.integers(0, 5))
def test_ceilings_and_pools_on_any_record(hits, held):
    rec = {"cap": 1000, "period": 250, "rate": 0.5, "starts": [(0, COLD)] if held else [],
           "steps": [(0, h, t < held) for t, h in enumerate(hits)]}
    top = ceilings(rec)
    assert top["phases"] >= top["fixed"] >= max(sum(h[i] for h in hits) for i in range(N))
    for name in RULES:
        pool, chose = replay_rule(rec, RULES[name])
        assert len(pool) == len(chose) == len(hits)
        assert all(0 <= c < N for c in pool)
        assert all(p == COLD for p in pool[:held])
        assert splice(rec, pool, 0.0) <= top["phases"] or len(hits) > 8


def test_main_tallies_records_against_their_classics(tmp_path):
    rec = dict(zipf_record(), cell="zipf_prefix@1@1000[:1333]")
    bar = rec["rate"] + 0.001  # a target the product misses by 0.001 (target(): best - SLACK)
    rec["classics"] = dict.fromkeys(("sieve", "s3fifo", "s3fifo1", "slru", "wtinylfu"), 0.0)
    rec["classics"].update(lru=rec["rate"] - 0.01, arc=bar + SLACK)
    out = tmp_path / "rec.jsonl"
    out.write_text(json.dumps(rec) + "\n")
    got = main(["--records", str(out), "--rules", "prod", "dest", "--penalty", "0", "100"])
    rows = got["penalty"]["0.0"]
    assert got["cells"] == 1 and set(rows) == {"prod", "dest", "fixed", "phases"}
    assert rows["prod"]["lost"] == 1 and abs(rows["prod"]["shortfall"] - 0.001) < 1e-4
    assert rows["prod"]["below_lru"] == 0 and rows["phases"]["sum"] >= rows["fixed"]["sum"]
    assert got["penalty"]["100.0"]["prod"] == rows["prod"]  # the product against itself
