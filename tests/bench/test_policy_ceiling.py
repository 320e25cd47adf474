"""bench.policy_ceiling: its tuned variant at the product's bar is the product's policy, and a
lost cell is a tuner cell exactly when a fixed configuration of the grid reaches the target
(a laps cell when only one with laps does), for classlru and for adaptive."""

from bench.admitbig import AdmitBigPolicy
from bench.baselines import BASELINES
from bench.heldout import SHAPES, SLACK
from bench.heldout_early import loop
from bench.laps import LapsPolicy
from bench.policy_ceiling import (FIXED, _job, cell_rates, compare, fixed_arms, jobs, own_effect,
                                  summarize, tuned_at, verdict)
from kvpool.core.eviction import AdaptivePolicy, make_policy
from kvpool.core.eviction.admit_tuner import GHOST_FILTER, AdmitTuner
from kvpool.core.eviction.tuner import BonusTuner
from kvpool.replay.loop import simulate


def test_the_tuned_variant_at_the_products_bar_is_the_product():
    reqs = SHAPES["drift"](1, 0.2)
    cap = 300
    assert simulate(reqs, tuned_at(BonusTuner.EFFECT)(cap), cap) == \
        simulate(reqs, make_policy("classlru", cap), cap)
    assert tuned_at(0.005).TUNER.EFFECT == 0.005 != BonusTuner.EFFECT  # the product's kept


def test_a_lower_bar_is_the_tuner_the_variant_runs():
    # tenants' shared system prompts gain a little from every larger bonus: the product's bar
    # stops the tuner early, no bar lets it go on
    reqs = SHAPES["tenants"](1, 0.1)
    product, low = make_policy("classlru", 1000), tuned_at(0.0)(1000)
    assert simulate(reqs, low, 1000)[0] > simulate(reqs, product, 1000)[0]
    assert low.bonus > product.bonus


def _rates(tuned: float, fixed: float, classic: float = 0.5) -> dict[str, float]:
    r = {b: classic for b in BASELINES} | {"lru": 0.3, "tuned@0.01": tuned}
    return r | {f"bonus@{b}": fixed for b in FIXED}


def test_a_lost_cell_is_a_tuner_cell_only_when_a_fixed_bonus_reaches_the_target():
    bar = 0.5 - SLACK
    assert verdict(_rates(bar, 0.1), 0.01) == "won"
    assert verdict(_rates(bar - 1e-4, bar), 0.01) == "tuner"
    assert verdict(_rates(bar - 1e-4, bar - 1e-4), 0.01) == "family"
    cells = {"a@1@10": _rates(bar, 0.1), "b@1@10": _rates(0.2, bar),
             "c@1@10": _rates(0.2, 0.2)}
    s = summarize(cells, [0.01])["0.01"]
    assert (s["lost"], s["tuner"], s["family"]) == (2, ["b@1@10"], ["c@1@10"])
    assert s["below_lru"] == ["b@1@10", "c@1@10"]


def test_a_loop_longer_than_the_pool_is_a_family_cell():
    # every block of a loop is used equally often, so every bonus files them in one class:
    # LRU order, which evicts each block just before its next use
    reqs = loop(1, 0.5)
    cap = len({h for r in reqs for h in r}) // 2
    r = cell_rates(reqs, cap, [BonusTuner.EFFECT])
    assert r["lru"] == 0.0 and r["wtinylfu"] > 0.0
    assert verdict(r, BonusTuner.EFFECT) == "family"


def test_jobs_cover_both_benchmarks_traces():
    held = jobs(["heldout"], [100], [0.01])
    assert sorted((j[1], j[2]) for j in held) == sorted((n, s) for n in SHAPES for s in (1, 2))
    pol = jobs(["policies"], [100], [0.01])
    assert {j[0] for j in pol} == {"policies"} and len(pol) >= 12


def test_candidates_are_counted_beside_the_product():
    bar = 0.5 - SLACK
    product = f"tuned@{BonusTuner.EFFECT}"
    cells = {"a@1@10": _rates(0.2, 0.1) | {product: 0.2, "cand": bar},
             "b@1@10": _rates(0.2, 0.1) | {product: bar, "cand": 0.29}}
    out = compare(cells, ["cand"])
    assert out[product]["lost"] == ["a@1@10"] and out[product]["below_lru"] == {"a@1@10": -0.1}
    assert out["cand"]["lost"] == ["b@1@10"] and out["cand"]["below_lru"] == {"b@1@10": -0.01}
    assert out["cand"]["shortfall"] == round(bar - 0.29, 4)


