"""bench.classic_oracle: the best of k classics held from the first request, per cell, and
the subsets that lose fewest cells against the issue's bar."""

import json

from bench.baselines import BASELINES
from bench.cells import SLACK
from bench.classic_oracle import main, score, subsets

NAMES = ("lru", *BASELINES)


def cell(rate: float, lead: str, ahead: float) -> dict:
    """A record whose classics all read 0.4 but ``lead``, ``ahead`` higher."""
    return {"rate": rate, "classics": {n: 0.4 + (ahead if n == lead else 0.0) for n in NAMES}}


def test_a_cell_is_lost_by_its_gap_past_the_slack():
    recs = [cell(0.4, "arc", 0.01), cell(0.4, "arc", SLACK / 2)]
    lost, short = score(recs, lambda r: r["rate"])
    assert lost == 1 and abs(short - (0.01 - SLACK)) < 1e-4


def test_the_best_pair_is_the_two_leaders_and_it_loses_nothing():
    recs = [cell(0.4, "arc", 0.01), cell(0.4, "wtinylfu", 0.02), cell(0.4, "arc", 0.03)]
    rows = subsets(recs, most=1)
    assert rows["1"][0][:2] == [["arc"], 1]  # arc leads two cells: the best single classic
    assert rows["2"][0] == [["arc", "wtinylfu"], 0, 0.0]
    assert rows[str(len(NAMES))][0][1] == 0


def test_main_reads_records_and_scores_the_product(tmp_path):
    path = tmp_path / "rec.jsonl"
    recs = [{**cell(0.4, "arc", 0.01), "cell": "a@1@1000"},
            {**cell(0.43, "s3fifo1", 0.02), "cell": "b@1@1000"}]
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    out = main(["--records", str(path), "--most", "1"])
    assert out["cells"] == 2 and out["product"][0] == 1  # lost a@1, won b@1 (0.43 > 0.418)
