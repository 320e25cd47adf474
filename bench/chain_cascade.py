"""bench/chain_cascade.py: how much of each cache no lookup can reach, and what evicting it
with its ancestor is worth (a research measurement, not in the product).

    python -m bench.chain_cascade [--json FILE] [--capacities 1000 4000] [--traces ...]
                                  [--policies lru classlru admitrun ...]

A prefix lookup counts only the leading run of cached blocks, so a cached block whose parent
is gone cannot be hit until the parent is computed again: it holds space for nothing. The
issue behind docs/benchmarks.md "Chain-aware eviction" names this ("a block is worth no more
than its parent's chance of a hit"). Per trace and capacity this prints, for LRU, classlru
(or the block-protocol policies ``--policies`` names, product or research), S3-FIFO
(threshold 1) and W-TinyLFU:

    unreach   the mean share of cached ids with an ancestor missing (sampled every 97
              requests after the first fifth of the trace)
    hit rate  as bench.policies replays it, and for every policy but LRU a *cascade*
              variant: an eviction also drops the evicted id's cached descendants (all of
              them unreachable), except the id being inserted at that moment
              (bench/cascade_cache.py for block policies)

Traces: bench.policies' generated ones (seed 1) and bench.heldout's shapes (seed 1) whose
ids are chain ids (one per prefix and block: each id has one parent); a shape that reuses an
id under another prefix (mooncake, code_edit) is skipped and says so.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from bench.baselines import S3FIFO1, Baseline, WTinyLFU
from bench.cascade_cache import CascadePolicyCache, drop_descendants
from bench.common import bench_parser, machine, write_json
from bench.heldout import SHAPES
from bench.policies import CANDIDATES, new_policy
from bench.policy_traces import GENERATED, Trace
from kvpool.core.eviction import POLICIES, EvictionPolicy
from kvpool.replay.loop import PolicyCache, replay

SAMPLE_EVERY = 97  # requests between two unreachable-share samples


def parents(reqs: Trace) -> tuple[dict[int, int], int]:
    """Each id's parent (the id before it in a request; none at depth 0) and how many ids
    have more than one (0 for chain ids; then an unreachable share means nothing)."""
    out: dict[int, int] = {}
    roots: set[int] = set()
    multi: set[int] = set()
    for ids in reqs:
        if ids:
            roots.add(ids[0])
        for d in range(1, len(ids)):
            if out.setdefault(ids[d], ids[d - 1]) != ids[d - 1]:
                multi.add(ids[d])
    return out, len(multi | (roots & out.keys()))


def unreachable(cached: Collection[int], parent: dict[int, int]) -> int:
    """How many of ``cached`` have an ancestor that is not cached."""
    ok: dict[int, bool] = {}
    for h in cached:
        path = []
        while h not in ok:
            p = parent.get(h)
            if p is None or p not in cached:
                ok[h] = p is None
                break
            path.append(h)
            h = p
        for x in path:
            ok[x] = ok[h]
    return sum(1 for h in cached if not ok[h])


def held_ids(c: Baseline) -> Collection[int]:
    """The ids a W-TinyLFU or S3-FIFO baseline holds now."""
    if isinstance(c, WTinyLFU):
        main = c.main
        return [*c.win, *(main.prob if main else ()), *(main.prot if main else ())]
    return c.freq.keys()  # type: ignore[attr-defined]  # S3-FIFO: its resident counts


class Cascade(Baseline):
    """A W-TinyLFU or S3-FIFO baseline whose evictions also drop the evicted id's cached
    descendants (found through ``children``), except the id being accessed (its block was
    just used). A dropped id leaves no ghost and no count change."""

    def __init__(self, inner: Baseline, children: dict[int, list[int]]) -> None:
        super().__init__(inner.capacity)
        self.name = f"{inner.name}+cascade"
        self.inner = inner
        self.children = children
        self.current = -1
        inner.on_evict = self._evicted  # type: ignore[method-assign]

    def access(self, h: int) -> None:
        self.current = h
        self.inner.access(h)

    def _evicted(self, h: int) -> None:
        drop_descendants(self.children, h, self.current, self._drop)

    def _drop(self, h: int) -> bool:
        """Remove ``h`` if it is held; True if it was."""
        c = self.inner
        if isinstance(c, WTinyLFU):
            if c.win.pop(h, 0) is None:
                return True
            m = c.main
            return m is not None and (m.prob.pop(h, 0) is None or m.prot.pop(h, 0) is None)
        if c.freq.pop(h, None) is None:  # type: ignore[attr-defined]
            return False
        c.s.pop(h, None)  # type: ignore[attr-defined]
        c.m.pop(h, None)  # type: ignore[attr-defined]
        return True

    def __contains__(self, h: int) -> bool:
        return h in self.inner

    def __len__(self) -> int:
        return len(self.inner)


def children_of(parent: dict[int, int]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for c, p in parent.items():
        out.setdefault(p, []).append(c)
    return out


def run(reqs: Trace, cache, parent: dict[int, int], held) -> tuple[float, float]:
    """(hit rate, mean unreachable share) of ``reqs`` through ``cache`` (a Baseline or a
    PolicyCache); ``held()`` gives the cached ids."""
    hits = blocks = 0
    shares = []
    for r, ids in enumerate(reqs):
        h, b = replay([ids], cache)  # one request through the project's replay loop
        hits += h
        blocks += b
        if r % SAMPLE_EVERY == 0 and r > len(reqs) // 5:
            ids_held = held()
            shares.append(unreachable(ids_held, parent) / max(1, len(ids_held)))
    return hits / max(1, blocks), sum(shares) / max(1, len(shares))


def cell(reqs: Trace, cap: int, policies: Sequence[str] = ("lru", "classlru")
         ) -> dict[str, dict[str, float]]:
    """Hit rate and unreachable share on ``reqs`` (chain ids) at ``cap`` of each block
    policy in ``policies`` (and its cascade, LRU's aside: it strands nothing), S3-FIFO,
    W-TinyLFU and their cascades."""
    parent, multi = parents(reqs)
    if multi:
        raise ValueError(f"{multi} ids have more than one parent: not chain ids")
    children = children_of(parent)
    out = {}
    for name in policies:
        for cascade in (False, True) if name != "lru" else (False,):
            pc = (CascadePolicyCache(new_policy(name, cap), cap, children) if cascade
                  else PolicyCache(new_policy(name, cap), cap))
            rate, share = run(reqs, pc, parent, lambda pc=pc: pc.where.keys())
            out[name + "+cascade" * cascade] = {"hit_rate": round(rate, 5),
                                                "unreachable": round(share, 4)}
    for cascade in (False, True):
        for cls in (S3FIFO1, WTinyLFU):
            inner = cls(cap)
            c = Cascade(inner, children) if cascade else inner
            rate, share = run(reqs, c, parent, lambda inner=inner: held_ids(inner))
            out[c.name] = {"hit_rate": round(rate, 5), "unreachable": round(share, 4)}
    return out


def main(argv: Sequence[str] | None = None) -> dict:
    ap = bench_parser("chain_cascade", __doc__, timing=False)
    ap.add_argument("--capacities", type=int, nargs="+", default=[1000, 4000])
    ap.add_argument("--traces", nargs="+", default=[*GENERATED, *SHAPES],
                    choices=[*GENERATED, *SHAPES])
    ap.add_argument("--policies", nargs="+", default=["lru", "classlru"],
                    choices=[*POLICIES, *(n for n, c in CANDIDATES.items()
                                         if issubclass(c, EvictionPolicy))],
                    help="block-protocol policies (product or research), each with a cascade")
    a = ap.parse_args(argv)
    cells = {}
    for name in a.traces:
        reqs = GENERATED[name](seed=1) if name in GENERATED else SHAPES[name](1)
        multi = parents(reqs)[1]
        if multi:  # mooncake and code_edit reuse an id under other prefixes
            print(f"{name:12s} skipped: {multi} ids have more than one parent")
            continue
        for cap in a.capacities:
            r = cells[f"{name}@{cap}"] = cell(reqs, cap, a.policies)
            print(f"{name:12s} {cap:6d} " + "  ".join(
                f"{p} {v['hit_rate']:.4f} ({v['unreachable']:.3f})" for p, v in r.items()),
                flush=True)
    out = {"cells": cells, "machine": machine()}
    write_json(a.json, out)
    return out


if __name__ == "__main__":
    main()
