"""bench.regret: one cache carried through a trace's parts counts what one replay counts, and
the tuned policy's lag is measured against the fixed configuration best over the whole trace."""

from bench.heldout import SHAPES
from bench.cells import cell_trace, parse_cell, trace_of
from bench.regret import arms, by_part, cell, per_request, spliced
from kvpool.core.eviction import AdaptivePolicy
from kvpool.core.eviction.admit_tuner import AdmitTuner
from kvpool.replay.loop import simulate

REQS = SHAPES["code_edit"](1, 0.05)
CAP = 300


def _weighted(reqs, rates):
    cuts = [len(reqs) * i // len(rates) for i in range(len(rates) + 1)]
    return sum(r * sum(map(len, reqs[a:b])) for r, a, b in zip(rates, cuts, cuts[1:]))


def test_parts_of_one_replay_add_up_to_the_replay():
    hits, blocks = simulate(REQS, AdaptivePolicy(CAP), CAP)
    [whole] = by_part(REQS, AdaptivePolicy(CAP), CAP, 1)
    assert whole == hits / blocks
    parts = by_part(REQS, AdaptivePolicy(CAP), CAP, 4)
    assert len(parts) == 4 and round(_weighted(REQS, parts)) == hits
    # a fresh cache per part would forget the first parts' content: fewer hits
    fresh = [by_part(REQS[a:b], AdaptivePolicy(CAP), CAP, 1)[0]
             for a, b in ((0, len(REQS) // 2), (len(REQS) // 2, len(REQS)))]
    assert round(_weighted(REQS, fresh)) < hits


def test_the_lag_is_against_the_best_fixed_configuration_over_the_trace():
    r = cell(REQS, CAP, 3)
    fixed = {k: v for k, v in r["rates"].items() if k.startswith("fixed@")}
    assert len(fixed) == len(AdmitTuner.GRID) - 1 and set(arms()) == {"lru", "tuned", *fixed}
    assert r["best"] == max(fixed, key=lambda k: fixed[k]["total"])
    best, tuned = fixed[r["best"]]["parts"], r["rates"]["tuned"]["parts"]
    assert r["behind"] == [round(b - t, 5) for b, t in zip(best, tuned)]
    assert r["rates"]["tuned"]["total"] == round(simulate(REQS, AdaptivePolicy(CAP), CAP)[0]
                                                 / sum(map(len, REQS)), 5)


def test_cells_name_their_trace_and_capacity():
    assert parse_cell("drift@2@4000") == ("heldout", "drift", 2, 4000)
    assert parse_cell("zipf_prefix@3@16000") == ("policies", "zipf_prefix", 3, 16000)
    assert parse_cell("conversation@1000")[1:] == ("conversation", 0, 1000)
    assert trace_of("heldout", "drift", 2) == SHAPES["drift"](2, 1.0)
    assert cell_trace("drift@1@300", 0.1) == (SHAPES["drift"](1, 0.1), 300)


def test_per_request_counts_what_one_replay_counts_and_records_the_pools_choice():
    ran = []
    per = per_request(REQS, AdaptivePolicy(CAP), CAP, ran)
    assert sum(per) == simulate(REQS, AdaptivePolicy(CAP), CAP)[0]
    assert len(per) == len(ran) == len(REQS) and set(ran) <= set(AdmitTuner.GRID)
    assert len(set(ran)) > 1  # the tuned pool switched on this trace


def test_spliced_scores_each_request_by_the_configuration_the_pool_ran():
    r = spliced(REQS, CAP)
    ran = []
    per_request(REQS, AdaptivePolicy(CAP), CAP, ran)
    held = {g: per_request(REQS, AdaptivePolicy(CAP, cfg=g), CAP) for g in set(ran)}
    n = sum(map(len, REQS))
    assert r["spliced"] == round(sum(held[g][i] for i, g in enumerate(ran)) / n, 5)
    assert r["ran"] == sorted(set(ran))
    assert r["tuned"] == round(simulate(REQS, AdaptivePolicy(CAP), CAP)[0] / n, 5)
    fixed = [simulate(REQS, AdaptivePolicy(CAP, cfg=g), CAP)[0] / n for g in AdmitTuner.GRID]
    assert r["best"] == round(max(fixed), 5) and tuple(r["best_cfg"]) in AdmitTuner.GRID
