"""bench/policies.py: eviction-policy hit rates under trace replay (docs/benchmarks.md "Trace replay").

    python -m bench.policies [--trace FILE] [--json FILE] [--capacities 1000 4000 ...]
                             [--policies lru classlru] [--baselines s3fifo arc ...]
                             [--candidates ghostwin doorarc follow]
                             [--traces conversation zipf_prefix ...] [--seeds 1 2 3] [--quick]
                             [--salts N]

For every trace and capacity it replays the requests through each policy of
``kvpool.core.eviction.POLICIES`` with the instant-replay semantics (``simulate``: a request
hits the leading run of its cached hash ids, then its blocks are touched or brought in tail
first), and through the classic baselines of ``bench/baselines.py`` (SIEVE, S3-FIFO, ARC,
SLRU, W-TinyLFU) and the research candidates (``CANDIDATES``: ``bench/ghostwin.py``,
``bench/doorarc.py``, ``bench/follow.py``, ``bench/admitlru.py`` ...) under the same semantics, and prints the hit rates
next to Belady's OPT, computed as ``../shared/anchors/trace_hits.py`` does (per block, ignoring prefix coupling: an
upper bound), with each one's share of the LRU-to-OPT gap, ``(p - lru) / (opt - lru)``. It
also times each policy's operations (ns per call sequence, steady state) and measures its
memory per evictable block. Never pass/fail. ``--salts N`` replays each adaptive policy on N
hash-salted copies of each trace (``salted``) and prints the spread of its hits minus LRU's:
its own sampling noise, against which a gap of a few hundred hits can be read.

Traces: the Mooncake conversation trace (``--trace``), plus generated ones (seeded, in memory,
never written to disk; bench/policy_traces.py), each shaped to stress a different assumption:

    zipf_prefix   shared prefixes of Zipf(1) popularity, each request adds a unique tail
    multiturn     sessions whose every turn extends the previous turn's hash ids
    scan_mix      a small hot set of prefixes mixed with long one-off scans
    uniform       uniformly chosen documents, a random-length prefix of each
"""

from __future__ import annotations

import argparse
import gc
import heapq
import random
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path

from bench.baselines import BASELINES, Baseline, replay
from bench.doorarc import DoorARCPolicy
from bench.fixedsplit import FixedSplitPolicy
from bench.follow import FollowPolicy
from bench.ghostwin import GhostWindowTinyLFU
from bench.wintune import WinTunePolicy
from bench.arctune import ArcTunePolicy
from bench.admitlru import AdmitLRUPolicy
from bench.admitrun import AdmitRunPolicy
from bench.admitbig import AdmitBigPolicy
from bench.tuner_diag import KeyReleasePolicy, RetreatPolicy, WarmStartPolicy
from bench.ghostbig import GhostBigPolicy
from bench.ghostpair import GhostPairPolicy
from bench.wingain import WinGainPolicy
from bench.crp import CRPAgePolicy, CRPClassPolicy, CRPPolicy
from bench.mainwin import MainWinPolicy
from bench.mainev import MainEvPolicy
from bench.common import TRACE, bench_parser, machine, write_json
from bench.policy_traces import GENERATED
from kvpool.core.eviction import POLICIES, EvictionPolicy, make_policy
from kvpool.replay import trace as replay_trace
from kvpool.replay.loop import simulate, leading_run

CAPACITIES = (1000, 4000, 16000, 64000)
DEFAULT_TRACE = TRACE
Trace = list[list[int]]
# Research policies, not in the product: ghostwin is hash-keyed like the baselines; doorarc and
# follow keep the product's block protocol, so they also get salts and per-call costs.
CANDIDATES: dict[str, type[Baseline] | type[EvictionPolicy]] = {
    p.name: p for p in (GhostWindowTinyLFU, DoorARCPolicy, FollowPolicy, WinTunePolicy,
                       ArcTunePolicy, AdmitLRUPolicy, AdmitRunPolicy,
                       AdmitBigPolicy, RetreatPolicy, KeyReleasePolicy, WarmStartPolicy,
                       GhostBigPolicy, GhostPairPolicy, WinGainPolicy, CRPPolicy,
                       CRPClassPolicy, CRPAgePolicy, FixedSplitPolicy, MainWinPolicy,
                       MainEvPolicy)}


