"""bench/policy_ceiling.py: which cells a tuned policy loses for want of tuning, and which for
want of a mechanism (a diagnostic, not a policy).

    python -m bench.policy_ceiling [--policy classlru|adaptive] [--sets heldout policies]
                                   [--capacities 1000 4000 16000] [--cells KEY ...]
                                   [--effects 0.015 0.005] [--laps] [--candidates admitbig ...]
                                   [--workers 2] [--json FILE]

A tuned policy chooses one configuration from its tuner's grid: ``classlru`` a recency bonus
(``BonusTuner.GRID``: 0 is LRU), ``adaptive`` (the product) a bonus, a window share and an
admission rule (``AdmitTuner.GRID``: index 0 is LRU). For every cell (a trace, a seed, a
capacity) of bench.heldout's shapes and of bench.policies' traces, or the ``--cells`` named
``shape@seed@capacity`` (``conversation@capacity``), this replays, with the instant-replay
semantics of both: LRU, the classic baselines (``bench/baselines.py``), the policy tuned, once
per ``--effects`` value (the tuner's EFFECT bar: the slow-window gain a move away from LRU
needs; the product's by default), and the policy held at every other configuration of the grid
(``bonus@<b>`` for ``classlru``, ``fixed@<bonus>,<share>,<duel>`` for ``adaptive``).
``--laps`` (``adaptive`` only) adds each configuration without a duel held fixed with
S3-FIFO's laps in main (``laps@<configuration>``, bench/laps.py).

A cell the tuned policy loses (below the best of LRU and the classics minus ``SLACK``, the
issue's target: bench/cells.py) is a *tuner* cell when a fixed configuration reaches that
bar, so a better choice from the same grid could win it; a *laps* cell when only a
configuration with laps does; and a *family* cell when none does: no tuner over this grid
wins it with one configuration for the whole trace (a choice that changes over the trace
could still do better than any fixed one; that is not measured here). Family cells need a
mechanism the grid lacks (the best classic there says which). docs/benchmarks.md "Tuner
cells and family cells" has a run of ``classlru``, "Tuner cells of `adaptive`" one of the
product.

``--candidates`` adds block-protocol research policies (``bench.policies.CANDIDATES``) to every
cell and counts, per candidate, the cells it loses, its summed shortfall and the cells where it
is below LRU, beside the same counts for the product (docs/benchmarks.md "admitbig").
"""

from __future__ import annotations

from concurrent.futures import ProcessPoolExecutor
from functools import partial

from bench.baselines import BASELINES
from bench.cells import parse_cell, target, trace_of
from bench.common import TRACE, bench_parser, machine, write_json
from bench.heldout import SHAPES, SLACK
from bench.laps import LapsPolicy
from bench.policies import CANDIDATES, hits
from bench.policy_traces import GENERATED
from kvpool.core.eviction import AdaptivePolicy, EvictionPolicy, make_policy
from kvpool.core.eviction.admit_tuner import AdmitTuner
from kvpool.core.eviction.classlru import ClassLRUPolicy
from kvpool.core.eviction.tuner import BonusTuner
from kvpool.replay.loop import simulate

Trace = list[list[int]]
FIXED = BonusTuner.GRID[1:]  # classlru's grid less 0, which is LRU itself
TUNED = {"classlru": (ClassLRUPolicy, BonusTuner), "adaptive": (AdaptivePolicy, AdmitTuner)}
GRID_KEYS = ("bonus@", "fixed@")  # a configuration of the tuner's grid, held fixed
LAPS_KEY = "laps@"  # adaptive's, held fixed with laps (--laps)


def tuned_at(effect: float, policy: str = "classlru") -> type[EvictionPolicy]:
    """``policy`` (``classlru`` or ``adaptive``) whose tuner needs a slow-window gain of
    ``effect`` to move away from LRU (the tuner's own EFFECT: the product's policy)."""
    cls, tuner = TUNED[policy]
    bar = type(f"{tuner.__name__}_{effect}", (tuner,), {"EFFECT": effect})
    return type(f"{cls.__name__}_{effect}", (cls,), {"TUNER": bar})


