"""bench/fidelity.py: does the pool get the hits the tuner's miniature of its configuration
counts? (a diagnostic, not a policy)

    python -m bench.fidelity [--cells CELL ...] [--hold I] [--faithful] [--chunks 8]
                             [--json FILE]

The product's tuner (kvpool/core/eviction/admit_tuner.py) chooses a configuration by the hits
of miniatures, each running one configuration from the first request on a sampled slice of
hash space. ``Counted`` is the product plus one count: the live pool's own hits on that same
slice: a release's sampled blocks shallower than its first block that was not a revival,
handed to the tuner at each step before the step reads the miniatures'. The replay pins no
block, so a request's deeper blocks can push out its own leading run before its release; the
replay counted those at lookup, this count does not, and on small pools with long requests it
reads a few percent low (tests/bench/test_fidelity.py).
Per chunk of tuning steps it prints that live count, the count of the miniature of the
configuration the pool ran in each step (``mini``), and the LRU miniature's. Where live
matches ``mini``, the miniatures measure the pool; where live runs below ``mini`` after a
switch, the switch has a transient no miniature sees: each runs its configuration from the
start, the pool arrives with content another configuration chose.

``--hold I`` holds the pool and the tuner at the grid's configuration ``I`` from the first
request (NOTE(cold) off); ``--faithful`` gives the duel's miniatures the pool's fill
(NOTE(admit) in adaptive.py), which the product's miniatures do not have (docs/benchmarks.md
"The duel's fill"). Hit counts are deterministic: one run.
"""

from __future__ import annotations

from zlib import crc32

from bench.cells import cell_trace
from bench.common import bench_parser, machine, write_json
from kvpool.core.eviction import AdaptivePolicy
from kvpool.core.eviction.admit_tuner import WIN, AdmitTuner, Cfg, MiniAdmit
from kvpool.core.eviction.base import PENDING
from kvpool.core.eviction.tuner import run_hits
from kvpool.replay.loop import simulate

CELLS = ("vision_mix@2@16000", "code_edit@2@4000", "scan_mix@2@4000", "uniform@2@16000")
DEEP = 1 << 62  # no missed block in the release yet


class FaithfulMini(MiniAdmit):
    """Invariant: MiniAdmit's. Under a duel, new content that takes the window over its share
    pushes the window's oldest crc into main with no duel, as the pool does (NOTE(admit))."""

    __slots__ = ()

    def access_runs(self, runs) -> int:
        if not (self.duel and self.share < 1.0):
            return super().access_runs(runs)
        where, qs = self.where, self.qs
        win, hits, t = qs[WIN], 0, self.clock
        for run, miss in runs:
            hits += run_hits(run, where, miss)
            for c, k, _ in run:
                t += 1
                q = where.get(c)
                if q is None:
                    self.clock = t
                    if len(where) >= self.capacity:
                        self._evict()
                    win[c] = t
                    where[c] = WIN
                    if len(win) > self.share * len(where) + 1:
                        self._to_main(win.popitem(last=False)[0])
                    continue
                if q != k:
                    del qs[q][c]
                qs[k][c] = t
                qs[k].move_to_end(c)
                where[c] = k
        self.clock = t
        self.hits += hits
        return hits


class Recorder(AdmitTuner):
    """Invariant: AdmitTuner's. ``live`` gathers the pool's sampled hits between steps; each
    step logs (configuration index the pool ran, live hits, each miniature's hits)."""

    FAITHFUL = False  # FaithfulMini for the duel's miniatures
    HOLD = False  # never move

    def __init__(self, *args, **kw) -> None:
        self.live = 0
        self.log: list[tuple[int, int, list[int]]] = []
        super().__init__(*args, **kw)

    def _miniatures(self, size: int, classes: int) -> list:
        if not self.FAITHFUL:
            return super()._miniatures(size, classes)
        return [(FaithfulMini if g[2] else MiniAdmit)(size, g, self._freq, self._duel_freq,
                                                      self._moving) for g in self.GRID]

    def _step(self) -> bool:
        self.log.append((self.current, self.live, [s.hits for s in self.shadows]))
        self.live = 0
        return super()._step()

    def _nearest(self, passed: list[bool], gain: list[float], cur: int) -> int:
        return cur if self.HOLD else super()._nearest(passed, gain, cur)


