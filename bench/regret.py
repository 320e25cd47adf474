"""bench/regret.py: when the tuned policy pays its shortfall, part by part of a trace (a
diagnostic, not a policy).

    python -m bench.regret [--cells zipf_prefix@1@16000 ...] [--parts 4] [--json FILE]

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
late. Hit rates are deterministic: one run.
"""

from __future__ import annotations

from collections.abc import Callable

from bench.cells import cell_trace
from bench.common import bench_parser, machine, write_json
from bench.policy_ceiling import fixed_arms
from kvpool.core.eviction import AdaptivePolicy, EvictionPolicy, make_policy
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


def main(argv: list[str] | None = None) -> dict:
    ap = bench_parser("regret", __doc__, timing=False)
    ap.add_argument("--cells", nargs="+", default=list(CELLS))
    ap.add_argument("--parts", type=int, default=4)
    a = ap.parse_args(argv)
    res: dict = {"machine": machine(), "parts": a.parts, "cells": {}}
    for key in a.cells:
        reqs, cap = cell_trace(key)
        r = res["cells"][key] = cell(reqs, cap, a.parts)
        t, b = r["rates"]["tuned"], r["rates"][r["best"]]
        print(f"{key}: tuned {t['total']:.4f}, best fixed {b['total']:.4f} ({r['best']}), "
              "behind per part " + " ".join(f"{x:+.4f}" for x in r["behind"]), flush=True)
    write_json(a.json, res)
    return res


if __name__ == "__main__":
    main()