def own_effect(policy: str) -> float:
    """The EFFECT bar of ``policy``'s own tuner."""
    return TUNED[policy][1].EFFECT


def fixed_arms(policy: str, laps: bool = False) -> dict[str, partial]:
    """Label -> constructor (of the capacity) of ``policy`` held at each configuration of its
    grid but LRU's; with ``laps`` (``adaptive``), each without a duel also with laps."""
    if policy == "classlru":
        return {f"bonus@{b}": partial(ClassLRUPolicy, bonus=b) for b in FIXED}
    arms = {f"fixed@{_label(g)}": partial(AdaptivePolicy, cfg=g) for g in AdmitTuner.GRID[1:]}
    if laps:
        arms |= {f"laps@{_label(g)}": partial(LapsPolicy, cfg=g)
                 for g in AdmitTuner.GRID if g[2] is not True}
    return arms


def _label(cfg: tuple) -> str:
    return ",".join(map(str, cfg))


def cell_rates(reqs: Trace, cap: int, effects: list[float], candidates: tuple[str, ...] = (),
               policy: str = "classlru", laps: bool = False) -> dict[str, float]:
    """Hit rates at ``cap`` blocks: ``lru``, each classic baseline, ``tuned@E`` per effect,
    ``policy`` held at each configuration of its grid (``fixed_arms``) and each research
    candidate by name."""
    blocks = sum(map(len, reqs))
    rates = {"lru": simulate(reqs, make_policy("lru", cap), cap)[0] / blocks}
    for name, cls in BASELINES.items():
        rates[name] = hits(reqs, cls(cap), cap)[0] / blocks
    for e in effects:
        rates[f"tuned@{e}"] = simulate(reqs, tuned_at(e, policy)(cap), cap)[0] / blocks
    for label, make in fixed_arms(policy, laps).items():
        rates[label] = simulate(reqs, make(cap), cap)[0] / blocks
    for name in candidates:
        rates[name] = simulate(reqs, CANDIDATES[name](cap), cap)[0] / blocks
    return {k: round(v, 5) for k, v in rates.items()}


def verdict(rates: dict[str, float], effect: float) -> str:
    """``won`` (at or above ``target``), else ``tuner`` (a configuration of the
    grid held fixed reaches that), ``laps`` (only one with laps does) or ``family``."""
    bar = target(rates)
    if rates[f"tuned@{effect}"] >= bar:
        return "won"
    reached = {k[:k.index("@") + 1] for k, v in rates.items() if v >= bar and "@" in k}
    if reached & set(GRID_KEYS):
        return "tuner"
    return "laps" if LAPS_KEY in reached else "family"


def _job(job: tuple) -> dict[str, dict]:
    """One trace at every capacity: ``{"trace@seed@capacity": rates}``."""
    set_name, name, seed, caps, effects, cands, *how = job
    reqs = trace_of(set_name, name, seed)
    label = name if name == "conversation" else f"{name}@{seed}"
    return {f"{label}@{cap}": cell_rates(reqs, cap, effects, cands, *how) for cap in caps}


def jobs(sets: list[str], caps: list[int], effects: list[float],
         candidates: tuple[str, ...] = (), how: tuple = (),
         cells: list[str] | None = None) -> list[tuple]:
    """The traces of bench.heldout (seeds 1 2) and bench.policies (the conversation trace,
    if present, and the generated ones with seeds 1 2 3), one job each; or, given ``cells``
    (``shape@seed@capacity``, ``conversation@capacity``), those cells' traces at their
    capacities. ``how``: cell_rates' ``policy`` and ``laps``."""
    if cells is not None:
        return [(t, n, s, c, effects, candidates, *how) for (t, n, s), c in _named(cells).items()]
    out: list[tuple] = []
    if "heldout" in sets:
        out += [("heldout", n, s, caps, effects, candidates, *how)
                for n in SHAPES for s in (1, 2)]
    if "policies" in sets:
        if TRACE.is_file():
            out.append(("policies", "conversation", 0, caps, effects, candidates, *how))
        out += [("policies", n, s, caps, effects, candidates, *how)
                for n in GENERATED for s in (1, 2, 3)]
    return out


