"""bench.grid_lab: the product's rule on part of its grid, or from another start, replayed on
step records, reads only the miniatures it keeps and makes the product's choices on the
whole grid."""

import pytest

from bench.baselines import BASELINES
from bench.grid_lab import FULL, replay_on, rule_on, score
from bench.rule_lab import COLD, replay_rule
from bench.rule_picks import RULES
from tests.bench.test_rule_lab import synthetic


def test_the_whole_grid_from_lru_is_the_product_rule():
    rec = synthetic({3: 40}, steps=60, held=5)
    assert replay_on(rec, FULL) == replay_rule(rec, RULES["prod"])[0]
    assert 3 in replay_on(rec, FULL)  # it moved: the check is not of a rule that stays


def test_a_grid_without_the_leader_never_runs_it_and_reads_only_its_own():
    rec = synthetic({3: 40, 2: 20}, steps=60)
    idx = tuple(i for i in FULL if i != 3)
    pool = replay_on(rec, idx)
    assert 3 not in pool and 2 in pool


def test_a_start_begins_there_and_stays_without_evidence():
    rec = synthetic({}, steps=30)
    assert set(replay_on(rec, FULL, start=7)) == {7}
    assert set(replay_on(rec, FULL)) == {0}


def test_a_grid_keeps_lru_and_the_cold_duel():
    with pytest.raises(ValueError):
        rule_on(tuple(i for i in FULL if i != COLD))
    with pytest.raises(ValueError):
        rule_on(FULL[1:])


def test_scores_count_a_rule_that_leaves_the_leader_out_as_losing():
    """The record's product rate (0.5) is above the bar (0.49 - SLACK); without index 3
    (40 hits a step ahead) the rule runs index 2 (20 ahead) and loses the difference, and
    so does the best of its grid held from the start."""
    classics = {"lru": 0.45, **{b: 0.49 for b in BASELINES}}
    rec = {**synthetic({3: 40, 2: 20}, steps=60), "classics": classics}
    whole = score([rec], FULL)
    without = score([rec], tuple(i for i in FULL if i != 3))
    assert whole == {"lost": 0, "shortfall": 0.0, "below_lru": 0, "fixed_lost": 0}
    assert without["lost"] == without["fixed_lost"] == 1 and without["shortfall"] > 0
