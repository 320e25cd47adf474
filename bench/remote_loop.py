"""Event-loop stalls while a request's prefix is prefetched from Redis, against recomputing it.

    python -m bench.remote_loop [--json FILE] [--repeats N] [--prompt-blocks B]

Two in-process engines on one real redis-server (started on 127.0.0.1 and stopped by pid):
engine 1 computes a long prompt and stores its blocks (write_through); then, per repeat, a
fresh engine 2 serves the same prompt from Redis while a monitor coroutine on the same event
loop sleeps 1 ms at a time and records how late each wake-up is. The same measurement with a
fresh engine that has no remote tier (the prompt recomputed) is the baseline. The issue's
target is stalls <= 5 ms while prefetching: the loop lag the prefetch itself adds (probe,
MGET, decode and copy run off the loop or in worker threads) is what the two columns compare;
the step thread's forward holds the GIL in both. The process is tuned as ``kvpool serve``
tunes it (``process_tuning.tune_process``: one torch thread, a 0.5 ms GIL switch interval),
since a worker thread's Python loop otherwise keeps the GIL for the default 5 ms at a time.
The bench adds no warm-up of its own: ``AsyncEngine.start`` does what a serving replica does
once at start (``RemoteTier.warm_up`` opens the pooled connections a fetch uses and loads the
probe script; ``runtime.workers`` starts the default executor's threads), so a fresh engine's
first request pays what every later request pays. Before that, opening 16 connections and starting
worker threads inside the fetch stalled the loop 6-10 ms here.

Figures (medians over repeats, [min-max]): ``fetch|recompute.lag_max_ms``, ``.lag_p99_ms``,
``.ttft_ms``, and ``fetch.fetched_blocks``.

``open_breaker.prefetch_ms.p50|p99``: what the read path adds to a request's TTFT while Redis is
down (the issue's target: <= 1 ms while the breaker is open). The tier points at a port
nothing listens on; its first call is refused and opens the breaker; then each request's whole
``RemoteReader.prefetch`` (hash the prompt, local lookup, keys, the probe answered by the open
breaker without network I/O) is timed, 500 times. Without a tier there is no such call.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
import os
import statistics
import time

from bench.common import bench_parser, write_json
from kvpool.runtime.engine.async_engine import AsyncEngine, collect
from kvpool.runtime.engine.config import EngineConfig
from kvpool.runtime.model import SamplingParams
from kvpool.server.remote_setup import build_link
from kvpool.server.process_tuning import tune_process
from bench.redis_servers import RedisServer

GREEDY = SamplingParams(max_tokens=1, temperature=0.0, ignore_eos=True)


def config(blocks: int) -> EngineConfig:
    """An engine for prompts of up to ``blocks`` full blocks (one step prefills one)."""
    return EngineConfig(block_size=16, num_device_blocks=blocks + 32, num_host_blocks=blocks + 32,
                        max_model_len=16 * blocks + 64, max_num_seqs=8,
                        max_num_batched_tokens=16 * blocks + 64, enable_prefix_caching=True,
                        seed=0, num_threads=1)


async def engine(blocks: int, url: str | None, *, write_policy: str = "write_through",
                 fetch_bias: float = 1.0) -> AsyncEngine:
    """A started in-process engine; with ``url``, on the Redis tier there (bench.remote_ttft
    reads with ``write_policy="off"`` and sets ``fetch_bias``)."""
    eng = AsyncEngine(config(blocks))
    if url is not None:
        eng.remote_link = build_link(eng, url, write_policy=write_policy, fetch_bias=fetch_bias)
    await eng.start()
    return eng


async def store_prefix(blocks: int, prompt: list[int], url: str) -> int:
    """Engine 1: compute ``prompt`` and store its full blocks (write_through); waits for the
    stores (bounded) and returns how many the tier took."""
    e1 = await engine(blocks, url)
    try:
        await collect(e1.generate(None, prompt, GREEDY))
        for _ in range(400):  # the writer's stores, bounded
            if e1.writer.inflight_bytes == 0 and e1.writer.pending() == 0:
                break
            await asyncio.sleep(0.02)
        return e1.remote_link.tier.stats().puts
    finally:
        await e1.shutdown()


async def _monitor(stop_: asyncio.Event, lags: list[float]) -> None:
    while not stop_.is_set():
        t = time.perf_counter()
        await asyncio.sleep(0.001)
        lags.append(time.perf_counter() - t - 0.001)


async def one(blocks: int, prompt: list[int], url: str | None, *, monitor: bool = True,
              warm: Sequence[list[int]] = (), **engine_kw) -> dict:
    """A fresh engine serves ``prompt`` once: its TTFT, cached tokens and, with a tier, what
    the read path did. ``monitor``: the loop-lag monitor runs meanwhile (``lag_*_ms``).
    ``warm``: unrelated prompts served first, so that what the cost model reads (the prefill
    rate; a fetch's fixed cost, when one is stored) is measured (``est_*_ms``: its estimates
    for the prompt's blocks just before it arrives)."""
    eng = await engine(blocks, url, **engine_kw)
    try:
        res: dict = {}
        for w in warm or ():
            await collect(eng.generate(None, w, GREEDY))
        st0 = None
        if eng.reader is not None:
            est = eng.reader.estimate((len(prompt) - 1) // 16)
            res["est_fetch_ms"], res["est_recompute_ms"] = est[0] * 1e3, est[1] * 1e3
            st0 = (eng.reader.stats.fetched_blocks, eng.reader.stats.declined_cost)
        lags: list[float] = []
        stop_ = asyncio.Event()
        mon = asyncio.create_task(_monitor(stop_, lags)) if monitor else None
        t0 = time.perf_counter()
        out = await collect(eng.generate(None, prompt, GREEDY))
        res["ttft_ms"] = (time.perf_counter() - t0) * 1e3
        res["cached_tokens"] = out.num_cached_tokens
        if mon is not None:
            stop_.set()
            await mon
            lags.sort()
            res["lag_max_ms"] = lags[-1] * 1e3
            res["lag_p99_ms"] = lags[int(len(lags) * 0.99)] * 1e3
        if st0 is not None:  # this prompt's, not the warm-ups'
            res["fetched_blocks"] = eng.reader.stats.fetched_blocks - st0[0]
            res["declined_cost"] = eng.reader.stats.declined_cost - st0[1]
        return res
    finally:
        await eng.shutdown()


async def _main(args) -> dict:
    blocks = args.prompt_blocks
    prompt = [(i * 7 + 3) % 500 + 1 for i in range(16 * blocks + 5)]
    redis = RedisServer()
    redis.start()
    try:
        await store_prefix(blocks, prompt, redis.url)
        runs: dict[str, list[dict]] = {"fetch": [], "recompute": []}
        for _ in range(args.repeats):  # interleaved: drift hits both sides
            runs["fetch"].append(await one(blocks, prompt, redis.url))
            runs["recompute"].append(await one(blocks, prompt, None))
    finally:
        redis.stop()
    res: dict = {"prompt_tokens": len(prompt), "repeats": args.repeats,
                 "load_avg": list(os.getloadavg())}
    for side, rs in runs.items():
        for key in rs[0]:
            vals = [r[key] for r in rs]
            res[f"{side}.{key}"] = statistics.median(vals)
            res[f"{side}.{key}.min"], res[f"{side}.{key}.max"] = min(vals), max(vals)
    return res


async def _open_breaker(blocks: int, prompt: list[int], calls: int = 500) -> dict:
    from bench.redis_ports import dead_port

    with dead_port() as port:  # refuses throughout (bench/redis_ports.py NOTE(dead-port))
        eng = await engine(blocks, f"redis://127.0.0.1:{port}/0")
        try:
            await eng.reader.prefetch(prompt, None)  # refused: the breaker opens
            lat = []
            for _ in range(calls):
                t = time.perf_counter()
                await eng.reader.prefetch(prompt, None)
                lat.append((time.perf_counter() - t) * 1e3)
            lat.sort()
            return {"open_breaker.prefetch_ms.p50": lat[len(lat) // 2],
                    "open_breaker.prefetch_ms.p99": lat[int(len(lat) * 0.99)],
                    "open_breaker.breaker_state": int(eng.remote_link.tier.breaker.state)}
        finally:
            await eng.shutdown()


def main(argv: list[str] | None = None) -> int:
    ap = bench_parser("remote_loop", __doc__, timing=False)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--prompt-blocks", type=int, default=128, help="full blocks in the prompt")
    args = ap.parse_args(argv)
    tune_process(config(args.prompt_blocks))  # as kvpool serve's entry point: 0.5 ms GIL switch
    res = asyncio.run(_main(args))
    prompt = [(i * 7 + 3) % 500 + 1 for i in range(16 * args.prompt_blocks + 5)]
    res.update(asyncio.run(_open_breaker(args.prompt_blocks, prompt)))
    print(f"prompt {res['prompt_tokens']} tokens, {args.repeats} interleaved repeats, load "
          f"{res['load_avg'][0]:.2f}")
    for side in ("fetch", "recompute"):
        print(f"{side:>10}: " + ", ".join(
            f"{k} {res[f'{side}.{k}']:.1f} [{res[f'{side}.{k}.min']:.1f}-"
            f"{res[f'{side}.{k}.max']:.1f}]"
            for k in ("lag_max_ms", "lag_p99_ms", "ttft_ms")))
    print(f"fetched blocks: {res.get('fetch.fetched_blocks')}")
    print(f"breaker open (state {res['open_breaker.breaker_state']}): the read path adds "
          f"p50 {res['open_breaker.prefetch_ms.p50']:.3f} ms, "
          f"p99 {res['open_breaker.prefetch_ms.p99']:.3f} ms per request")
    write_json(args.json, res)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
