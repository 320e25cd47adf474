"""bench/regret.py: when the tuned policy pays its shortfall, part by part of a trace (a
diagnostic, not a policy).

    python -m bench.regret [--cells zipf_prefix@1@16000 ...] [--parts 4] [--splice]
                           [--json FILE]

bench.policy_ceiling --policy adaptive sorts the cells the product loses: most are *tuner*
cells, where one configuration of its tuner's grid held fixed for the whole trace reaches the
target (docs/benchmarks.md "Tuner cells of `adaptive`"). This says when the tuned policy falls
behind that configuration. Per cell (``shape@seed@capacity``, ``conversation@capacity``) it
replays LRU, the product (``adaptive``, tuned) and the product held at each other
configuration of the grid (bench.policy_ceiling's ``fixed@`` arms), each through one cache
from the first request to the last, and counts each one's hits in each of ``--parts`` equal
runs of requests. ``behind`` is the best fixed configuration's hit rate (best over the whole
trace) minus the tuned one's, per part: a shortfall paid in the first parts is the price of
starting as LRU with no evidence yet; one paid throughout is the tuner choosing wrong or
late. ``--splice`` splits the shortfall another way (``spliced``): what the tuned pool's
choices would get if each switch moved the pool at once into the state the new
configuration, held from the start, would have (no transient, docs/benchmarks.md
"`fidelity`"). Hit rates are deterministic: one run.
"""

from __future__ import annotations

from collections.abc import Callable

from bench.cells import cell_trace
from bench.common import bench_parser, machine, write_json
from bench.policy_ceiling import fixed_arms
from kvpool.core.eviction import AdaptivePolicy, EvictionPolicy, make_policy
from kvpool.core.eviction.admit_tuner import AdmitTuner
from kvpool.replay.loop import PolicyCache, replay

Trace = list[list[int]]
CELLS = ("zipf_prefix@1@16000", "uniform@2@16000", "scan_mix@1@16000", "code_edit@2@4000",
         "agent@1@4000", "media_pipeline@1@16000")


def counts(reqs: Trace, policy: EvictionPolicy, cap: int, parts: int) -> list[tuple[int, int]]:
    """``policy``'s (hits, blocks) in each of ``parts`` equal runs of ``reqs`` (by request
    count), one cache carried through all of them."""
    cache = PolicyCache(policy, cap)
    cuts = [len(reqs) * i // parts for i in range(parts + 1)]
    return [replay(reqs[a:b], cache) for a, b in zip(cuts, cuts[1:])]


def by_part(reqs: Trace, policy: EvictionPolicy, cap: int, parts: int) -> list[float]:
    """``policy``'s hit rate in each part (``counts``)."""
    return [h / max(n, 1) for h, n in counts(reqs, policy, cap, parts)]


def arms() -> dict[str, Callable[[int], EvictionPolicy]]:
    """LRU, the tuned product and the product held at each other grid configuration."""
    return {"lru": lambda c: make_policy("lru", c), "tuned": AdaptivePolicy,
            **fixed_arms("adaptive")}


def cell(reqs: Trace, cap: int, parts: int) -> dict:
    """Per arm its rate per part and over the trace (``total``); the best fixed arm by total
    (``best``) and how far the tuned one is behind it per part (``behind``)."""
    rates: dict[str, dict] = {}
    for name, make in arms().items():
        per = counts(reqs, make(cap), cap, parts)
        total = sum(h for h, _ in per) / max(sum(n for _, n in per), 1)
        rates[name] = {"parts": [round(h / max(n, 1), 5) for h, n in per],
                       "total": round(total, 5)}
    best = max((k for k in rates if k.startswith("fixed@")), key=lambda k: rates[k]["total"])
    behind = [round(b - t, 5) for b, t in zip(rates[best]["parts"], rates["tuned"]["parts"])]
    return {"rates": rates, "best": best, "behind": behind}


def per_request(reqs: Trace, policy: EvictionPolicy, cap: int,
                ran: list | None = None) -> list[int]:
    """``policy``'s hits per request (the leading run at its lookup, as ``replay`` counts
    them); with ``ran``, ``policy.cfg`` at each lookup is appended to it."""
    cache, out = PolicyCache(policy, cap), []
    for ids in reqs:
        if ran is not None:
            ran.append(policy.cfg)
        out.append(replay((ids,), cache)[0])
    return out


def spliced(reqs: Trace, cap: int) -> dict:
    """The tuned pool's choices without their transients: each request scored by the pool
    held at the configuration the tuned pool ran at that request's lookup, held from the
    first request (``spliced``), beside the tuned pool (``tuned``) and the configuration best
    held fixed (``best``, ``best_cfg``). ``spliced - tuned`` is what the switches' transients
    cost; ``best - spliced`` what the choices and their timing cost."""
    ran: list = []
    tuned = sum(per_request(reqs, AdaptivePolicy(cap), cap, ran))
    held = {g: per_request(reqs, AdaptivePolicy(cap, cfg=g), cap) for g in AdmitTuner.GRID}
    n = max(sum(map(len, reqs)), 1)
    best = max(held, key=lambda g: sum(held[g]))
    return {"tuned": round(tuned / n, 5), "best": round(sum(held[best]) / n, 5),
            "spliced": round(sum(held[g][i] for i, g in enumerate(ran)) / n, 5),
            "best_cfg": list(best), "ran": sorted({tuple(g) for g in ran})}


def main(argv: list[str] | None = None) -> dict:
    ap = bench_parser("regret", __doc__, timing=False)
    ap.add_argument("--cells", nargs="+", default=list(CELLS))
    ap.add_argument("--parts", type=int, default=4)
    ap.add_argument("--splice", action="store_true", help="spliced(): the tuned choices "
                    "without their transients, instead of the parts")
    a = ap.parse_args(argv)
    res: dict = {"machine": machine(), "parts": a.parts, "cells": {}}
    for key in a.cells:
        reqs, cap = cell_trace(key)
        if a.splice:
            r = res["cells"][key] = spliced(reqs, cap)
            print(f"{key}: tuned {r['tuned']:.4f}, spliced {r['spliced']:.4f}, best fixed "
                  f"{r['best']:.4f} ({r['best_cfg']})", flush=True)
            continue
        r = res["cells"][key] = cell(reqs, cap, a.parts)
        t, b = r["rates"]["tuned"], r["rates"][r["best"]]
        print(f"{key}: tuned {t['total']:.4f}, best fixed {b['total']:.4f} ({r['best']}), "
              "behind per part " + " ".join(f"{x:+.4f}" for x in r["behind"]), flush=True)
    write_json(a.json, res)
    return res


if __name__ == "__main__":
    main()
