"""bench/s3fifo_diag.py: where S3-FIFO's hits over LRU come from on ``call_center`` (research,
a diagnostic, not a policy; docs/benchmarks.md "`call_center`: what S3-FIFO keeps").

    python -m bench.s3fifo_diag [--seeds 2 1] [--capacity 16000] [--scale 1.0] [--json F]

At 16000 blocks S3-FIFO beats LRU and every configuration of ``adaptive``'s grid held fixed
(the best, bonus 4) on both seeds. This replays one cell (a seed of
``bench.heldout_call_center.generate`` at a capacity) through LRU (the product's), adaptive held
at bonus 4 (``AdaptivePolicy(cap, cfg=(4.0, 1.0, False))``) and both S3-FIFO variants of
bench/baselines.py (move-to-main threshold 1 and 2), with the instant-replay semantics of
bench.heldout (``kvpool.replay.loop``: a request hits the leading run of its cached ids, then
its ids are touched tail first), and keeps every request's hits (``request_hits``; their sum is
``bench.policies.hits``). It attributes them:

- per request kind (``meta[i][0]``: route, voice, assist, wrapup, outbound, qa): requests,
  blocks, hits under each policy, and the better S3-FIFO variant's (by total hits) hits minus
  LRU's and minus bonus 4's;
- per gap, the trace time (``Run.times``) since a request's reusable prefix was last sent:
  the prefix is the leading run of its ids that some earlier request sent (what an unbounded
  cache would hit), and all of it was last sent together by the last request holding its
  deepest block (a block id always follows the same parent). Buckets: new (nothing sent
  before), < 1 min, < 1 h, < 1 day, more. A third table times the request's first block
  instead (its head as last sent); in call_center that is an application's system prompt,
  re-sent every few seconds, so nearly every request lands in < 1 min.
- per segment kind (system prompt, persona, SOP, CRM record, notes, transcript, ...: a block
  belongs to the segment holding its last token; bench/s3fifo_segments.py), overall and per
  prefix gap (requests with no reusable prefix, which hit nothing, are left out of the print).

Never pass/fail. One process, one policy at a time (10-20 s each at 16000 blocks).
"""

from __future__ import annotations

from collections.abc import Sequence

from bench.baselines import S3FIFO, S3FIFO1, Baseline
from bench.common import bench_parser, machine, write_json
from bench.heldout_call_center import generate
from bench.s3fifo_segments import SEG_KINDS, block_runs, kind_hits, segment_kinds
from kvpool.core.eviction import EvictionPolicy, make_policy
from kvpool.core.eviction.adaptive import AdaptivePolicy
from kvpool.replay.loop import PolicyCache, ReplayCache, leading_run

Trace = list[list[int]]
BONUS4 = (4.0, 1.0, False)  # adaptive's grid point bonus 4, no window, no duel
POLICIES = ("lru", "bonus4", "s3fifo1", "s3fifo")
GAPS = ("new", "< 1 min", "< 1 h", "< 1 day", "more")
_BOUNDS = (60.0, 3600.0, 86400.0)  # seconds: the upper ends of the timed buckets


def new_cache(name: str, cap: int) -> ReplayCache:
    """The replay cache of one of ``POLICIES`` at ``cap`` blocks."""
    if name == "lru":
        return PolicyCache(make_policy("lru", cap), cap)
    if name == "bonus4":
        return PolicyCache(AdaptivePolicy(cap, cfg=BONUS4), cap)
    return {"s3fifo1": S3FIFO1, "s3fifo": S3FIFO}[name](cap)


def request_hits(reqs: Trace, cache: ReplayCache | EvictionPolicy | Baseline,
                 cap: int = 0) -> list[int]:
    """Each request's hits, replayed as ``kvpool.replay.loop.replay`` does (its sum is that
    loop's hits); a bare ``EvictionPolicy`` is wrapped in a ``PolicyCache`` of ``cap``."""
    if isinstance(cache, EvictionPolicy):
        cache = PolicyCache(cache, cap)
    touch = cache.touch
    out = []
    for ids in reqs:
        n = len(ids)
        out.append(leading_run(ids, cache))
        for d in range(n - 1, -1, -1):
            touch(ids[d], d, n)
    return out


def bucket(gap: float | None) -> str:
    """The ``GAPS`` label of a gap in seconds (None: nothing sent before)."""
    if gap is None:
        return GAPS[0]
    for label, bound in zip(GAPS[1:], _BOUNDS):
        if gap < bound:
            return label
    return GAPS[-1]


def prefix_gaps(reqs: Trace, times: Sequence[float]) -> list[float | None]:
    """Per request, the time since its reusable prefix (the leading run of ids sent before)
    was last sent: the last time its deepest such block was sent. None: no such prefix."""
    last: dict[int, float] = {}
    out: list[float | None] = []
    for ids, t in zip(reqs, times):
        k = leading_run(ids, last)
        out.append(t - last[ids[k - 1]] if k else None)
        for h in ids:
            last[h] = t
    return out


def head_gaps(reqs: Trace, times: Sequence[float]) -> list[float | None]:
    """Per request, the time since its first block was last sent (None: never)."""
    last: dict[int, float] = {}
    out: list[float | None] = []
    for ids, t in zip(reqs, times):
        out.append(t - last[ids[0]] if ids and ids[0] in last else None)
        for h in ids:
            last[h] = t
    return out


def attribute(labels: Sequence[str], reqs: Trace,
              per_req: dict[str, list[int]]) -> dict[str, dict[str, int]]:
    """Per label: requests, blocks and each policy's hits summed over its requests."""
    rows: dict[str, dict[str, int]] = {}
    for i, lab in enumerate(labels):
        r = rows.setdefault(lab, {"requests": 0, "blocks": 0, **{p: 0 for p in per_req}})
        r["requests"] += 1
        r["blocks"] += len(reqs[i])
        for p, h in per_req.items():
            r[p] += h[i]
    return rows


