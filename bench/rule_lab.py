"""bench/rule_lab.py: the tuner's choice rule replayed offline on step records (a diagnostic,
not a policy).

    python -m bench.rule_lab --cells CELL ... --out REC.jsonl [--classics]   (record)
    python -m bench.rule_lab --records REC.jsonl ... [--rules prod dest ...]
                             [--penalty HITS ...] [--json FILE]            (replay)

A record (bench.step_log) holds what every tuning step of one product replay read. The
miniatures' hits do not depend on the choice, so any rule replays on the record in a fraction
of a second per cell, where a replay of the cell's trace takes seconds to a minute.
A rule is scored as docs/benchmarks.md "`fidelity`" splices: per step, the
hits of the miniature of the configuration the pool ran, less ``penalty`` sampled hits per
switch of the pool (the switch's transient, which no miniature sees); a cell's estimate is
the product's hit rate plus the rule's score minus the product's, per sampled access. Two
hindsight ceilings bound every rule: ``fixed``, the configuration best over the whole record,
and ``phases``, the best one per eighth of it, with no transient. With the classics recorded
(``--classics``), a cell is lost below bench.cells' target. Counts are deterministic: one
run. The rules beside the product (``prod``) are research; none is the product's.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import cache

from bench.cells import target
from bench.common import bench_parser, machine, write_json
from bench.rule_picks import RULES
from bench.step_log import record
from kvpool.core.eviction import AdaptivePolicy
from kvpool.core.eviction.admit_tuner import AdmitTuner

COLD = AdmitTuner.GRID.index(AdaptivePolicy.COLD)
PHASES = 8  # the ``phases`` ceiling's parts


class Mark:
    """A miniature's stand-in: the hits of the step being replayed (a deferred one, so the
    tuner never feeds it a run)."""

    live = False

    def __init__(self, cfg) -> None:
        self.cfg, self.share, self.moves, self.hits = cfg, cfg[1], False, 0


@cache
def offline(rule: type[AdmitTuner]) -> Callable[[int], AdmitTuner]:
    """``rule`` with Marks for miniatures, made from a capacity alone."""
    def marks(self, size: int, classes: int) -> list[Mark]:
        return [Mark(g) for g in self.GRID]

    def init(self, capacity: int) -> None:
        rule.__init__(self, capacity, lambda c: 0)
    return type(f"Offline{rule.__name__}", (rule,), {"_miniatures": marks, "__init__": init})


def replay_rule(rec: dict, rule: type[AdmitTuner]) -> tuple[list[int], list[int]]:
    """The configuration the pool runs at each step of ``rec`` under ``rule`` (NOTE(cold)'s
    hold and starts as recorded: a hold does not depend on the rule), and the tuner's. A
    rule still on the duel when the hold ended moves to LRU only where the product's tuner
    was on it then too (the record has no start otherwise): an approximation on cold traces."""
    tuner = offline(rule)(rec["cap"])
    starts: dict[int, list[int]] = {}
    for t, c in rec["starts"]:
        starts.setdefault(t, []).append(c)
    pool, chose = [], []
    for t, (_, hits, held) in enumerate(rec["steps"]):
        for c in starts.get(t, ()):  # NOTE(cold): the duel at the start; LRU at its end
            if c == COLD or tuner.current == COLD:  # ... if the tuner is still on it
                tuner.start_at(AdmitTuner.GRID[c])
        chose.append(tuner.current)
        pool.append(COLD if held else tuner.current)
        for s, h in zip(tuner.shadows, hits, strict=True):
            s.hits = h
        tuner.tick(tuner.period)
    return pool, chose


def splice(rec: dict, pool: list[int], penalty: float) -> float:
    """Sampled hits of the miniatures of ``pool``'s configurations, less ``penalty`` per
    switch."""
    got = sum(h[c] for c, (_, h, _) in zip(pool, rec["steps"], strict=True))
    return got - penalty * switches(pool)


def switches(pool: list[int]) -> int:
    """How often ``pool`` changes configuration from one step to the next."""
    return sum(a != b for a, b in zip(pool, pool[1:]))


def ceilings(rec: dict) -> dict[str, float]:
    """``fixed``: the best configuration's hits over the record; ``phases``: the sum of the
    best per part (PHASES parts)."""
    steps = [h for _, h, _ in rec["steps"]]
    n = len(steps[0]) if steps else 0
    size = max(1, -(-len(steps) // PHASES))
    parts = [steps[a:a + size] for a in range(0, len(steps), size)]
    return {"fixed": max((sum(h[i] for h in steps) for i in range(n)), default=0),
            "phases": sum(max(sum(h[i] for h in p) for i in range(n)) for p in parts)}


def estimates(rec: dict, rules: list[str], penalties: list[float]) -> dict[float, dict]:
    """Per penalty, per rule and ceiling: the cell's estimated hit rate (the product's rate
    plus the splice's difference per sampled access); ``<rule>.switches`` the pool's
    switches. Each rule is replayed once."""
    accesses = max(len(rec["steps"]) * rec["period"], 1)
    pools = {name: replay_rule(rec, RULES[name])[0] for name in {"prod", *rules}}
    ran = splice(rec, pools["prod"], 0.0)
    tops = ceilings(rec)
    out: dict[float, dict] = {}
    for p in penalties:
        base = splice(rec, pools["prod"], p)
        row = {k: rec["rate"] + (got - ran) / accesses for k, got in tops.items()}
        for name in rules:
            row[name] = rec["rate"] + (splice(rec, pools[name], p) - base) / accesses
            row[f"{name}.switches"] = switches(pools[name])
        out[p] = row
    return out


def tally(recs: list[dict], rules: list[str], penalties: list[float]) -> dict[float, dict]:
    """Per penalty, per rule and ceiling over ``recs``: ``lost`` and ``shortfall`` against
    the target and ``below_lru`` (by more than 1e-4) where the classics were recorded, the
    summed estimate, and ``switches``."""
    keys = [*rules, "fixed", "phases"]
    out = {p: {k: {"lost": 0, "shortfall": 0.0, "below_lru": 0, "sum": 0.0, "switches": 0}
               for k in keys} for p in penalties}
    for rec in recs:
        bar = target(rec["classics"]) if "classics" in rec else None
        lru = rec["classics"]["lru"] if bar is not None else None
        for p, est in estimates(rec, rules, penalties).items():
            for k, row in out[p].items():
                row["sum"] += est[k]
                row["switches"] += est.get(f"{k}.switches", 0)
                if bar is not None and est[k] < bar - 1e-12:
                    row["lost"] += 1
                    row["shortfall"] += bar - est[k]
                row["below_lru"] += lru is not None and est[k] < lru - 1e-4
    return {p: {k: {m: round(v, 4) for m, v in row.items()} for k, row in rows.items()}
            for p, rows in out.items()}


def load(paths: list[str]) -> list[dict]:
    recs: dict[str, dict] = {}
    for path in paths:
        with open(path) as fh:
            for line in fh:
                rec = json.loads(line)
                recs[rec["cell"]] = rec
    return list(recs.values())


def main(argv: list[str] | None = None) -> dict:
    ap = bench_parser("rule_lab", __doc__, timing=False)
    ap.add_argument("--cells", nargs="+", default=[], help="record these cells")
    ap.add_argument("--out", default=None, help="the records' JSON lines (appended)")
    ap.add_argument("--classics", action="store_true", help="record the classics' rates too")
    ap.add_argument("--records", nargs="+", default=[], help="replay rules on these records")
    ap.add_argument("--rules", nargs="+", default=sorted(RULES), choices=sorted(RULES))
    ap.add_argument("--penalty", nargs="+", type=float, default=[0.0, 300.0])
    a = ap.parse_args(argv)
    if a.cells:
        if not a.out:
            ap.error("--cells records into --out")
        with open(a.out, "a") as fh:
            for key in a.cells:
                fh.write(json.dumps(record(key, with_classics=a.classics)) + "\n")
                print(f"recorded {key}")
    recs = load(a.records or ([a.out] if a.out else []))
    rows = tally(recs, a.rules, a.penalty)
    out = {"machine": machine(), "cells": len(recs),
           "penalty": {str(p): r for p, r in rows.items()}}
    for p, rows in out["penalty"].items():
        print(f"penalty {p} sampled hits per switch, {len(recs)} cells")
        for k, row in rows.items():
            print(f"  {k:10s} " + "  ".join(f"{m} {v}" for m, v in row.items()))
    write_json(a.json, out)
    return out


if __name__ == "__main__":
    main()
