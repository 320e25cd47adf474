"""bench/cold_start.py: what ``adaptive``'s NOTE(cold) changes, and what it risks (research).

    python -m bench.cold_start [--json FILE] [--part cells|scans|both]

NOTE(cold) (kvpool/core/eviction/adaptive.py; docs/eviction.md "A cold start") acts only on a
pool that fills without a single hit, so it changes only cells whose first repeated block
comes after a pool's worth of distinct blocks. ``cells`` replays those of bench.heldout and
bench.policies (the loop at 1000 / 4000 blocks, uniform@2@1000, api_gateway@2@1000) with
LRU, the classics, the product, the product without the rule (``cold_off``), ``cold_stay``, a
research variant that stays on the duel after the first hit, ``first_hit``, the product
before the rule's depth test (the first hit of any depth ended it), and ``cold_follow``, the
depth test without the hold (the pool followed the tuner while the rule was on). ``scans``
replays traces built against the rule: two pools' worth of one-off blocks, optionally one
request re-reading part of what the pool kept, then a trace whose reuse is recent (multiturn,
doc_window) or popular (zipf_prefix, tool_agent). There LRU's order is right once the reuse
starts, and a rule that kept the duel pays until the tuner walks back; the re-read's hits are
deep (LRU would have evicted them), the tail's first is shallow. Hit rates are deterministic:
one run.
"""

from __future__ import annotations

from bench.baselines import BASELINES
from bench.common import bench_parser, machine, write_json
from bench.heldout import SHAPES
from bench.policies import hits
from bench.policy_traces import GENERATED
from kvpool.core.eviction import AdaptivePolicy, make_policy
from kvpool.replay.loop import simulate

Trace = list[list[int]]
CELLS = (("loop", 1, 1000), ("loop", 1, 4000), ("loop", 2, 1000), ("loop", 2, 4000),
         ("api_gateway", 2, 1000), ("uniform", 2, 1000))
TAILS = ("multiturn", "doc_window", "zipf_prefix", "tool_agent")


class ColdOff(AdaptivePolicy):
    """The product without NOTE(cold): it starts as LRU whatever it sees."""

    name = "cold_off"
    MOVE_SPLIT = False  # the ghost filter's share is fixed (before NOTE(arc))
    BURSTS = False  # no pass on the long window alone (before NOTE(bursts))
    COLD = None


class ColdStay(AdaptivePolicy):
    """NOTE(cold), but the first hit does not end the duel: the tuner goes on from it."""

    name = "cold_stay"
    MOVE_SPLIT = False  # the ghost filter's share is fixed (before NOTE(arc))
    BURSTS = False  # no pass on the long window alone (before NOTE(bursts))
    SHALLOW = HOLD = False  # before NOTE(cold)'s depth test and hold

    def _warm(self) -> None:
        self._cold = 0  # the rule is done; the configuration stays where it is


class FirstHit(AdaptivePolicy):
    """The product before NOTE(cold)'s depth test: the first hit after a cold fill, of any
    depth, on a block in use too, returns the pool to LRU; the pool follows the tuner while
    the rule is on."""

    name = "first_hit"
    SHALLOW = HOLD = False
    BURSTS = False  # before NOTE(bursts)


class ColdFollow(AdaptivePolicy):
    """NOTE(cold) with its depth test but without the hold (3c0364c): while the rule is on,
    the pool follows the tuner's choice."""

    name = "cold_follow"
    HOLD = False
    BURSTS = False  # before NOTE(bursts)


def trace(name: str, seed: int) -> Trace:
    return SHAPES[name](seed, 1.0) if name in SHAPES else GENERATED[name](seed=seed)


ARMS = (AdaptivePolicy, ColdOff, ColdStay, FirstHit, ColdFollow)


def rates(reqs: Trace, cap: int, classics: bool,
          arms: tuple[type[AdaptivePolicy], ...] = ARMS) -> dict[str, float]:
    """Hit rates of LRU, each of ``arms`` by its name (the product with and without the
    rule, ``cold_stay``, ``first_hit``, ``cold_follow``) and, with ``classics``,
    bench/baselines.py's classics (bench/bursts.py passes its own arms)."""
    n = sum(map(len, reqs))
    out = {"lru": simulate(reqs, make_policy("lru", cap), cap)[0] / n}
    for cls in arms:
        out[cls.name] = simulate(reqs, cls(cap), cap)[0] / n
    if classics:
        for name, cls in BASELINES.items():
            out[name] = hits(reqs, cls(cap), cap)[0] / n
    return out


def scans(cap: int, tail: str, reread: bool) -> Trace:
    """Two pools of one-off blocks in 16-block requests, optionally one request re-reading
    16 blocks the pool kept from the fill, then ``tail``'s seed-1 trace."""
    t = trace(tail, 1)
    off = 1 + max(max(r) for r in t)
    head = [[off + i * 16 + j for j in range(16)] for i in range(2 * cap // 16)]
    again = [[off + (cap // 32) * 16 + j for j in range(16)]] if reread else []
    return head + again + t


def main(argv: list[str] | None = None) -> dict:
    ap = bench_parser("cold_start", __doc__, timing=False)
    ap.add_argument("--part", choices=("cells", "scans", "both"), default="both")
    args = ap.parse_args(argv)
    res: dict = {"machine": machine(), "cells": {}, "scans": {}}
    if args.part != "scans":
        for name, seed, cap in CELLS:
            r = rates(trace(name, seed), cap, True)
            best = max(BASELINES, key=r.__getitem__)
            res["cells"][f"{name}@{seed}@{cap}"] = {**r, "best": best}
            print(f"{name}@{seed}@{cap}: " + " ".join(f"{k} {v:.4f}" for k, v in r.items())
                  + f"  best classic {best}", flush=True)
    if args.part != "cells":
        for tail in TAILS:
            for cap in (1000, 4000, 16000):
                for reread in (False, True):
                    key = f"scan{'+reread' if reread else ''}+{tail}@{cap}"
                    r = res["scans"][key] = rates(scans(cap, tail, reread), cap, False)
                    print(f"{key}: " + " ".join(f"{k} {v:.4f}" for k, v in r.items()),
                          flush=True)
    write_json(args.json, res)
    return res


if __name__ == "__main__":
    main()