class Counted(AdaptivePolicy):
    """Invariant: AdaptivePolicy's. The product, which also counts its own hits on the
    miniatures' slice of hash space into the tuner's ``live`` (a release's sampled blocks
    shallower than its first block that was not a revival); ``HOLD`` fixes a configuration."""

    name = "counted"
    TUNER = Recorder
    HOLD: Cfg | None = None

    def __init__(self, capacity: int = 0) -> None:
        super().__init__(capacity)
        self._first_new = DEEP  # depth of the release's first block that was no revival
        self._sampled_depths: list[int] = []
        if self.HOLD is not None:
            self._tuner.start_at(self.HOLD)
            self._set_cfg(self.HOLD)

    @property
    def log(self) -> list[tuple[int, int, list[int]]]:
        """Per tuning step: the configuration index the pool ran, its live hits, and each
        miniature's hits."""
        return self._tuner.log

    @property
    def live(self) -> int:
        """Live hits counted since the last tuning step."""
        return self._tuner.live

    def insert(self, block_id: int, block_hash: bytes, depth: int, now: float) -> None:
        w = self._where
        if not (0 <= block_id < len(w) and w[block_id] == PENDING
                and self._hash[block_id] == block_hash):
            self._first_new = min(self._first_new, depth)
        if (crc32(block_hash) >> 12) < self._sample:
            self._sampled_depths.append(depth)
        if not depth:  # the chain's head: the release is done, before the tuner's step
            new = self._first_new
            self._tuner.live += sum(d < new for d in self._sampled_depths)
            self._sampled_depths.clear()
            self._first_new = DEEP
        super().insert(block_id, block_hash, depth, now)


def counted(faithful: bool = False, hold: int | None = None) -> type[Counted]:
    """``Counted`` with the duel's miniatures faithful or not, held at grid index ``hold``."""
    tuner = type("Recorder", (Recorder,), {"FAITHFUL": faithful, "HOLD": hold is not None})
    cfg = None if hold is None else AdmitTuner.GRID[hold]
    return type("Counted", (Counted,), {"TUNER": tuner, "HOLD": cfg,
                                        "COLD": None if hold is not None else Counted.COLD})


def chunks(log: list[tuple[int, int, list[int]]], n: int) -> list[dict]:
    """``log`` cut into ``n`` runs of steps: per run its first step, the configurations the
    pool ran, its live hits, its configuration's miniature's (``mini``) and LRU's."""
    size = max(1, -(-len(log) // n))
    out = []
    for a in range(0, len(log), size):
        part = log[a:a + size]
        out.append({"step": a + 1, "ran": sorted({c for c, _, _ in part}),
                    "live": sum(lv for _, lv, _ in part),
                    "mini": sum(h[c] for c, _, h in part),
                    "lru": sum(h[0] for _, _, h in part)})
    return out


def cell(key: str, faithful: bool = False, hold: int | None = None, n: int = 8,
         scale: float = 1.0) -> dict:
    """One cell's replay through ``counted(faithful, hold)``: its hit rate, the steps where
    the pool's configuration changed, and ``chunks``; ``gap`` is live minus ``mini`` over
    the whole trace, ``after_switch`` the same over the steps from each switch to the next
    (the switches' transients, where there are any); ``scale`` scales a held-out shape."""
    reqs, cap = cell_trace(key, scale)
    policy = counted(faithful, hold)(cap)
    hits, blocks = simulate(reqs, policy, cap)
    log = policy.log
    switches = [(i + 1, AdmitTuner.GRID[c]) for i, (c, _, _) in enumerate(log)
                if i and c != log[i - 1][0]]
    gaps = [lv - h[c] for c, lv, h in log]
    first = switches[0][0] - 1 if switches else len(log)
    return {"rate": round(hits / blocks, 5), "switches": switches, "chunks": chunks(log, n),
            "gap": sum(gaps), "after_switch": sum(gaps[first:])}


def main(argv: list[str] | None = None) -> dict:
    ap = bench_parser("fidelity", __doc__, timing=False)
    ap.add_argument("--cells", nargs="+", default=list(CELLS))
    ap.add_argument("--hold", type=int, default=None, help="grid index to hold")
    ap.add_argument("--faithful", action="store_true", help="the duel's miniatures fill "
                    "as the pool does")
    ap.add_argument("--chunks", type=int, default=8)
    a = ap.parse_args(argv)
    res: dict = {"machine": machine(), "hold": a.hold, "faithful": a.faithful, "cells": {}}
    for key in a.cells:
        r = res["cells"][key] = cell(key, a.faithful, a.hold, a.chunks)
        print(f"{key}: rate {r['rate']:.4f}, live - mini {r['gap']:+d} "
              f"({r['after_switch']:+d} from the first switch), switches {r['switches']}")
        for c in r["chunks"]:
            print(f"  step {c['step']:4d} ran {c['ran']}: live {c['live']:6d} "
                  f"mini {c['mini']:6d} lru {c['lru']:6d}", flush=True)
    write_json(a.json, res)
    return res


if __name__ == "__main__":
    main()