def new_policy(name: str, cap: int) -> EvictionPolicy:
    """A product policy, or a block-protocol research candidate, by name."""
    return CANDIDATES[name](cap) if name in CANDIDATES else make_policy(name, cap)


def hits(reqs: Trace, p: Baseline | EvictionPolicy, cap: int) -> tuple[int, int]:
    """(hits, blocks): ``simulate`` for a block policy, ``replay`` for a hash-keyed cache."""
    return simulate(reqs, p, cap) if isinstance(p, EvictionPolicy) else replay(reqs, p)


def salted(reqs: Trace, salt: int) -> Trace:
    """``reqs`` with every hash id multiplied by ``2 * salt + 1``: the same trace to any policy
    that only compares ids (LRU's hits are unchanged), but every id's CRC-32 differs, so an
    adaptive policy samples another slice of hash space and its sketch collides elsewhere. The
    spread of its hits over salts is its sampling noise, the yardstick for a small gap to LRU.
    NOTE(linear): CRC-32 is affine over XOR, so an offset in bits the ids never use would only
    XOR every CRC with one constant (the sketch's collisions unchanged); the carries of an odd
    multiplier mix each id's bits."""
    if salt == 0:
        return reqs
    m = 2 * salt + 1
    return [[h * m for h in r] for r in reqs]


def salt_spread(reqs: Trace, pol: str, cap: int, salts: int, lru_hits: int) -> dict:
    """``pol``'s hits minus LRU's at ``cap`` over ``salts`` salted copies of ``reqs``."""
    d = [simulate(salted(reqs, s), new_policy(pol, cap), cap)[0] - lru_hits
         for s in range(salts)]
    return {"min": min(d), "max": max(d), "mean": round(sum(d) / len(d), 1),
            "below": sum(x < 0 for x in d), "salts": salts}


def load_trace(path: Path, limit: int | None = None) -> Trace:
    """Each request's hash ids, from any trace format kvpool replay reads (auto-detected:
    kvpool/replay/formats.py); a format without prefix information gives unique ids."""
    return [list(r.hash_ids) for r in replay_trace.load_trace(path, limit)]


# ---------------------------------------------------------------- reference: Belady OPT
def opt_hit_rate(reqs: Trace, cap: int) -> float:
    """Belady's offline optimum per block (evict the block used again farthest in the
    future), requests' blocks in order; hits counted as the leading cached run. The same
    procedure as trace_hits.py, so the figures are comparable with the anchor's."""
    uses: dict[int, list[int]] = {}
    t = 0
    for ids in reqs:
        for h in ids:
            uses.setdefault(h, []).append(t)
            t += 1
    for v in uses.values():
        v.reverse()  # pop() yields uses in time order
    never = float("inf")
    cached: dict[int, float] = {}  # hash id -> its next use
    heap: list[tuple[float, int]] = []  # (-next use, hash id), lazily invalidated
    hits = total = 0
    for ids in reqs:  # head first, as trace_hits.py (not the replay loop's tail-first order)
        hits += leading_run(ids, cached)
        total += len(ids)
        for h in ids:
            u = uses[h]
            u.pop()
            nxt = u[-1] if u else never
            cached[h] = nxt
            heapq.heappush(heap, (-nxt, h))
            while len(cached) > cap:
                neg, v = heapq.heappop(heap)
                if cached.get(v) == -neg:
                    del cached[v]
    return hits / total