def _named(cells: list[str]) -> dict[tuple[str, str, int], list[int]]:
    """Cell keys -> the capacities asked of each trace, ``(set, name, seed)``."""
    out: dict[tuple[str, str, int], list[int]] = {}
    for key in cells:
        *trace, cap = parse_cell(key)
        out.setdefault(tuple(trace), []).append(cap)
    return out


def summarize(cells: dict[str, dict], effects: list[float]) -> dict[str, dict]:
    """Per effect: the cells lost as tuner, laps and family cells, and those below LRU."""
    out: dict[str, dict] = {}
    for e in effects:
        v = {k: verdict(r, e) for k, r in cells.items()}
        s = out[str(e)] = {"lost": sum(x != "won" for x in v.values()), "cells": len(v)}
        for kind in ("tuner", "laps", "family"):
            s[kind] = [k for k, x in v.items() if x == kind]
        s["below_lru"] = [k for k, r in cells.items() if r[f"tuned@{e}"] < r["lru"]]
        print(f"EFFECT {e}: lost {s['lost']} of {s['cells']} ({len(s['tuner'])} tuner, "
              f"{len(s['laps'])} laps, {len(s['family'])} family); below LRU: "
              f"{', '.join(s['below_lru']) or 'nowhere'}")
    return out


def compare(cells: dict[str, dict], candidates: list[str],
            effect: float = BonusTuner.EFFECT) -> dict[str, dict]:
    """Per candidate, and for the product (``tuned@effect``): the cells lost, the summed
    shortfall below ``target`` and the cells below LRU with the
    margin."""
    out: dict[str, dict] = {}
    product = f"tuned@{effect}"
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
    top = max((k for k in r if k.startswith((*GRID_KEYS, LAPS_KEY))), key=r.__getitem__)
    print(f"{key:24s} lru {r['lru']:.4f} "
          + " ".join(f"tuned@{e} {r[f'tuned@{e}']:.4f} ({verdict(r, e)})" for e in effects)
          + f" | best fixed {r[top]:.4f} ({top}) | {best} {r[best]:.4f}", flush=True)


def main(argv: list[str] | None = None) -> dict:
    ap = bench_parser("policy_ceiling", __doc__, timing=False)
    ap.add_argument("--policy", choices=sorted(TUNED), default="classlru")
    ap.add_argument("--sets", nargs="+", default=["heldout", "policies"],
                    choices=["heldout", "policies"])
    ap.add_argument("--capacities", type=int, nargs="+", default=[1000, 4000, 16000])
    ap.add_argument("--cells", nargs="+", help="shape@seed@capacity keys (not --sets)")
    ap.add_argument("--effects", type=float, nargs="+", help="default: the tuner's own")
    ap.add_argument("--laps", action="store_true", help="adaptive held fixed with laps too")
    ap.add_argument("--candidates", nargs="*", default=[],
                    choices=[c for c, p in CANDIDATES.items() if issubclass(p, EvictionPolicy)],
                    help="block-protocol research policies to replay in every cell")
    ap.add_argument("--workers", type=int, default=1, help="processes replaying traces")
    a = ap.parse_args(argv)
    effects = a.effects or [own_effect(a.policy)]
    cells: dict[str, dict] = {}
    todo = jobs(a.sets, a.capacities, effects, tuple(a.candidates),
                (a.policy, a.laps and a.policy == "adaptive"), a.cells)
    with ProcessPoolExecutor(max(1, a.workers)) as ex:
        for part in ex.map(_job, todo):
            for key, r in part.items():
                _print_cell(key, r, effects)
            cells.update(part)
    res = {"machine": machine(), "slack": SLACK, "policy": a.policy, "cells": cells,
           "summary": summarize(cells, effects)}
    if a.candidates:
        res["candidates"] = compare(cells, a.candidates, own_effect(a.policy))
    write_json(a.json, res)
    return res


if __name__ == "__main__":
    main()
