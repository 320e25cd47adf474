"""bench/grid_lab.py: the product's choice rule on part of its grid, or from another start,
replayed offline on step records (a diagnostic, not a policy; docs/benchmarks.md "Fewer
miniatures, a start on a filter, other windows").

    python -m bench.grid_lab --records REC.jsonl ... [--grids 0,2,4,6,7,8,9,10 ...]
                             [--starts 7 ...] [--start-caps 16000 ...] [--json FILE]

A record (bench.step_log, made by ``bench.rule_lab --cells ... --out REC.jsonl --classics``)
holds every miniature's hits per step, and the miniatures do not depend on each other or on
the choice, so a tuner that runs fewer of them reads the same hits of the ones it keeps. A
grid is a set of the product's grid indices (it keeps LRU, index 0, and NOTE(cold)'s duel);
a start is the index the tuner starts on instead of LRU (with ``--start-caps``, only in the
cells of those pool sizes; the others keep the product's start). Each is scored as bench.rule_lab
scores a rule (its splice, penalty 0): cells lost against the target, the summed shortfall,
cells below LRU, and the hindsight ``fixed`` ceiling of the grid.
"""

from __future__ import annotations

from bench.cells import target
from bench.common import bench_parser, machine, write_json
from bench.rule_lab import COLD, load, offline, splice
from kvpool.core.eviction.admit_tuner import AdmitTuner

GRID = AdmitTuner.GRID
FULL = tuple(range(len(GRID)))


def rule_on(idx: tuple[int, ...], start: int | None = None) -> type[AdmitTuner]:
    """The product's rule on grid indices ``idx``, started on index ``start`` (LRU: None)."""
    if 0 not in idx or COLD not in idx:
        raise ValueError("a grid keeps LRU (index 0) and the cold start's duel")
    attrs: dict = {"GRID": tuple(GRID[i] for i in idx)}
    if start is not None:
        first = idx.index(start)

        def init(self, *args, **kw) -> None:
            AdmitTuner.__init__(self, *args, **kw)
            self.current = first
        attrs["__init__"] = init
    return type(f"Grid{'_'.join(map(str, idx))}At{start}", (AdmitTuner,), attrs)


def replay_on(rec: dict, idx: tuple[int, ...], start: int | None = None) -> list[int]:
    """The full-grid index the pool runs at each step of ``rec`` under ``rule_on(idx,
    start)``; NOTE(cold)'s holds and starts as bench.rule_lab's ``replay_rule`` takes them."""
    tuner = offline(rule_on(idx, start))(rec["cap"])
    starts: dict[int, list[int]] = {}
    for t, c in rec["starts"]:
        starts.setdefault(t, []).append(c)
    cold = idx.index(COLD)
    pool = []
    for t, (_, hits, held) in enumerate(rec["steps"]):
        for c in starts.get(t, ()):
            if c == COLD or tuner.current == cold:
                tuner.current = idx.index(c) if c in idx else 0
        pool.append(COLD if held else idx[tuner.current])
        for s, i in zip(tuner.shadows, idx, strict=True):
            s.hits = hits[i]
        tuner.tick(tuner.period)
    return pool


def score(recs: list[dict], idx: tuple[int, ...], start: int | None = None,
          caps: tuple[int, ...] = ()) -> dict:
    """``lost``, ``shortfall``, ``below_lru`` and the grid's ``fixed_lost`` over ``recs``;
    ``start`` only in cells of pool sizes ``caps`` when given."""
    out = {"lost": 0, "shortfall": 0.0, "below_lru": 0, "fixed_lost": 0}
    for rec in recs:
        acc = max(len(rec["steps"]) * rec["period"], 1)
        ran = splice(rec, replay_on(rec, FULL), 0.0)
        began = start if not caps or rec["cap"] in caps else None
        est = rec["rate"] + (splice(rec, replay_on(rec, idx, began), 0.0) - ran) / acc
        best = max(sum(h[i] for _, h, _ in rec["steps"]) for i in idx)
        bar = target(rec["classics"])
        out["lost"] += est < bar - 1e-12
        out["shortfall"] += max(0.0, bar - est)
        out["below_lru"] += est < rec["classics"]["lru"] - 1e-4
        out["fixed_lost"] += rec["rate"] + (best - ran) / acc < bar - 1e-12
    out["shortfall"] = round(out["shortfall"], 4)
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = bench_parser("grid_lab", __doc__, timing=False)
    ap.add_argument("--records", nargs="+", required=True)
    ap.add_argument("--grids", nargs="+", default=[",".join(map(str, FULL))])
    ap.add_argument("--starts", nargs="+", type=int, default=[])
    ap.add_argument("--start-caps", nargs="+", type=int, default=[])
    a = ap.parse_args(argv)
    recs = load(a.records)
    arms = [(tuple(int(i) for i in g.split(",")), None) for g in a.grids]
    arms += [(FULL, s) for s in a.starts]
    out: dict = {"machine": machine(), "cells": len(recs), "arms": {}}
    for idx, start in arms:
        key = f"{','.join(map(str, idx))}@{start if start is not None else 0}"
        key += f"@{'/'.join(map(str, a.start_caps))}" if start is not None and a.start_caps \
            else ""
        out["arms"][key] = row = score(recs, idx, start, tuple(a.start_caps))
        print(f"{key:28s} " + "  ".join(f"{k} {v}" for k, v in row.items()), flush=True)
    write_json(a.json, out)
    return out


if __name__ == "__main__":
    main()
