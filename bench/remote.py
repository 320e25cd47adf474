"""bench/remote.py: the Redis prefix tier's throughput and probe latency on loopback.

    python -m bench.remote [--json FILE] [--quick]

Starts its own ``redis-server`` on 127.0.0.1 (a free port, no persistence, allkeys-lru) and
stops it by pid. Every figure goes through ``RedisTier`` as the runtime will use it: GETs are
MGETs whose values are CRC-checked by the codec, PUTs are SET NX (fresh keys each round).

- ``get``/``put`` MiB/s by value size (64 KiB .. 4 MiB), three ways: ``single`` (one key per
  call, back to back), ``pipelined`` (16 keys per call: one MGET / one SET NX pipeline),
  ``concurrent`` (8 coroutines doing single-key calls at once, 8 pooled connections).
- ``probe``: 64-key prefix probe latency p50/p99 (the Lua script; target p50 <= 0.3 ms), next
  to 64 pipelined EXISTS (what the script replaces).

Figures only, never pass/fail. (The TTFT of a remote hit against recompute needs the read
path, which is later work.)
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time

import redis.asyncio as aioredis

from bench.common import bench_parser, write_json
from kvpool.remote import CircuitBreaker, Namespace, RedisTier, ValueCodec
from tests.remote.redis_server import RedisServer

SIZES = (64 << 10, 256 << 10, 1 << 20, 4 << 20)
PIPE = 16
CONC = 8


def _ns() -> Namespace:
    return Namespace(model_id="bench", weights="w0", dtype="float16", block_size=16, layers=8,
                     kv_heads=4, head_dim=64)


async def _throughput(url: str, size: int, total_bytes: int) -> dict:
    ns = _ns()
    codec = ValueCodec(ns)
    tier = RedisTier(url, codec, op_timeout=5.0, max_connections=CONC,
                     breaker=CircuitBreaker(threshold=1000))
    payload = os.urandom(size)
    n = max(PIPE, total_bytes // size // PIPE * PIPE)
    out: dict = {}
    round_no = [0]

    def items(count: int) -> list[tuple[str, bytes]]:
        round_no[0] += 1
        hs = [round_no[0].to_bytes(4, "little") + i.to_bytes(28, "little") for i in range(count)]
        return [(ns.key(h), codec.encode(h, [payload])) for h in hs]

    try:
        for mode in ("single", "pipelined", "concurrent"):
            batch = items(n)  # encoding is not timed: the write path does it off the loop
            keys = [k for k, _ in batch]
            nbytes = sum(len(v) for _, v in batch)
            t0 = time.perf_counter()
            if mode == "single":
                for it in batch:
                    assert await tier.put_many([it]) == 1
            elif mode == "pipelined":
                for i in range(0, n, PIPE):
                    assert await tier.put_many(batch[i:i + PIPE]) == PIPE
            else:
                async def worker(part):
                    for it in part:
                        assert await tier.put_many([it]) == 1
                await asyncio.gather(*(worker(batch[i::CONC]) for i in range(CONC)))
            put_s = time.perf_counter() - t0
            t0 = time.perf_counter()
            if mode == "single":
                for k in keys:
                    assert (await tier.get_many([k]))[0] is not None
            elif mode == "pipelined":
                for i in range(0, n, PIPE):
                    assert None not in await tier.get_many(keys[i:i + PIPE])
            else:
                async def reader(part):
                    for k in part:
                        assert (await tier.get_many([k]))[0] is not None
                await asyncio.gather(*(reader(keys[i::CONC]) for i in range(CONC)))
            get_s = time.perf_counter() - t0
            out[mode] = {"put_mib_s": nbytes / put_s / 2**20, "get_mib_s": nbytes / get_s / 2**20,
                         "values": n}
            r = aioredis.Redis.from_url(url)  # empty the server between modes
            await r.flushall()
            await r.aclose()
        assert not tier.stats().errors, tier.stats().errors
    finally:
        await tier.aclose()
    return out


async def _probe(url: str, rounds: int) -> dict:
    ns = _ns()
    codec = ValueCodec(ns)
    tier = RedisTier(url, codec)
    hs = [b"p" + i.to_bytes(31, "little") for i in range(64)]
    keys = [ns.key(h) for h in hs]
    await tier.put_many([(k, codec.encode(h, [b"\0" * 1024])) for k, h in zip(keys, hs)])
    r = aioredis.Redis.from_url(url)
    lua, exists = [], []
    try:
        for _ in range(20):  # warm the connection and the script cache
            await tier.probe(keys)
        for _ in range(rounds):
            t0 = time.perf_counter()
            n = await tier.probe(keys)
            lua.append(time.perf_counter() - t0)
            assert n == 64
            t0 = time.perf_counter()
            pipe = r.pipeline(transaction=False)
            for k in keys:
                pipe.exists(k)
            await pipe.execute()
            exists.append(time.perf_counter() - t0)
    finally:
        await r.aclose()
        await tier.aclose()

    def q(xs, p):
        return statistics.quantiles(xs, n=100)[p - 1] * 1e3

    return {"lua_p50_ms": statistics.median(lua) * 1e3, "lua_p99_ms": q(lua, 99),
            "exists_pipelined_p50_ms": statistics.median(exists) * 1e3,
            "exists_pipelined_p99_ms": q(exists, 99), "rounds": rounds}


def main(argv: list[str] | None = None) -> int:
    ap = bench_parser("remote", __doc__, timing=False)
    ap.add_argument("--quick", action="store_true", help="fewer bytes and probe rounds")
    args = ap.parse_args(argv)
    total = (32 if args.quick else 128) << 20
    srv = RedisServer(maxmemory="1gb")
    srv.start()
    try:
        result = {"throughput": {}, "probe": None}
        for size in SIZES:
            result["throughput"][str(size)] = asyncio.run(_throughput(srv.url, size, total))
        result["probe"] = asyncio.run(_probe(srv.url, 300 if args.quick else 2000))
    finally:
        srv.stop()
    print(f"{'value':>8} {'mode':>11} {'PUT MiB/s':>10} {'GET MiB/s':>10}")
    for size, modes in result["throughput"].items():
        for mode, r in modes.items():
            print(f"{int(size) >> 10:>6}Ki {mode:>11} {r['put_mib_s']:>10.0f} "
                  f"{r['get_mib_s']:>10.0f}")
    p = result["probe"]
    print(f"64-key probe: Lua p50 {p['lua_p50_ms']:.3f} ms p99 {p['lua_p99_ms']:.3f} ms; "
          f"64 pipelined EXISTS p50 {p['exists_pipelined_p50_ms']:.3f} ms "
          f"p99 {p['exists_pipelined_p99_ms']:.3f} ms")
    write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
