"""bench/route.py: routing and shared-tier write policies, simulated on a trace.

    python -m bench.route [--trace FILE] [--json FILE] [--replicas 3] [--local-blocks 2000]
                          [--shared-blocks 16000] [--limit N] [--quick]

Model (block = one trace hash id, 512 tokens; capacities count blocks):

- Each replica is an LRU of ``--local-blocks`` with the instant-replay semantics of
  ``kvpool replay --instant`` (kvpool/replay/instant.py): a request hits the leading run
  of its hash ids that is cached, then its blocks are touched or inserted tail first, so the
  head ends most recently used.
- The shared tier (Redis under allkeys-lru) is one LRU of ``--shared-blocks``. After the local
  hit ``k`` the replica probes the blocks beyond it: the remote hit is the leading run of
  ``hash_ids[k:]`` in the tier (the probe TOUCHes that run, so it becomes recent). Remote hits
  are fetched into the local LRU with the rest of the request.
- Write policies (SGLang's names):
    off                      no shared tier: total = local
    write_through            every block of every request is put (tail first; a put of a key
                             already there refreshes it, as the probe's TOUCH does)
    write_through_selective  a block is put once it has been a local hit ``--selective-hits``
                             times (default 2) while resident on that replica (SGLang's
                             hit_count >= write_through_threshold; the count dies with the
                             block on local eviction)
    write_back               a block is put when its replica evicts it
- Load = in-flight requests of a replica at the request's arrival (the trace's timestamp).
  Constant-rate service model: a request occupies its replica for
  ``uncached_tokens / --prefill-tps + output_length / --decode-tps`` seconds (uncached =
  input tokens beyond the local+remote hit), so hits also shorten service.
- Routing: round_robin (request i -> replica i mod N), random (seeded), least_loaded (fewest
  in flight, lower index on ties), prefix_aware (kvpool.router.scoring.choose: the longest
  local hit with SGLang's load guard, the function the live router runs).

Reports local, remote and total hit rate (hit blocks / trace blocks) per routing policy without
the tier, and per write policy under each routing policy. Never pass/fail.
"""

from __future__ import annotations

import heapq
import random
import sys
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from bench.common import TRACE, bench_parser, machine, write_json
from kvpool.router.scoring import LoadGuard, choose

DEFAULT_TRACE = TRACE
ROUTINGS = ("round_robin", "random", "least_loaded", "prefix_aware")
WRITE_POLICIES = ("off", "write_through", "write_through_selective", "write_back")
BLOCK_TOKENS = 512


@dataclass(frozen=True, slots=True)
class Req:
    """One trace request as the simulation sees it."""

    arrival_s: float  # trace timestamp in seconds
    output_length: int  # decode tokens (service time)
    hash_ids: tuple[int, ...]  # 512-token prefix blocks


class LRU:
    """Invariant: ``len(self.order) <= capacity``; iteration order is least recent first."""

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError("capacity must be >= 1 block")
        self.capacity = capacity
        self.order: OrderedDict[int, None] = OrderedDict()

    def __contains__(self, h: int) -> bool:
        return h in self.order

    def __len__(self) -> int:
        return len(self.order)

    def run(self, ids: Sequence[int], start: int = 0) -> int:
        """Length of the leading run of ``ids[start:]`` held; no recency change (a peek)."""
        n = start
        while n < len(ids) and ids[n] in self.order:
            n += 1
        return n - start

    def touch(self, h: int) -> int | None:
        """Make ``h`` most recent (inserting it); returns the key evicted for it, if any."""
        if h in self.order:
            self.order.move_to_end(h)
            return None
        self.order[h] = None
        if len(self.order) > self.capacity:
            return self.order.popitem(last=False)[0]
        return None


