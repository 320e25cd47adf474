"""bench/s3fifo_parts.py: which of S3-FIFO's parts its lead over LRU comes from (research,
a diagnostic, not a policy; docs/benchmarks.md "`twice`").

    python -m bench.s3fifo_parts [--cells call_center@1@16000 ...] [--json FILE]

At 16000 blocks S3-FIFO (threshold 1 or 2) leads the product on several held-out shapes. This
replays each cell (``shape@seed@capacity`` of bench.heldout's shapes, scale 1.0) through LRU,
S3-FIFO at thresholds 1 and 2 (bench/baselines.py) and each with one part changed:

- ``mainlru``: main is LRU (a hit moves the id to main's tail; no counts, no reinsertion)
  instead of a FIFO that gives an id used while there another lap per use (up to 3);
- ``noghost``: no ghost, so an id evicted from the small queue comes back to it as new;
- ``small20``: a small queue of 20 % of the cache instead of 10 %.

Hit rates minus LRU's, deterministic: one run (about a second per variant and cell).
"""

from __future__ import annotations

from collections.abc import Callable

from bench.baselines import LRU, S3FIFO, replay
from bench.common import bench_parser, machine, write_json
from bench.cells import cell_trace

CELLS = ("call_center@1@16000", "telecom_noc@2@16000", "logistics_dispatch@2@16000",
         "course_grading@2@16000", "permits_office@2@16000")


class Parts(S3FIFO):
    """S3-FIFO with a threshold, a small queue's share and, optionally, an LRU main or no
    ghost."""

    def __init__(self, capacity: int, promote: int, small: float = 0.1,
                 main_lru: bool = False, ghost: bool = True) -> None:
        self.SMALL, self.PROMOTE = small, promote
        super().__init__(capacity)
        self.main_lru, self.ghost = main_lru, ghost

    def access(self, h: int) -> None:
        if self.main_lru and h in self.m:
            self.m.move_to_end(h)
            return
        super().access(h)
        if not self.ghost:
            self.g.clear()

    def _evict(self) -> None:
        if self.main_lru and self.m and len(self.s) < self.small_cap:
            h, _ = self.m.popitem(last=False)  # main's least recently used, no lap
            del self.freq[h]
            self.on_evict(h)
            return
        super()._evict()


def variants(cap: int) -> dict[str, Callable[[], S3FIFO]]:
    """Each variant's name and a maker for a cache of ``cap`` ids."""
    out: dict[str, Callable[[], S3FIFO]] = {}
    for t in (1, 2):
        out[f"s3fifo{t}"] = lambda t=t: Parts(cap, t)
        out[f"s3fifo{t}.mainlru"] = lambda t=t: Parts(cap, t, main_lru=True)
        out[f"s3fifo{t}.noghost"] = lambda t=t: Parts(cap, t, ghost=False)
        out[f"s3fifo{t}.small20"] = lambda t=t: Parts(cap, t, small=0.2)
    return out


def cell(key: str, scale: float = 1.0) -> dict[str, float]:
    """``key`` = shape@seed@capacity: LRU's hit rate (``lru_hit_rate``) and each variant's
    minus LRU's."""
    reqs, cap = cell_trace(key, scale)
    n = sum(map(len, reqs))
    lru = replay(reqs, LRU(cap))[0] / n
    out = {"lru_hit_rate": lru}
    for v, make in variants(cap).items():
        out[v] = replay(reqs, make())[0] / n - lru
    return out


def report(prog: str, doc: str | None, cell_fn: Callable[[str, float], dict[str, float]],
           cells: tuple[str, ...], argv: list[str] | None) -> dict:
    """``python -m bench.PROG``: ``cell_fn(key, scale)`` for each of ``--cells`` (default
    ``cells``), each printed as LRU's hit rate and the rest's differences, and --json
    (bench/laps.py reports its cells this way too)."""
    ap = bench_parser(prog, doc, timing=False)
    ap.add_argument("--cells", nargs="+", default=list(cells))
    ap.add_argument("--scale", type=float, default=1.0)
    args = ap.parse_args(argv)
    res: dict = {"machine": machine(), "cells": {}}
    for key in args.cells:
        r = res["cells"][key] = cell_fn(key, args.scale)
        print(f"{key}: lru hit rate {r['lru_hit_rate']:.4f} " + " ".join(
            f"{k} {v:+.4f}" for k, v in r.items() if k != "lru_hit_rate"), flush=True)
    write_json(args.json, res)
    return res


def main(argv: list[str] | None = None) -> dict:
    return report("s3fifo_parts", __doc__, cell, CELLS, argv)


if __name__ == "__main__":
    main()