# ---------------------------------------------------------------- per-op cost and memory
def op_costs(name: str, cap: int = 65536, n: int = 30000, seed: int = 0,
             warm: int = 0) -> dict:
    """Steady-state ns per call on a full policy of ``cap`` blocks, each call timed in a batch
    of ``n``: evict; insert (new content into the evicted blocks); on_hit; remove (revival
    of random members); insert_revived (their release); and the sequences a miss (evict +
    insert) and a hit (on_hit + remove + insert) cost in ``simulate``. ``warm``: _filled's;
    ``cfg``: what evict and insert ran on (docs/benchmarks.md "Cost per call: the duel's
    path inline")."""
    rng = random.Random(seed)
    keys = [i.to_bytes(8, "little") for i in range(cap + n)]
    p = _filled(name, cap, keys, warm)
    owner = list(range(cap))  # block -> index of its content key
    ns: dict[str, float] = {}

    def timed(label: str, fn: Callable[[], None]) -> None:
        t0 = time.perf_counter()
        fn()
        ns[label] = round((time.perf_counter() - t0) / n * 1e9)

    victims: list[int] = []
    timed("evict", lambda: victims.extend(p.evict() for _ in range(n)))

    def insert_new() -> None:
        for i, b in enumerate(victims):
            owner[b] = cap + i
            p.insert(b, keys[cap + i], 0, 0.0)

    timed("insert", insert_new)
    cfg = getattr(p, "cfg", None)
    picks = rng.sample(range(cap), n)
    hashes = [keys[owner[b]] for b in picks]
    timed("on_hit", lambda: [p.on_hit(h) for h in hashes])
    timed("remove", lambda: [p.remove(b) for b in picks])
    timed("insert_revived", lambda: [p.insert(b, h, 0, 0.0) for b, h in zip(picks, hashes)])
    p.check_invariants()
    ns["miss"] = ns["evict"] + ns["insert"]
    ns["hit"] = ns["on_hit"] + ns["remove"] + ns["insert_revived"]
    if cfg is not None:
        ns["cfg"] = list(cfg)
    return ns


def _filled(name: str, cap: int, keys: list[bytes], warm: int) -> EvictionPolicy:
    """A policy holding blocks 0..cap-1 with ``keys[b]``. The fill is one-off content, so
    ``adaptive`` then evicts and inserts on NOTE(cold)'s duel; ``warm``: a hit on content
    never inserted (4 bytes: no key of the 8-byte ones) comes first, and it stays LRU, the
    state of a pool with any reuse before its first eviction. op_costs' first remove of a
    block released within the pool's last len(pool) releases (most are) ends NOTE(cold), so
    the calls after it run as LRU in either state."""
    p = new_policy(name, cap)
    if warm:
        p.on_hit(b"warm")
    for b in range(cap):
        p.insert(b, keys[b], 0, 0.0)
    gc.collect()
    return p


def bytes_per_block(name: str, cap: int, turnovers: int = 0) -> float:
    """tracemalloc bytes of a policy holding ``cap`` evictable blocks, per block (the block
    hashes themselves are the pool's and are not counted); after ``turnovers`` times ``cap``
    evictions, each refilled with new content, so ghosts and miniatures are full."""
    keys = [i.to_bytes(8, "little") for i in range((1 + turnovers) * cap)]
    gc.collect()
    tracemalloc.start()
    try:
        p = new_policy(name, cap)
        for b in range(cap):
            p.insert(b, keys[b], 0, 0.0)
        for i in range(turnovers * cap):
            p.insert(p.evict(), keys[cap + i], 0, 0.0)
        size = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    return round(size / cap, 1)