class Replica:
    """One replica's local LRU, its in-flight finish times and its selective hit counts."""

    def __init__(self, capacity: int) -> None:
        self.lru = LRU(capacity)
        self.finishes: list[float] = []  # heap of in-flight requests' finish times
        self.hit_counts: dict[int, int] = {}  # write_through_selective: hits while resident

    def load(self, now: float) -> int:
        while self.finishes and self.finishes[0] <= now:
            heapq.heappop(self.finishes)
        return len(self.finishes)


class Simulation:
    """N replicas, one routing policy, an optional shared tier under one write policy."""

    def __init__(self, routing: str, write_policy: str = "off", *, replicas: int = 3,
                 local_blocks: int = 2000, shared_blocks: int = 16000,
                 guard: LoadGuard = LoadGuard(), selective_hits: int = 2,
                 prefill_tps: float = 8000.0, decode_tps: float = 30.0, seed: int = 0) -> None:
        if routing not in ROUTINGS:
            raise ValueError(f"routing {routing!r}: choose one of {', '.join(ROUTINGS)}")
        if write_policy not in WRITE_POLICIES:
            raise ValueError(f"write policy {write_policy!r}: one of {', '.join(WRITE_POLICIES)}")
        self.routing, self.write_policy = routing, write_policy
        self.replicas = [Replica(local_blocks) for _ in range(replicas)]
        self.shared = LRU(shared_blocks) if write_policy != "off" else None
        self.guard, self.selective_hits = guard, selective_hits
        self.prefill_tps, self.decode_tps = prefill_tps, decode_tps
        self.rng = random.Random(seed)
        self.i = 0  # requests routed so far (round robin)
        self.rr = 0  # prefix_aware's round-robin counter for zero-hit requests
        self.local = self.remote = self.blocks = 0
        self.reasons: dict[str, int] = {}
        self.placed: list[int] = []  # replica of each request (tests read it)

    def route(self, ids: Sequence[int], now: float) -> int:
        n = len(self.replicas)
        if self.routing == "round_robin":
            return self.i % n
        if self.routing == "random":
            return self.rng.randrange(n)
        loads = [r.load(now) for r in self.replicas]
        if self.routing == "least_loaded":
            return min(range(n), key=lambda i: (loads[i], i))
        hits = [r.lru.run(ids) for r in self.replicas]
        idx, reason = choose(hits, loads, self.guard, self.rr)
        if reason == "round_robin":
            self.rr += 1
        self.reasons[reason] = self.reasons.get(reason, 0) + 1
        return idx

    def step(self, req: Req) -> tuple[int, int]:
        """Route and serve one request; returns (local hit blocks, remote hit blocks)."""
        ids = req.hash_ids
        rep = self.replicas[self.route(ids, req.arrival_s)]
        self.i += 1
        self.placed.append(self.replicas.index(rep))
        shared, policy = self.shared, self.write_policy
        k = rep.lru.run(ids)
        r = shared.run(ids, k) if shared is not None else 0
        if shared is not None:
            for h in reversed(ids[k:k + r]):  # the probe TOUCHes the run it found
                shared.touch(h)
        counts = rep.hit_counts
        for pos in range(len(ids) - 1, -1, -1):
            h = ids[pos]
            if pos < k and policy == "write_through_selective":
                c = counts[h] = counts.get(h, 0) + 1
                if c >= self.selective_hits:
                    shared.touch(h)
            evicted = rep.lru.touch(h)
            if evicted is not None:
                counts.pop(evicted, None)
                if policy == "write_back":
                    shared.touch(evicted)
        if policy == "write_through":
            for h in reversed(ids):
                shared.touch(h)
        uncached = max(0, len(ids) - k - r) * BLOCK_TOKENS
        heapq.heappush(rep.finishes, req.arrival_s + uncached / self.prefill_tps
                       + req.output_length / self.decode_tps)
        self.local += k
        self.remote += r
        self.blocks += len(ids)
        return k, r

    def run(self, reqs: Sequence[Req]) -> dict:
        for req in reqs:
            self.step(req)
        b = self.blocks or 1
        out = {"routing": self.routing, "write_policy": self.write_policy,
               "requests": self.i, "blocks": self.blocks,
               "local_hit_rate": round(self.local / b, 6),
               "remote_hit_rate": round(self.remote / b, 6),
               "total_hit_rate": round((self.local + self.remote) / b, 6),
               "per_replica": [self.placed.count(i) for i in range(len(self.replicas))]}
        if self.reasons:
            out["reasons"] = dict(sorted(self.reasons.items()))
        return out


