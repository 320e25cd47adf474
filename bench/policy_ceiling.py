"""bench/policy_ceiling.py: which cells classlru loses for want of tuning, and which for want of
a mechanism (a diagnostic, not a policy).

    python -m bench.policy_ceiling [--sets heldout policies] [--capacities 1000 4000 16000]
                                   [--effects 0.015 0.005] [--candidates admitbig ...]
                                   [--workers 2] [--json FILE]

``classlru`` chooses one number, its recency bonus, from the tuner's grid
(``BonusTuner.GRID``: 0 is LRU). For every cell (a trace, a seed, a capacity) of bench.heldout's
shapes and of bench.policies' traces this replays, with the instant-replay semantics of both:
LRU, the classic baselines (``bench/baselines.py``), ``classlru`` tuned, once per ``--effects``
value (the tuner's EFFECT bar: the slow-window gain a move away from LRU needs; the product's
is ``BonusTuner.EFFECT``), and ``classlru`` at every fixed bonus of the grid.

A cell the tuned policy loses (below the best classic minus ``SLACK``, the issue's target) is
a *tuner* cell when a fixed bonus reaches that bar, so a better choice of the same number
could win it, and a *family* cell when no fixed bonus does: no tuner over this grid wins it
with one bonus for the whole trace (a bonus that changes over the trace could still do
better than any fixed one; that is not measured here). Family cells need a mechanism the
class-bonus family lacks (the best classic there says which). docs/benchmarks.md
"Tuner cells and family cells" has a run.

``--candidates`` adds block-protocol research policies (``bench.policies.CANDIDATES``) to every
cell and counts, per candidate, the cells it loses, its summed shortfall and the cells where it
is below LRU, beside the same counts for the product (docs/benchmarks.md "admitbig").
"""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor

from bench.baselines import BASELINES
from bench.common import TRACE, bench_parser, machine, write_json
from bench.heldout import SHAPES, SLACK
from bench.policies import CANDIDATES, hits, load_trace
from bench.policy_traces import GENERATED
from kvpool.core.eviction import EvictionPolicy, make_policy
from kvpool.core.eviction.classlru import ClassLRUPolicy
from kvpool.core.eviction.tuner import BonusTuner
from kvpool.replay.loop import simulate

Trace = list[list[int]]
FIXED = BonusTuner.GRID[1:]  # the grid less 0, which is LRU itself


def tuned_at(effect: float) -> type[ClassLRUPolicy]:
    """ClassLRUPolicy whose tuner needs a slow-window gain of ``effect`` to move away from LRU
    (``effect == BonusTuner.EFFECT``: the product's policy)."""
    tuner = type(f"BonusTuner_{effect}", (BonusTuner,), {"EFFECT": effect})
    return type(f"ClassLRU_{effect}", (ClassLRUPolicy,), {"TUNER": tuner})


def cell_rates(reqs: Trace, cap: int, effects: list[float],
               candidates: tuple[str, ...] = ()) -> dict[str, float]:
    """Hit rates at ``cap`` blocks: ``lru``, each classic baseline, ``tuned@E`` per effect,
    ``bonus@B`` per fixed bonus of the grid and each research candidate by name."""
    blocks = sum(map(len, reqs))
    rates = {"lru": simulate(reqs, make_policy("lru", cap), cap)[0] / blocks}
    for name, cls in BASELINES.items():
        rates[name] = hits(reqs, cls(cap), cap)[0] / blocks
    for e in effects:
        rates[f"tuned@{e}"] = simulate(reqs, tuned_at(e)(cap), cap)[0] / blocks
    for b in FIXED:
        rates[f"bonus@{b}"] = simulate(reqs, ClassLRUPolicy(cap, bonus=b), cap)[0] / blocks
    for name in candidates:
        rates[name] = simulate(reqs, CANDIDATES[name](cap), cap)[0] / blocks
    return {k: round(v, 5) for k, v in rates.items()}


def target(rates: dict[str, float]) -> float:
    """The issue's bar for a cell: the best classic baseline's hit rate - SLACK."""
    return max(rates[b] for b in BASELINES) - SLACK


def verdict(rates: dict[str, float], effect: float) -> str:
    """``won`` (at or above the best classic - SLACK), else ``tuner`` (a fixed bonus of the
    grid reaches that) or ``family`` (none does)."""
    bar = target(rates)
    if rates[f"tuned@{effect}"] >= bar:
        return "won"
    return "tuner" if max(rates[f"bonus@{b}"] for b in FIXED) >= bar else "family"


def _trace(set_name: str, name: str, seed: int) -> Trace:
    if set_name == "heldout":
        return SHAPES[name](seed, 1.0)
    return load_trace(TRACE) if name == "conversation" else GENERATED[name](seed=seed)