# ---------------------------------------------------------------- driver
def replay_all(name: str, reqs: Trace, caps: list[int], policies: list[str],
               baselines: list[str], with_opt: bool, salts: int = 1,
               candidates: tuple[str, ...] = ()) -> dict:
    blocks = sum(map(len, reqs))
    unique = len({h for r in reqs for h in r})
    res: dict = {"requests": len(reqs), "blocks": blocks, "unique": unique, "hit_rate": {},
                 "ns_per_block": {}, "final_bonus": {}, "opt": {}, "gap_share": {},
                 "salt_spread": {}}
    lru_hits: dict[int, int] = {}
    print(f"\n== {name}: {len(reqs)} requests, {blocks} blocks, {unique} unique", flush=True)
    print(f"{'capacity':12s}" + "".join(f"{c:>9d}" for c in caps) + "   ns/block")
    pols = [*policies, *candidates, *baselines]
    for pol in pols:
        rates, ns, bonus = {}, {}, {}
        for c in caps:
            p = (make_policy(pol, c) if pol in policies
                 else CANDIDATES[pol](c) if pol in candidates else BASELINES[pol](c))
            t0 = time.perf_counter()
            h, b = hits(reqs, p, c)
            ns[c] = round((time.perf_counter() - t0) / b * 1e9)
            rates[c] = round(h / b, 4)
            if pol == "lru":
                lru_hits[c] = h
            if hasattr(p, "bonus"):
                bonus[c] = p.bonus
        res["hit_rate"][pol], res["ns_per_block"][pol] = rates, ns
        if bonus:
            res["final_bonus"][pol] = bonus
        lru = res["hit_rate"].get("lru", rates)
        marks = "".join("!" if rates[c] < lru[c] else " " for c in caps)
        print(f"{pol:12s}" + "".join(f"{rates[c]:9.4f}" for c in caps)
              + f"  {marks} {sum(ns.values()) // len(ns):>6d}", flush=True)
        if salts > 1 and isinstance(p, EvictionPolicy) and pol != "lru" and lru_hits:
            res["salt_spread"][pol] = _salt_row(reqs, pol, caps, salts, lru_hits)
    if with_opt:
        res["opt"], res["gap_share"] = _opt_rows(reqs, caps, pols, res["hit_rate"])
    return res


def _salt_row(reqs: Trace, pol: str, caps: list[int], salts: int,
             lru_hits: dict[int, int]) -> dict[int, dict]:
    """``pol``'s ``salt_spread`` at each capacity, printed under its hit rates."""
    sp = {c: salt_spread(reqs, pol, c, salts, lru_hits[c]) for c in caps}
    print(f"{'  - lru':12s}" + "".join(f"{sp[c]['min']:+d}..{sp[c]['max']:+d}".rjust(13)
                                       for c in caps)
          + f"  hits over {salts} salts; below lru in "
          + "/".join(str(sp[c]["below"]) for c in caps), flush=True)
    return sp


def _opt_rows(reqs: Trace, caps: list[int], pols: list[str],
              rates: dict[str, dict[int, float]]) -> tuple[dict, dict]:
    """Belady's OPT at each capacity and each of ``pols``' share of the LRU-to-OPT gap by its
    ``rates`` (none without LRU's), printed: (opt, gap_share)."""
    opt = {c: round(opt_hit_rate(reqs, c), 4) for c in caps}
    print(f"{'opt':12s}" + "".join(f"{opt[c]:9.4f}" for c in caps))
    lru = rates.get("lru")
    print("share of the LRU->OPT gap closed, (p - lru) / (opt - lru):")
    gap_share = {}
    for pol in pols:
        if pol == "lru" or lru is None:
            continue
        share = {}
        for c in caps:
            g = opt[c] - lru[c]
            share[c] = round((rates[pol][c] - lru[c]) / g, 3) if g > 1e-9 else None
        gap_share[pol] = share
        print(f"{pol + ' gap':12s}" + "".join(
            f"{share[c]:9.0%}" if share[c] is not None else f"{'-':>9s}" for c in caps))
    return opt, gap_share


def summarize(traces: dict, policies: list[str], baselines: list[str]) -> None:
    """Per policy: the capacities where it is below LRU, and below the best baseline."""
    print("\nbelow lru / below the best baseline (trace@capacity):")
    for pol in policies:
        low, short = [], []
        for name, res in traces.items():
            rates = res["hit_rate"]
            for c, r in rates[pol].items():
                if "lru" in rates and r < rates["lru"][c]:
                    low.append(f"{name}@{c}")
                best = max((rates[b][c] for b in baselines), default=0.0)
                if r < best:
                    short.append(f"{name}@{c}")
        print(f"{pol:12s} below lru: {', '.join(low) or 'nowhere'}; "
              f"below the best baseline: {', '.join(short) or 'nowhere'}")