def test_a_candidate_is_replayed_in_every_cell_of_a_job():
    [job] = [j for j in jobs(["heldout"], [200], [BonusTuner.EFFECT], ("admitbig",))
             if j[1] == "loop" and j[2] == 1]
    reqs = loop(1)
    r = _job(job)["loop@1@200"]
    assert r["admitbig"] == round(simulate(reqs, AdmitBigPolicy(200), 200)[0]
                                  / sum(map(len, reqs)), 5)


def test_adaptives_tuned_variant_at_its_own_bar_is_the_product():
    reqs = SHAPES["code_edit"](1, 0.05)
    cap = 400
    assert own_effect("adaptive") == AdmitTuner.EFFECT != own_effect("classlru")
    assert simulate(reqs, tuned_at(AdmitTuner.EFFECT, "adaptive")(cap), cap) == \
        simulate(reqs, AdaptivePolicy(cap), cap)
    low = tuned_at(0.0, "adaptive")(cap)
    assert isinstance(low, AdaptivePolicy) and low._tuner.EFFECT == 0.0


def test_adaptives_fixed_arms_are_its_grid_and_laps_without_a_duel():
    arms = fixed_arms("adaptive", laps=True)
    fixed = [k for k in arms if k.startswith("fixed@")]
    laps = [k for k in arms if k.startswith("laps@")]
    assert len(fixed) == len(AdmitTuner.GRID) - 1 and "fixed@0.0,1.0,False" not in arms
    assert len(laps) == sum(g[2] is not True for g in AdmitTuner.GRID)
    held = arms["fixed@0.0,0.1,None"](500)
    assert held.cfg == GHOST_FILTER and held._tuner is None
    assert isinstance(arms["laps@0.0,1.0,False"](500), LapsPolicy)
    assert set(fixed_arms("classlru")) == {f"bonus@{b}" for b in FIXED}


def test_a_cell_only_laps_reach_is_a_laps_cell():
    bar = 0.5 - SLACK
    r = {b: 0.5 for b in BASELINES} | {"lru": 0.3, "tuned@0.01": 0.2, "fixed@1,1,0": 0.2}
    assert verdict(r | {"laps@0,1,0": bar}, 0.01) == "laps"
    assert verdict(r | {"laps@0,1,0": bar, "fixed@1,1,0": bar}, 0.01) == "tuner"
    assert verdict(r | {"laps@0,1,0": bar - 1e-4}, 0.01) == "family"
    s = summarize({"a@1@10": r | {"laps@0,1,0": bar}}, [0.01])["0.01"]
    assert (s["lost"], s["laps"], s["tuner"], s["family"]) == (1, ["a@1@10"], [], [])


def test_named_cells_make_one_job_per_trace_with_their_capacities():
    todo = jobs([], [], [0.01], (), ("adaptive", True),
                ["drift@1@300", "drift@1@600", "zipf_prefix@2@500", "conversation@1000"])
    assert sorted(j[:4] for j in todo) == [
        ("heldout", "drift", 1, [300, 600]), ("policies", "conversation", 0, [1000]),
        ("policies", "zipf_prefix", 2, [500])]
    assert all(j[6:] == ("adaptive", True) for j in todo)
    r = cell_rates(SHAPES["drift"](1, 0.05), 200, [0.01], (), *todo[0][6:])
    assert "laps@0.0,0.1,None" in r and "fixed@0.0,0.01,True" in r and "tuned@0.01" in r


def test_where_lru_leads_the_bar_is_lrus():
    # the target is the best of LRU and the six classics, minus SLACK
    r = {b: 0.40 for b in BASELINES} | {"lru": 0.50, "tuned@0.01": 0.45, "fixed@1,1,0": 0.499}
    assert verdict(r, 0.01) == "tuner"
    short = compare({"a@1@10": r}, [], 0.01)["tuned@0.01"]["shortfall"]
    assert short == round(0.5 - SLACK - 0.45, 4)
