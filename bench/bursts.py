"""bench/bursts.py: what ``adaptive``'s NOTE(bursts) changes, and its first form (research).

    python -m bench.bursts [--json FILE] [--shapes catalog_backfill ...] [--seeds 1 2]
                           [--capacities 1000 4000 16000] [--no-classics] [--scale 1]

NOTE(bursts) (kvpool/core/eviction/admit_tuner.py; docs/benchmarks.md "`bursts`") lets the
tuner take a candidate on the long window's evidence alone, where a configuration gains in
bursts and the fast window's variance test never passes. Per cell of bench.heldout's shapes
this replays LRU, the product, ``before`` (the product without it: ``BURSTS = False``, as at
0e3f7c3) and ``early``, its first form, which counted the long window from an effective 20
periods instead of its full 499 (frozen before clinical_scribe and fin_research were first
replayed; it went below LRU there by 0.0036), and the classics of bench/baselines.py
(the target: the best of them and LRU, minus 0.002). Hit rates are deterministic: one run.
The default shapes are the blind ones, written by helpers who read no policy.
"""

from __future__ import annotations

from bench.cells import target
from bench.cold_start import rates
from bench.common import bench_parser, machine, write_json
from bench.heldout import SHAPES
from kvpool.core.eviction import AdaptivePolicy
from kvpool.core.eviction.admit_tuner import AdmitTuner

BLIND = ("catalog_backfill", "ediscovery_review", "media_pipeline", "clinical_scribe",
         "fin_research", "travel_agent", "insurance_claims")


class Before(AdaptivePolicy):
    """The product before NOTE(bursts)."""

    name = "before"
    BURSTS = False


class EarlyTuner(AdmitTuner):
    """NOTE(bursts) counting the long window from an effective 20 periods (the fast
    window's ~19) instead of its full size."""

    BURST_STEPS = 20


class Early(AdaptivePolicy):
    """The product with NOTE(bursts)'s first form."""

    name = "early"
    TUNER = EarlyTuner


ARMS = (AdaptivePolicy, Before, Early)


def verdict(r: dict[str, float], policy: str) -> str:
    """``met`` / ``lost`` against the target, and ``<lru`` where below LRU."""
    return ("met" if r[policy] >= target(r) else "lost") + (" <lru" if r[policy] < r["lru"] else "")


def main(argv: list[str] | None = None, prog: str = "bursts", doc: str | None = __doc__,
         arms: tuple[type[AdaptivePolicy], ...] = ARMS, shapes: tuple[str, ...] = BLIND) -> dict:
    """Replay LRU, ``arms`` and (unless --no-classics) the classics per cell; bench/twice.py
    passes its own arms and shapes."""
    ap = bench_parser(prog, doc, timing=False)
    ap.add_argument("--shapes", nargs="+", default=list(shapes), choices=list(SHAPES))
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--capacities", type=int, nargs="+", default=[1000, 4000, 16000])
    ap.add_argument("--no-classics", action="store_true", help="skip the classics")
    ap.add_argument("--scale", type=float, default=1.0, help="the shapes' scale")
    args = ap.parse_args(argv)
    res: dict = {"machine": machine(), "cells": {}}
    for name in args.shapes:
        for seed in args.seeds:
            reqs = SHAPES[name](seed, args.scale)
            for cap in args.capacities:
                r = rates(reqs, cap, not args.no_classics, arms)
                key = f"{name}@{seed}@{cap}"
                res["cells"][key] = r
                tail = ("" if args.no_classics else "  " + ", ".join(
                    f"{a.name} {verdict(r, a.name)}" for a in arms))
                print(f"{key}: " + " ".join(f"{k} {v:.4f}" for k, v in r.items()) + tail,
                      flush=True)
    write_json(args.json, res)
    return res


if __name__ == "__main__":
    main()
