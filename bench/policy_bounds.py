"""bench/policy_bounds.py: what knowing which conversations come back is worth (a diagnostic).

    python -m bench.policy_bounds [--trace FILE] [--capacities 1000 4000 16000 64000]
                                  [--json FILE]

Not a policy: it looks into the future. For each request it knows one bit, whether the
request's *conversation* (keyed by its second hash id, the block after a shared first one) is
requested again later in the trace. With that bit, eviction is two LRU queues: blocks last
touched by a request whose conversation never returns, and each request's tail (the partial
last block, never reused), go first; blocks of returning conversations and every request's
first block (a prefix shared across conversations) go only when nothing else is left. Same
replay semantics as ``bench.policies`` (a request hits the leading run of its cached ids, then
its ids are touched or brought in tail first).

The gap between this bound and an online policy is what a better prediction of returns could
buy; the gap between it and OPT is what timing (knowing *when*) adds. On the conversation
trace at 16000 blocks the bound is within 0.002 of OPT, so there the whole LRU-to-OPT gap is
return prediction (issue 3's notes).
"""

from __future__ import annotations

import argparse
from collections import OrderedDict
from pathlib import Path

from bench.common import TRACE, machine, write_json
from bench.policies import Trace, load_trace, opt_hit_rate
from kvpool.replay.loop import replay


def conversation_key(ids: list[int], i: int) -> tuple[int, int]:
    """The conversation of request ``i``: its second hash id, or the request itself."""
    return (0, ids[1]) if len(ids) > 1 else (1, i)


def returns(reqs: Trace) -> list[bool]:
    """Per request: is its conversation requested again later (hindsight)."""
    seen: set[tuple[int, int]] = set()
    out = [False] * len(reqs)
    for i in range(len(reqs) - 1, -1, -1):
        k = conversation_key(reqs[i], i)
        out[i] = k in seen
        seen.add(k)
    return out


class ReturnOracle:
    """The two-queue cache of the return oracle (module docstring), driven by the product's
    replay loop. ``back[i]``: request i's conversation comes back. A request's first touch is
    its tail (``depth == n - 1``), which is where the next request's bit is taken."""

    def __init__(self, cap: int, back: list[bool]) -> None:
        if cap < 1:
            raise ValueError(f"capacity={cap}: needs at least one block")
        self.cap = cap
        self.back = iter(back)  # one bit per request, in replay order
        self.comes_back = False  # the current request's bit
        self.dead: OrderedDict[int, None] = OrderedDict()  # evicted first, oldest first
        self.live: OrderedDict[int, None] = OrderedDict()

    def __contains__(self, h: int) -> bool:
        return h in self.live or h in self.dead

    def touch(self, h: int, depth: int, n: int) -> None:
        if depth == n - 1:
            self.comes_back = next(self.back)
        live, dead = self.live, self.dead
        live.pop(h, None)
        dead.pop(h, None)
        keep = depth == 0 or (self.comes_back and depth < n - 1)
        (live if keep else dead)[h] = None
        if len(live) + len(dead) > self.cap:
            (dead if dead else live).popitem(last=False)


def oracle_hits(reqs: Trace, cap: int, back: list[bool] | None = None) -> tuple[int, int]:
    """(hits, blocks) of the return oracle at ``cap`` blocks (see the module docstring);
    ``back`` is ``returns(reqs)`` when the caller has it already."""
    back = returns(reqs) if back is None else back
    if len(back) != len(reqs):
        raise ValueError(f"{len(back)} return bits for {len(reqs)} requests")
    # an empty request touches nothing, so its bit is never taken: drop it here
    return replay(reqs, ReturnOracle(cap, [b for ids, b in zip(reqs, back) if ids]))


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(prog="python -m bench.policy_bounds", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--trace", type=Path,
                   default=TRACE)
    p.add_argument("--capacities", type=int, nargs="+", default=[1000, 4000, 16000, 64000])
    p.add_argument("--json", type=Path, default=None)
    args = p.parse_args(argv)
    if not args.trace.is_file():
        raise SystemExit(f"trace {args.trace} not found (pass --trace FILE)")
    reqs = load_trace(args.trace)
    back = returns(reqs)
    report: dict = {"machine": machine(), "trace": str(args.trace), "requests": len(reqs),
                    "returning_share": round(sum(back) / max(1, len(back)), 4),
                    "capacities": {}}
    print(f"{len(reqs)} requests; {report['returning_share']:.1%} of them come back")
    print(f"{'capacity':>9} {'oracle':>8} {'opt':>8}")
    for cap in args.capacities:
        h, b = oracle_hits(reqs, cap, back)
        row = {"oracle_returns": round(h / b, 6), "opt": round(opt_hit_rate(reqs, cap), 6)}
        report["capacities"][str(cap)] = row
        print(f"{cap:>9} {row['oracle_returns']:>8.4f} {row['opt']:>8.4f}", flush=True)
    if args.json:
        write_json(args.json, report)
    return report


if __name__ == "__main__":
    main()