def load_reqs(path, limit: int | None = None) -> list[Req]:
    from kvpool.replay.trace import load_trace

    return [Req(r.arrival_s, r.output_length, r.hash_ids) for r in load_trace(path, limit)]


def simulate_all(reqs: Sequence[Req], **kw) -> dict:
    """Every routing policy without the tier, then every write policy under every routing."""
    rows = [Simulation(rt, wp, **kw).run(reqs) for rt in ROUTINGS for wp in WRITE_POLICIES]
    by = {(r["routing"], r["write_policy"]): r for r in rows}
    rr = by[("round_robin", "off")]["total_hit_rate"]
    pa = by[("prefix_aware", "off")]["total_hit_rate"]
    best = max((r for r in rows if r["write_policy"] != "off"),
               key=lambda r: r["total_hit_rate"])
    return {"rows": rows,
            "prefix_aware_over_round_robin": round(pa / rr, 4) if rr else None,
            "best_shared": {k: best[k] for k in ("routing", "write_policy", "total_hit_rate")}}


def print_table(res: dict) -> None:
    print(f"{'routing':<14}{'write policy':<26}{'local':>8}{'remote':>8}{'total':>8}  per replica")
    for r in res["rows"]:
        print(f"{r['routing']:<14}{r['write_policy']:<26}{r['local_hit_rate']:>8.4f}"
              f"{r['remote_hit_rate']:>8.4f}{r['total_hit_rate']:>8.4f}  {r['per_replica']}")
    print(f"prefix_aware / round_robin (no tier): {res['prefix_aware_over_round_robin']}x; "
          f"best with the shared tier: {res['best_shared']}")


def main(argv: Sequence[str] | None = None) -> int:
    p = bench_parser("route", __doc__, timing=False)
    p.add_argument("--trace", default=str(DEFAULT_TRACE))
    p.add_argument("--replicas", type=int, default=3)
    p.add_argument("--local-blocks", type=int, default=2000)
    p.add_argument("--shared-blocks", type=int, default=16000)
    p.add_argument("--guard-abs", type=float, default=8, help="load guard: max-min above this")
    p.add_argument("--guard-rel", type=float, default=1.5, help="and max above this x min")
    p.add_argument("--selective-hits", type=int, default=2)
    p.add_argument("--prefill-tps", type=float, default=8000.0)
    p.add_argument("--decode-tps", type=float, default=30.0)
    p.add_argument("--limit", type=int, default=None, help="first N requests only")
    p.add_argument("--quick", action="store_true", help="the first 3000 requests")
    a = p.parse_args(argv)
    reqs = load_reqs(a.trace, 3000 if a.quick and a.limit is None else a.limit)
    kw = dict(replicas=a.replicas, local_blocks=a.local_blocks, shared_blocks=a.shared_blocks,
              guard=LoadGuard(a.guard_abs, a.guard_rel), selective_hits=a.selective_hits,
              prefill_tps=a.prefill_tps, decode_tps=a.decode_tps)
    res = simulate_all(reqs, **kw)
    print_table(res)
    if a.json:
        from pathlib import Path

        Path(a.json).parent.mkdir(parents=True, exist_ok=True)
        params = {k: v for k, v in vars(a).items() if k != "json"}
        write_json(a.json, {"machine": machine(), "params": params, **res})
    return 0


if __name__ == "__main__":
    sys.exit(main())
