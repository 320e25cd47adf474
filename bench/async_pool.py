"""bench/async_pool.py: the asyncio front, batched per loop iteration, against a front that
takes the pool lock per call (docs/benchmarks.md).

    python -m bench.async_pool [--json FILE] [--quick] [--coroutines N] [--duty F]
                               [--repeats N] [--min-seconds S]

10,000 coroutines each allocate 1..8 blocks then free them, 20 times. A "step thread" stands in
for the engine: it holds the pool lock for a batched mutation ``duty`` of the time (default
20 %, one 0.5 ms hold per 2.5 ms), as the scheduler does every step. The batched front applies
all calls of one loop iteration under one lock acquisition (one worker-thread hop per batch
when the lock is busy). ``per_call_lock`` (the ratio's baseline) takes the lock per call in a
worker thread, the conventional way to call lock-based code from asyncio without blocking
the loop; ``per_call_trylock`` is a stronger baseline that tries the lock inline first and
hops only when it is busy (its ratio is reported too). The three fronts alternate run by run
(bench.common): each figure is the median of --repeats runs of at least --min-seconds, ratios
the median of per-round ratios, with KEY.min / KEY.max in the JSON. Never pass/fail.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time

from bench.common import (alternate, bench_parser, machine, print_runs, put, put_runs, ratio_stat,
                          timing_from_args, timing_info, write_json)
from bench.lock_fronts import PerCallLockFront
from kvpool.config import CacheConfig
from kvpool.core import BlockSpaceManager
from stress.pool.front import PoolFront


def _step_thread(mgr: BlockSpaceManager, stop: threading.Event, duty: float,
                 period: float = 0.0025) -> threading.Thread:
    """Hold the pool lock for ``duty * period`` every ``period`` seconds doing real work."""
    def run():
        pool = mgr.device_pool
        hold = duty * period
        while not stop.is_set():
            t0 = time.perf_counter()
            with mgr.batch():
                ids = pool.allocate_many(64) or []
                while time.perf_counter() - t0 < hold:
                    pass  # the scheduler's work under the lock
                pool.free_many(ids[::-1])
            time.sleep(max(0.0, period - (time.perf_counter() - t0)))
    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


async def _workload(front, n_coros: int, rounds: int, seed: int) -> int:
    async def one(i: int) -> int:
        rng = random.Random(seed * 1_000_003 + i)
        ops = 0
        for _ in range(rounds):
            ids = await front.allocate_blocks(rng.randint(1, 8))
            ops += 1
            if ids is not None:
                await front.free_blocks(ids[::-1])
                ops += 1
        return ops

    return sum(await asyncio.gather(*(one(i) for i in range(n_coros))))


def run_one(kind: str, n_coros: int, rounds: int, duty: float) -> dict:
    mgr = BlockSpaceManager(CacheConfig(num_device_blocks=n_coros * 8 + 1024, block_size=16))
    front = (PoolFront(mgr) if kind == "batched"
             else PerCallLockFront(mgr, mode=kind.removeprefix("per_call_")))
    stop = threading.Event()
    th = _step_thread(mgr, stop, duty) if duty > 0 else None

    async def main():
        t0 = time.perf_counter()
        ops = await _workload(front, n_coros, rounds, seed=1)
        return ops, time.perf_counter() - t0

    try:
        ops, dt = _run(main())
    finally:
        stop.set()
        if th:
            th.join()
    assert mgr.stats().device.num_used == 0, "block leak"
    out = {"ops": ops, "seconds": dt, "ops_per_s": ops / dt}
    if kind == "batched":
        out["ops_per_flush"] = front.ops / max(1, front.flushes)
        out["offloaded_flushes"] = front.offloaded
    return out


def _run(coro):
    try:
        import uvloop
        return uvloop.run(coro)
    except ImportError:  # pragma: no cover - uvloop is a dependency on Linux
        return asyncio.run(coro)


def main(argv: list[str] | None = None) -> None:
    ap = bench_parser("async_pool", __doc__)
    ap.add_argument("--coroutines", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--duty", type=float, default=0.2)
    args = ap.parse_args(argv)
    timing = timing_from_args(args)
    n = 2_000 if timing.quick else args.coroutines
    res = {"machine": machine(), "timing": timing_info(timing), "coroutines": n,
           "rounds": args.rounds, "duty": args.duty}

    def front(kind: str, duty: float):
        return lambda: run_one(kind, n, args.rounds, duty)

    runs = alternate({"batched": front("batched", args.duty),
                      "per_call_lock": front("per_call_thread", args.duty),
                      "per_call_trylock": front("per_call_trylock", args.duty)}, timing)
    b, p, t = runs["batched"], runs["per_call_lock"], runs["per_call_trylock"]
    put_runs(res, b, {"batched.ops_per_s": "ops_per_s",
                      "batched.ops_per_flush": "ops_per_flush",
                      "batched.offloaded_flushes": "offloaded_flushes"})
    put_runs(res, p, {"per_call_lock.ops_per_s": "ops_per_s"})
    put_runs(res, t, {"per_call_trylock.ops_per_s": "ops_per_s"})
    put(res, "ratio", ratio_stat(b, "ops_per_s", p, "ops_per_s"))
    put(res, "ratio_vs_trylock", ratio_stat(b, "ops_per_s", t, "ops_per_s"))
    if not timing.quick:  # the same without the step thread
        idle = alternate({"batched": front("batched", 0),
                          "per_call_trylock": front("per_call_trylock", 0)}, timing)
        put_runs(res, idle["batched"], {"idle.batched.ops_per_s": "ops_per_s"})
        put_runs(res, idle["per_call_trylock"], {"idle.per_call_trylock.ops_per_s": "ops_per_s"})
        put(res, "idle.ratio_vs_trylock", ratio_stat(idle["batched"], "ops_per_s",
                                                     idle["per_call_trylock"], "ops_per_s"))
    print_runs(res, timing, "the fronts")
    write_json(args.json, res)


if __name__ == "__main__":
    main()