def _job(job: tuple) -> dict[str, dict]:
    """One trace at every capacity: ``{"trace@seed@capacity": rates}``."""
    set_name, name, seed, caps, effects, cands = job
    reqs = _trace(set_name, name, seed)
    label = name if name == "conversation" else f"{name}@{seed}"
    return {f"{label}@{cap}": cell_rates(reqs, cap, effects, cands) for cap in caps}


def jobs(sets: list[str], caps: list[int], effects: list[float],
         candidates: tuple[str, ...] = ()) -> list[tuple]:
    """The traces of bench.heldout (seeds 1 2) and bench.policies (the conversation trace,
    if present, and the generated ones with seeds 1 2 3), one job each."""
    out: list[tuple] = []
    if "heldout" in sets:
        out += [("heldout", n, s, caps, effects, candidates) for n in SHAPES for s in (1, 2)]
    if "policies" in sets:
        if TRACE.is_file():
            out.append(("policies", "conversation", 0, caps, effects, candidates))
        out += [("policies", n, s, caps, effects, candidates)
                for n in GENERATED for s in (1, 2, 3)]
    return out


def summarize(cells: dict[str, dict], effects: list[float]) -> dict[str, dict]:
    """Per effect: the cells lost as tuner and as family cells, and those below LRU."""
    out: dict[str, dict] = {}
    for e in effects:
        v = {k: verdict(r, e) for k, r in cells.items()}
        out[str(e)] = {
            "lost": sum(x != "won" for x in v.values()), "cells": len(v),
            "tuner": [k for k, x in v.items() if x == "tuner"],
            "family": [k for k, x in v.items() if x == "family"],
            "below_lru": [k for k, r in cells.items() if r[f"tuned@{e}"] < r["lru"]]}
        s = out[str(e)]
        print(f"EFFECT {e}: lost {s['lost']} of {s['cells']} ({len(s['tuner'])} tuner, "
              f"{len(s['family'])} family); below LRU: {', '.join(s['below_lru']) or 'nowhere'}")
    return out


def compare(cells: dict[str, dict], candidates: list[str]) -> dict[str, dict]:
    """Per candidate, and for the product (``tuned@`` its own bar): the cells lost, the
    summed shortfall below the target (the best classic - SLACK) and the cells below LRU
    with the margin."""
    out: dict[str, dict] = {}
    product = f"tuned@{BonusTuner.EFFECT}"
    first = next(iter(cells.values()))
    for name in [n for n in (product, *candidates) if n in first]:
        lost, short, below = [], 0.0, {}
        for key, r in cells.items():
            bar = target(r)
            if r[name] < bar:
                lost.append(key)
                short += bar - r[name]
            if r[name] < r["lru"]:
                below[key] = round(r[name] - r["lru"], 5)
        out[name] = {"lost": lost, "shortfall": round(short, 4), "below_lru": below}
        print(f"{name}: lost {len(lost)} of {len(cells)}, shortfall {short:.3f}, below LRU: "
              + (", ".join(f"{k} {v:+.4f}" for k, v in below.items()) or "nowhere"))
    return out


def _print_cell(key: str, r: dict[str, float], effects: list[float]) -> None:
    best = max(BASELINES, key=r.__getitem__)
    top = max(FIXED, key=lambda b: r[f"bonus@{b}"])
    print(f"{key:24s} lru {r['lru']:.4f} "
          + " ".join(f"tuned@{e} {r[f'tuned@{e}']:.4f} ({verdict(r, e)})" for e in effects)
          + f" | best fixed {r[f'bonus@{top}']:.4f} (bonus {top}) | {best} {r[best]:.4f}",
          flush=True)


def main(argv: list[str] | None = None) -> dict:
    ap = bench_parser("policy_ceiling", __doc__, timing=False)
    ap.add_argument("--sets", nargs="+", default=["heldout", "policies"],
                    choices=["heldout", "policies"])
    ap.add_argument("--capacities", type=int, nargs="+", default=[1000, 4000, 16000])
    ap.add_argument("--effects", type=float, nargs="+", default=[BonusTuner.EFFECT])
    ap.add_argument("--candidates", nargs="*", default=[],
                    choices=[c for c, p in CANDIDATES.items() if issubclass(p, EvictionPolicy)],
                    help="block-protocol research policies to replay in every cell")
    ap.add_argument("--workers", type=int, default=1, help="processes replaying traces")
    a = ap.parse_args(argv)
    cells: dict[str, dict] = {}
    todo = jobs(a.sets, a.capacities, a.effects, tuple(a.candidates))
    with ProcessPoolExecutor(max(1, a.workers)) as ex:
        for part in ex.map(_job, todo):
            for key, r in part.items():
                _print_cell(key, r, a.effects)
            cells.update(part)
    res = {"machine": machine(), "slack": SLACK, "cells": cells,
           "summary": summarize(cells, a.effects)}
    if a.candidates:
        res["candidates"] = compare(cells, a.candidates)
    write_json(a.json, res)
    return res


if __name__ == "__main__":
    main()