def _parser() -> argparse.ArgumentParser:
    ap = bench_parser("policies", __doc__, timing=False)
    ap.add_argument("--trace", type=Path, default=DEFAULT_TRACE)
    ap.add_argument("--capacities", type=int, nargs="+", default=list(CAPACITIES))
    ap.add_argument("--policies", nargs="+", default=list(POLICIES), choices=list(POLICIES))
    ap.add_argument("--baselines", nargs="*", default=list(BASELINES), choices=list(BASELINES),
                    help="classic policies from bench/baselines.py (none: --baselines)")
    ap.add_argument("--candidates", nargs="*", default=list(CANDIDATES),
                    choices=list(CANDIDATES),
                    help="research policies (CANDIDATES; none: --candidates)")
    ap.add_argument("--traces", nargs="+", default=["conversation", *GENERATED],
                    help="conversation (the --trace file) and/or generated trace names")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3],
                    help="run each generated trace with each of these seeds")
    ap.add_argument("--limit", type=int, default=None, help="first N requests of --trace")
    ap.add_argument("--no-opt", action="store_true", help="skip the OPT reference")
    ap.add_argument("--salts", type=int, default=1,
                    help="also replay each adaptive policy on N hash-salted copies of each "
                         "trace (1: off) and print its hits minus LRU's, min..max")
    ap.add_argument("--quick", action="store_true", help="smaller op/memory measurements")
    return ap


def _replay_traces(a: argparse.Namespace) -> dict[str, dict]:
    """``replay_all`` on each of ``--traces`` (a generated one once per seed), by label."""
    traces: dict[str, dict] = {}
    for name in a.traces:
        if name == "conversation":
            if not a.trace.is_file():
                print(f"(trace {a.trace} not found; skipped)")
                continue
            reqs = load_trace(a.trace, a.limit)
            traces[name] = replay_all(name, reqs, a.capacities, a.policies, a.baselines,
                                      not a.no_opt, a.salts, a.candidates)
            continue
        for seed in a.seeds:
            reqs = GENERATED[name](seed=seed)
            label = f"{name}@{seed}"
            traces[label] = replay_all(label, reqs, a.capacities, a.policies, a.baselines,
                                       not a.no_opt, a.salts, a.candidates)
    return traces


def _op_table(a: argparse.Namespace) -> dict[str, dict]:
    """Per product policy and block-protocol candidate: ``op_costs`` (best of 3 seeds) and
    ``bytes_per_block``, printed as a table."""
    cap, n, mem = (8192, 4000, 65536) if a.quick else (65536, 30000, 1 << 20)
    cols = ("evict", "insert", "on_hit", "remove", "insert_revived", "miss", "hit")
    print(f"\nns per call (steady state, {cap} blocks; best of 3) and memory ({mem} "
          "evictable blocks)")
    print(f"{'policy':12s}" + "".join(f"{c:>15s}" for c in cols) + f"{'bytes/blk':>11s}")
    block_candidates = [c for c in a.candidates if issubclass(CANDIDATES[c], EvictionPolicy)]
    ops: dict[str, dict] = {}
    for pol in [*a.policies, *block_candidates]:
        runs = [op_costs(pol, cap, n, seed) for seed in range(3)]
        r: dict = {c: min(x[c] for x in runs) for c in cols}
        r["bytes_per_block"] = bytes_per_block(pol, mem)
        ops[pol] = r
        print(f"{pol:12s}" + "".join(f"{r[c]:15.0f}" for c in cols)
              + f"{r['bytes_per_block']:11.1f}")
    print("miss = evict + insert (new content); hit = on_hit + remove + insert_revived")
    return ops


def main(argv: list[str] | None = None) -> dict:
    a = _parser().parse_args(argv)
    out: dict = {"machine": machine(), "capacities": a.capacities, "traces": {}, "ops": {}}
    out["traces"] = _replay_traces(a)
    summarize(out["traces"], [p for p in [*a.policies, *a.candidates] if p != "lru"],
              a.baselines)
    out["ops"] = _op_table(a)
    write_json(a.json, out)
    return out


if __name__ == "__main__":
    main()
