"""bench/heldout.py: eviction policies on trace shapes that the tuner was never fitted to.

    python -m bench.heldout [--json FILE] [--seeds 1 2] [--capacities 1000 4000 16000]
                            [--scale 1.0]

``bench.policies`` is where the eviction targets are measured; its shapes are the ones the
adaptive policy (``classlru``) was chosen and tuned on. These four were written after that
tuning, as a check on the claim that it does not go below LRU on shapes it has not seen:

    drift     Zipf(0.8) popularity over 3000 prefixes whose ranking is reshuffled every
              1500 requests, plus a unique 0..8-block tail
    loop      round-robin over 400 documents (8..40 blocks), skipping one now and then: the
              classic LRU pathology (a loop longer than the pool)
    tenants   8 tenants (Zipf weights), each a 16..64-block system prompt + one of 50 few-shot
              sets (Pareto-popular) + a unique 1..20-block query
    agent     100 agent sessions re-sending a growing context 2..40 times, with 30 % one-shot
              requests in between

Same instant-replay semantics as ``bench.policies`` (``simulate``, ``bench.baselines.replay``).
It prints, per cell, LRU, every product policy, the best classic baseline and the policies'
difference to LRU. Never pass/fail.
"""

from __future__ import annotations

import bisect
import itertools
import random

from bench.baselines import BASELINES, replay
from bench.common import bench_parser, machine, write_json
from kvpool.core.eviction import POLICIES, make_policy, simulate

Trace = list[list[int]]


def drift(seed: int, scale: float = 1.0) -> Trace:
    rng = random.Random(seed)
    ids = itertools.count()
    prefixes, shift = 3000, 1500
    pre = [[next(ids) for _ in range(rng.randint(4, 24))] for _ in range(prefixes)]
    cdf = list(itertools.accumulate(1.0 / (r + 1) ** 0.8 for r in range(prefixes)))
    order = list(range(prefixes))
    out = []
    for i in range(int(10000 * scale)):
        if i % shift == 0:
            rng.shuffle(order)
        r = min(bisect.bisect_left(cdf, rng.random() * cdf[-1]), prefixes - 1)
        out.append(pre[order[r]] + [next(ids) for _ in range(rng.randint(0, 8))])
    return out


def loop(seed: int, scale: float = 1.0) -> Trace:
    rng = random.Random(seed)
    ids = itertools.count()
    docs = [[next(ids) for _ in range(rng.randint(8, 40))] for _ in range(400)]
    out = []
    i = 0
    for _ in range(int(6000 * scale)):
        i = (i + 1 + (rng.random() < 0.2)) % len(docs)
        out.append(list(docs[i]))
    return out


def tenants(seed: int, scale: float = 1.0) -> Trace:
    rng = random.Random(seed)
    ids = itertools.count()
    system = [[next(ids) for _ in range(rng.randint(16, 64))] for _ in range(8)]
    shots = [[[next(ids) for _ in range(rng.randint(2, 10))] for _ in range(50)]
             for _ in range(8)]
    weights = [1.0 / (t + 1) for t in range(8)]
    out = []
    for _ in range(int(10000 * scale)):
        t = rng.choices(range(8), weights)[0]
        s = shots[t][min(int(rng.paretovariate(1.2)) - 1, 49)]
        out.append(system[t] + s + [next(ids) for _ in range(rng.randint(1, 20))])
    return out


def agent(seed: int, scale: float = 1.0) -> Trace:
    rng = random.Random(seed)
    ids = itertools.count(1)

    def session() -> list:
        return [[next(ids) for _ in range(rng.randint(10, 60))], rng.randint(2, 40)]

    sessions = [session() for _ in range(100)]
    out = []
    for _ in range(int(8000 * scale)):
        if rng.random() < 0.3:
            out.append([next(ids) for _ in range(rng.randint(1, 12))])
            continue
        i = rng.randrange(len(sessions))
        s = sessions[i]
        out.append(list(s[0]))
        s[1] -= 1
        if s[1] <= 0:
            sessions[i] = session()
        else:
            s[0] = s[0] + [next(ids) for _ in range(rng.randint(0, 3))]
    return out


SHAPES = {"drift": drift, "loop": loop, "tenants": tenants, "agent": agent}


def cell(reqs: Trace, cap: int) -> dict[str, float]:
    """Hit rate of every product policy and classic baseline on ``reqs`` at ``cap`` blocks."""
    blocks = sum(map(len, reqs))
    rates = {p: simulate(reqs, make_policy(p, cap), cap)[0] / blocks for p in POLICIES}
    for name, cls in BASELINES.items():
        rates[name] = replay(reqs, cls(cap))[0] / blocks
    return rates


def main(argv: list[str] | None = None) -> dict:
    ap = bench_parser("heldout", __doc__, timing=False)
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--capacities", type=int, nargs="+", default=[1000, 4000, 16000])
    ap.add_argument("--scale", type=float, default=1.0, help="requests per trace, x")
    args = ap.parse_args(argv)
    res: dict = {"machine": machine(), "cells": {}}
    below: dict[str, list[str]] = {p: [] for p in POLICIES if p != "lru"}
    print(f"{'trace@seed@capacity':24s} {'lru':>7s} " + " ".join(f"{p:>9s}" for p in below)
          + "   best classic")
    for name, gen in SHAPES.items():
        for seed in args.seeds:
            reqs = gen(seed, args.scale)
            for cap in args.capacities:
                rates = cell(reqs, cap)
                key = f"{name}@{seed}@{cap}"
                res["cells"][key] = {k: round(v, 5) for k, v in rates.items()}
                best = max(BASELINES, key=rates.__getitem__)
                for p in below:
                    if rates[p] < rates["lru"]:
                        below[p].append(key)
                print(f"{key:24s} {rates['lru']:7.4f} "
                      + " ".join(f"{rates[p]:9.4f}" for p in below)
                      + f"   {best} {rates[best]:.4f}")
    for p, cells in below.items():
        print(f"{p} below lru: {', '.join(cells) if cells else 'nowhere'}")
    res["below_lru"] = below
    write_json(args.json, res)
    return res


if __name__ == "__main__":
    main()
