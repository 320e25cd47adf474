"""bench/policy_costs.py: eviction policies' cost per call and memory, as medians of interleaved
rounds (docs/benchmarks.md "`adaptive`: the product's policy").

    python -m bench.policy_costs [--policies lru classlru adaptive ghostpair]
                                 [--capacities 4000 65536] [--rounds 5] [--memory-blocks N]
                                 [--baseline DIR] [--warm] [--json FILE]

Each round runs bench.policies' ``op_costs`` (a full policy in steady state; each call kind
timed over a batch) once per policy and capacity, in turn, with the round's seed, so a slow
spell on a shared box hits every policy alike. Figures: ns per call, median [min-max] over the
rounds. Memory: bench.policies' ``bytes_per_block`` after one turnover (every block evicted
once and refilled with new content), so ghosts and miniatures are full.

``--baseline DIR`` (another checkout, e.g. main's) adds the same calls on DIR's kvpool as
``<policy>@<capacity>@base`` keys; then every arm runs in a fresh interpreter per round, this
checkout's too, alternating in each round, so a change is measured against its base under
the same load.

``--warm`` adds the warm state as ``@warm`` keys in the same rounds: op_costs fills the pool
with one-off content, so ``adaptive`` runs on NOTE(cold)'s duel; warm, one hit comes before
the fill and it runs as LRU. With ``--baseline``, the baseline checkout needs ``warm`` too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from itertools import product
from pathlib import Path

from bench.common import Stat, bench_parser, machine, put, write_json
from bench.policies import CANDIDATES, bytes_per_block, op_costs
from kvpool.core.eviction import POLICIES

OPS = ("evict", "insert", "on_hit", "remove", "insert_revived", "miss", "hit")


ROOT = str(Path(__file__).resolve().parent.parent)  # this checkout
_CHILD = """import json, sys
from pathlib import Path
import kvpool
import bench.policies as bp
root = Path(sys.argv[1]).resolve()
if any(root not in Path(m.__file__).resolve().parents for m in (kvpool, bp)):
    sys.exit(f"{root} is not a kvpool checkout: would measure {kvpool.__file__}")
print(json.dumps(bp.op_costs(sys.argv[2], *map(int, sys.argv[3:]))))
"""


def op_costs_at(root: str, pol: str, cap: int, n: int, seed: int, warm: int = 0) -> dict:
    """``op_costs`` in a fresh interpreter on the checkout at ``root`` (its kvpool and
    bench first on the path; it fails rather than measure an installed kvpool). ``warm``
    is passed only when set, so a checkout from before it measures the cold state."""
    env = {**os.environ, "PYTHONPATH": root}
    args = [str(cap), str(n), str(seed)] + ([str(warm)] if warm else [])
    out = subprocess.run([sys.executable, "-c", _CHILD, root, pol, *args], cwd=root, env=env,
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def rounds(policies: list[str], caps: list[int], n: int, baseline: str | None = None,
           warm: bool = False) -> dict[str, dict[str, Stat]]:
    """``n`` interleaved rounds of ``op_costs``; per ``policy@capacity`` (and
    ``policy@capacity@base`` with a baseline checkout; ``@warm`` before it for the warm
    state, op_costs' ``warm``) a Stat per call."""
    arms = [("", ROOT), ("@base", baseline)] if baseline else [("", None)]
    states = [("", 0), ("@warm", 1)] if warm else [("", 0)]
    runs: dict[str, dict[str, list[float]]] = {}
    for r in range(n):
        for cap in caps:
            for pol, (state, w), (suffix, root) in product(policies, states, arms):
                size = min(30000, cap // 2)
                ns = (op_costs_at(root, pol, cap, size, r, w) if root
                      else op_costs(pol, cap, size, seed=r, warm=w))
                for op in OPS:
                    runs.setdefault(f"{pol}@{cap}{state}{suffix}", {}).setdefault(
                        op, []).append(ns[op])
        print(f"round {r + 1} of {n}", flush=True)
    return {k: {op: Stat.of(v) for op, v in d.items()} for k, d in runs.items()}


def main(argv: list[str] | None = None) -> dict:
    ap = bench_parser("policy_costs", __doc__, timing=False)
    names = [*POLICIES, *CANDIDATES]
    ap.add_argument("--policies", nargs="+", default=["lru", "classlru", "adaptive"],
                    choices=names)
    ap.add_argument("--capacities", type=int, nargs="+", default=[4000, 65536])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--memory-blocks", type=int, default=1 << 20,
                    help="pool size for the memory figure (0: skip it)")
    ap.add_argument("--baseline", default=None, metavar="DIR",
                    help="another checkout: its calls as @base keys, in the same rounds")
    ap.add_argument("--warm", action="store_true",
                    help="also the warm state (a hit before the fill) as @warm keys")
    a = ap.parse_args(argv)
    out: dict = {"machine": machine(), "rounds": a.rounds}
    stats = rounds(a.policies, a.capacities, a.rounds, a.baseline, a.warm)
    print(f"\nns per call, median [min-max] of {a.rounds} interleaved rounds")
    for key, d in stats.items():
        print(f"{key:22s} " + "  ".join(f"{op} {s.median:.0f} [{s.spread()}]"
                                        for op, s in d.items()))
        for op, s in d.items():
            put(out, f"{key}.{op}_ns", s)
    if a.memory_blocks:
        for pol in a.policies:
            b = bytes_per_block(pol, a.memory_blocks, turnovers=1)
            out[f"{pol}.bytes_per_block_after_turnover"] = b
            print(f"{pol}: {b} bytes per evictable block after a turnover "
                  f"({a.memory_blocks} blocks)", flush=True)
    write_json(a.json, out)
    return out


if __name__ == "__main__":
    main()
