"""bench/classic_oracle.py: how many classics a chooser must follow to meet issue 27's bar
(a diagnostic on step records; docs/benchmarks.md "A chooser of classics: how many it must
follow").

    python -m bench.classic_oracle --records REC.jsonl ... [--most 3] [--json FILE]

A record (``bench.rule_lab --cells ... --out REC.jsonl --classics``) holds each cell's hit
rates of LRU and the classic baselines and the product's own. For every subset of k classics
(k = 1 .. all) the oracle takes, per cell, the best of the subset held from the first request:
no miniature, no switch, no transient, so no online chooser among those k does better. Each
subset is scored as bench.rule_lab scores a rule: cells lost against the target (the best of
all - SLACK), the summed shortfall. The best ``--most`` subsets of each size are printed, and
the product beside them.
"""

from __future__ import annotations

from itertools import combinations

from bench.cells import target
from bench.common import bench_parser, machine, write_json
from bench.rule_lab import load


def score(recs: list[dict], rate) -> tuple[int, float]:
    """Cells lost and the summed shortfall when ``rate(rec)`` is a cell's hit rate."""
    lost, short = 0, 0.0
    for rec in recs:
        gap = target(rec["classics"]) - rate(rec)
        if gap > 1e-12:
            lost += 1
            short += gap
    return lost, round(short, 4)


def subsets(recs: list[dict], most: int) -> dict[str, list]:
    """Per size k, the ``most`` best subsets: [names, lost, shortfall], fewest lost first."""
    names = sorted(recs[0]["classics"])
    out: dict[str, list] = {}
    for k in range(1, len(names) + 1):
        rows = [(score(recs, lambda r, s=s: max(r["classics"][n] for n in s)), s)
                for s in combinations(names, k)]
        rows.sort()
        out[str(k)] = [[list(s), lost, short] for (lost, short), s in rows[:most]]
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = bench_parser("classic_oracle", __doc__, timing=False)
    ap.add_argument("--records", nargs="+", required=True)
    ap.add_argument("--most", type=int, default=3)
    a = ap.parse_args(argv)
    recs = load(a.records)
    lost, short = score(recs, lambda r: r["rate"])
    out = {"machine": machine(), "cells": len(recs), "product": [lost, short],
           "subsets": subsets(recs, a.most)}
    print(f"{len(recs)} cells; the product: lost {lost}, shortfall {short}")
    for k, rows in out["subsets"].items():
        for names, lost, short in rows:
            print(f"k={k} {'+'.join(names):48s} lost {lost:3d} shortfall {short}")
    write_json(a.json, out)
    return out


if __name__ == "__main__":
    main()
