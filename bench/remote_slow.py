"""bench/remote_slow.py: what a slow Redis costs a short prompt, probed or not.

    python -m bench.remote_slow [--delay-ms 20] [--requests 32] [--blocks 2] [--repeats 5]
                                [--json FILE]

One real redis-server (127.0.0.1, stopped by pid) behind a loopback TCP proxy that holds
every chunk ``--delay-ms`` in each direction (a round trip: twice that), and in-process
engines with the tiny model reading it (write policy off). Per round, two fresh engines,
alternating: ``probed`` probes every request (``PROBE_EVERY`` 1: the read path before
NOTE(probe-worth) in kvpool/runtime/remote/reader.py) and ``worth`` runs the product's rule.
Each first serves a 4-block prompt (it measures the prefill rate), then ``--requests``
prompts of ``--blocks`` blocks, each its own chain (nothing of it local or in Redis).

Keys: ``<arm>.ms_per_request`` (median over rounds of each round's mean, ``.min`` / ``.max``),
``<arm>.probes_per_request``, ``worth_over_probed`` (median of per-round ratios).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time

from bench.common import write_json
from bench.redis_servers import RedisServer
from bench.remote_loop import GREEDY, engine
from kvpool.runtime.engine.async_engine import collect
from kvpool.runtime.remote import reader

ARMS = {"probed": 1, "worth": reader.PROBE_EVERY}


async def _pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter, delay: float) -> None:
    """Copy ``src`` to ``dst``, each chunk ``delay`` seconds late, in order."""
    queue: asyncio.Queue = asyncio.Queue()

    async def late() -> None:
        while (item := await queue.get()) is not None:
            due, chunk = item
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            dst.write(chunk)
            await dst.drain()
        dst.close()

    writer = asyncio.create_task(late())
    while chunk := await src.read(65536):
        queue.put_nowait((time.monotonic() + delay, chunk))
    queue.put_nowait(None)
    await writer


async def delayed(port: int, delay: float) -> asyncio.AbstractServer:
    """A proxy on 127.0.0.1 (its port: ``.sockets[0]``) to ``port``, ``delay`` each way."""
    async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        ur, uw = await asyncio.open_connection("127.0.0.1", port)
        await asyncio.gather(_pipe(r, uw, delay), _pipe(ur, w, delay),
                             return_exceptions=True)

    return await asyncio.start_server(handle, "127.0.0.1", 0)


async def _arm(url: str, every: int, args, seed: int) -> tuple[float, float]:
    """(mean ms per request, probes per request) of a fresh engine with ``PROBE_EVERY``
    ``every``."""
    rng = random.Random(seed)
    reader.PROBE_EVERY = every
    eng = await engine(max(4, args.blocks), url, write_policy="off")
    try:
        await collect(eng.generate(None, [rng.randrange(1, 500) for _ in range(16 * 4 + 5)],
                                   GREEDY))  # measures the prefill rate
        before = eng.reader.stats.considered
        t0 = time.perf_counter()
        for _ in range(args.requests):
            prompt = [rng.randrange(1, 500) for _ in range(16 * args.blocks + 5)]
            await collect(eng.generate(None, prompt, GREEDY))
        ms = (time.perf_counter() - t0) * 1e3 / args.requests
        return ms, (eng.reader.stats.considered - before) / args.requests
    finally:
        await eng.shutdown()
        reader.PROBE_EVERY = ARMS["worth"]


async def _main(args) -> dict:
    srv = RedisServer()
    srv.start()
    proxy = await delayed(srv.port, args.delay_ms / 1e3)
    url = f"redis://127.0.0.1:{proxy.sockets[0].getsockname()[1]}/0"
    runs: dict[str, list[tuple[float, float]]] = {a: [] for a in ARMS}
    try:
        for r in range(args.repeats):  # interleaved: drift hits both arms alike
            for arm, every in ARMS.items():
                runs[arm].append(await _arm(url, every, args, seed=r))
    finally:
        proxy.close()
        srv.stop()
    res: dict = {"delay_ms": args.delay_ms, "requests": args.requests, "blocks": args.blocks,
                 "repeats": args.repeats}
    for arm, got in runs.items():
        ms = [m for m, _ in got]
        res[f"{arm}.ms_per_request"] = statistics.median(ms)
        res[f"{arm}.ms_per_request.min"], res[f"{arm}.ms_per_request.max"] = min(ms), max(ms)
        res[f"{arm}.probes_per_request"] = statistics.median(p for _, p in got)
    ratios = [w[0] / p[0] for w, p in zip(runs["worth"], runs["probed"])]
    res["worth_over_probed"] = statistics.median(ratios)
    res["worth_over_probed.min"], res["worth_over_probed.max"] = min(ratios), max(ratios)
    return res


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--delay-ms", type=float, default=20.0)
    p.add_argument("--requests", type=int, default=32)
    p.add_argument("--blocks", type=int, default=2)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    res = asyncio.run(_main(args))
    for k, v in res.items():
        print(f"{k:32s} {v:.3f}" if isinstance(v, float) else f"{k:32s} {v}")
    if args.json:
        write_json(args.json, res)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