def print_table(title: str, rows: dict[str, dict[str, int]], order: Sequence[str],
                s3: str) -> None:
    """One table: a row per label in ``order`` (those present) and a total; ``s3`` is the
    S3-FIFO variant the two differences are taken for."""
    pols = [p for p in POLICIES if p in next(iter(rows.values()))]
    w = max(10, *(len(o) + 2 for o in rows))
    print(f"\n{title}")
    print(f"{'':{w}s}{'requests':>9s}{'blocks':>10s}" + "".join(f"{p:>10s}" for p in pols)
          + f"{s3 + '-lru':>13s}{s3 + '-b4':>13s}")
    total = {k: sum(r[k] for r in rows.values()) for k in ("requests", "blocks", *pols)}
    for lab in [*[o for o in order if o in rows], "total"]:
        r = total if lab == "total" else rows[lab]
        print(f"{lab:{w}s}{r['requests']:9d}{r['blocks']:10d}"
              + "".join(f"{r[p]:10d}" for p in pols)
              + f"{r[s3] - r['lru']:+13d}{r[s3] - r['bonus4']:+13d}")


def diag_cell(seed: int, cap: int, scale: float = 1.0,
              policies: Sequence[str] = POLICIES) -> dict:
    """One cell's attribution: per kind, per prefix gap and per head gap (see the module
    docstring), with each policy's total hit rate; printed as six tables and a per-request count."""
    run = generate(seed, scale)
    reqs = run.trace
    per_req = {p: request_hits(reqs, new_cache(p, cap)) for p in policies}
    blocks = sum(map(len, reqs))
    pgaps = prefix_gaps(reqs, run.times)
    s3 = max((p for p in policies if p.startswith("s3")), key=lambda p: sum(per_req[p]))
    res = {"requests": len(reqs), "blocks": blocks, "s3": s3,
           "hits": {p: sum(h) for p, h in per_req.items()},
           "hit_rate": {p: round(sum(h) / blocks, 4) for p, h in per_req.items()},
           "kind": attribute([m[0] for m in run.meta], reqs, per_req),
           "prefix_gap": attribute([bucket(g) for g in pgaps], reqs, per_req),
           "head_gap": attribute([bucket(g) for g in head_gaps(reqs, run.times)],
                                 reqs, per_req)}
    print(f"\n== call_center@{seed}@{cap} (scale {scale}): {len(reqs)} requests, {blocks} "
          "blocks; hit rates " + ", ".join(f"{p} {r:.4f}" for p, r in res["hit_rate"].items()))
    kinds = sorted(res["kind"], key=lambda k: -res["kind"][k]["blocks"])
    print_table("hits per request kind", res["kind"], kinds, s3)
    print_table("hits per gap since the reusable prefix was last sent", res["prefix_gap"],
                GAPS, s3)
    print_table("hits per gap since the first block was last sent", res["head_gap"], GAPS, s3)
    res["kind_gap"] = attribute([f"{m[0]} {bucket(g)}" for m, g in zip(run.meta, pgaps)],
                                reqs, per_req)
    cross = [f"{k} {g}" for k in kinds for g in GAPS]
    print_table("hits per kind and prefix gap", res["kind_gap"], cross, s3)
    res.update(segment_tables(run, per_req, [bucket(g) for g in pgaps], s3))
    res["split"] = split(per_req["lru"], per_req[s3])
    print(f"{s3} vs lru per request: " + ", ".join(f"{k} {v}" for k, v in res["split"].items()))
    return res


def segment_tables(run, per_req: dict[str, list[int]], gaps: Sequence[str],
                   s3: str) -> dict:
    """Hits per segment kind (bench/s3fifo_segments.py), overall and per prefix gap, printed."""
    kinds = segment_kinds(run)
    runs = [block_runs(m[3], kinds) for m in run.meta]
    res = {"segment": kind_hits(runs, per_req), "segment_gap": kind_hits(runs, per_req, gaps)}
    print_table("hits per segment kind", res["segment"], SEG_KINDS, s3)
    print_table("hits per segment kind and prefix gap", res["segment_gap"],
                [f"{k} {g}" for g in GAPS[1:] for k in SEG_KINDS], s3)
    return res


def split(lru: Sequence[int], s3: Sequence[int]) -> dict[str, int]:
    """How many requests S3-FIFO hits more of than LRU (of them, how many LRU hits none of),
    and fewer; and the hits those requests gain and lose."""
    won = [(a, b) for a, b in zip(lru, s3) if b > a]
    lost = [(a, b) for a, b in zip(lru, s3) if b < a]
    return {"more": len(won), "more_lru_none": sum(a == 0 for a, _ in won),
            "gained": sum(b - a for a, b in won), "fewer": len(lost),
            "lost": sum(a - b for a, b in lost)}


def main(argv: list[str] | None = None) -> dict:
    ap = bench_parser("s3fifo_diag", __doc__, timing=False)
    ap.add_argument("--seeds", type=int, nargs="+", default=[2, 1])
    ap.add_argument("--capacity", type=int, default=16000)
    ap.add_argument("--scale", type=float, default=1.0)
    a = ap.parse_args(argv)
    out = {"machine": machine(), "cells": {}}
    for seed in a.seeds:
        out["cells"][f"call_center@{seed}@{a.capacity}"] = diag_cell(seed, a.capacity, a.scale)
    write_json(a.json, out)
    return out


if __name__ == "__main__":
    main()
