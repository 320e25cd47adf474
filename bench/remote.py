"""bench/remote.py: the Redis prefix tier's throughput and probe latency on loopback.

    python -m bench.remote [--json FILE] [--quick] [--repeats N] [--min-seconds S]
                           [--sizes KIB,KIB,...] [--no-ttft] [--ttft-repeats N]
                           [--ttft-blocks B,B,...] [--cluster]

``--cluster``: only the Redis Cluster section instead (``bench/remote_cluster.py``: a 3-master
cluster beside one server, interleaved: probe, GET of 0.5-2 MiB values, a 2k-token prompt
shared across two engines).

Starts its own ``redis-server`` on 127.0.0.1 (a free port, no persistence, allkeys-lru) and
stops it by pid. Each figure is measured twice, alternating in one event loop (bench.common):
through ``RedisTier`` as the runtime uses it (its codec knows the block size, so a GET is a
pipeline of GETRANGE bounded to the codec's largest value, NOTE(bounded-get), whose values the
codec checks: header, CRC-32; PUTs are SET NX) and through a bare ``redis.asyncio`` client
doing MGET / SET NX with no check (``raw``), so the tier's own overhead is the ratio
``tier / raw``.

- ``get.SIZE.MODE`` / ``put.SIZE.MODE`` MiB/s of values of SIZE bytes, MODE one of
  ``single`` (one key per call, back to back), ``pipelined`` (16 keys per call: one MGET /
  one SET NX pipeline), ``concurrent`` (8 coroutines doing single-key calls, 8 connections).
  Keys ``KEY.tier_mib_s``, ``KEY.raw_mib_s``, ``KEY.ratio`` (median of per-round ratios).
  GETs have a third arm, ``signed``: a tier with a secret (``--remote-secret-file``) reading
  signed values (the tag checked instead of the CRC): ``KEY.signed_mib_s`` and
  ``KEY.signed_ratio`` (signed / tier; 0.95 is a 5% longer fetch).
- ``probe``: 64-key prefix probe latency p50/p99 (the Lua script; target p50 <= 0.3 ms),
  alternating with 64 pipelined EXISTS (what the script replaces).
- ``round_trips``: commands one ``get_many`` / ``probe`` of 64 keys sends (from ``INFO
  commandstats``): one GETRANGE per key (MGET, GET too), one script; and ``*_reads``, the
  socket reads Redis made for them (``total_reads_processed``: about one per round trip):
  at most ``GET_PARTS`` pipelines sent at once, one script; not one round trip per block.

- ``ttft.*``: TTFT of a remote hit against recompute by prefix length (1-128 blocks of 16
  tokens; --quick: 1, 8, 128) with the break-even, in-process engines with the tiny model on
  the same server: the cost model's own decision, a forced fetch and a recompute, interleaved
  (``bench/remote_ttft.py`` says how and names the keys). ``--no-ttft`` skips it,
  ``--ttft-repeats N`` (default 5, --quick 2), ``--ttft-blocks 1,4,16`` picks the lengths. It
  runs last, with the process tuned as ``kvpool serve`` tunes it
  (``process_tuning.tune_process``).

Figures only, never pass/fail.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import sys
import time

import redis.asyncio as aioredis
from redis.utils import HIREDIS_AVAILABLE

from bench import remote_cluster, remote_ttft
from bench.remote_loop import config as engine_config
from bench.common import (Timing, aalternate, bench_parser, machine, put, put_runs, ratio_stat,
                          stat, timing_from_args, timing_info, write_json)
from kvpool.remote import CircuitBreaker, Namespace, RedisTier, ValueCodec, ValueSigner
from kvpool.server.process_tuning import tune_process
from bench.redis_servers import RedisServer

SIZES = (64 << 10, 512 << 10, 1 << 20, 2 << 20, 4 << 20)
QUICK_SIZES = (64 << 10, 1 << 20)
MODES = ("single", "pipelined", "concurrent")
PIPE = 16
CONC = 8
_SIGNED_TAG = 0xFFFFFFFF  # hash tag of the signed arm's values (fresh puts count up from 1)


def _ns() -> Namespace:
    return Namespace(model_id="bench", weights="w0", dtype="float16", block_size=16, layers=8,
                     kv_heads=4, head_dim=64)


def _hash(tag: int, i: int) -> bytes:
    return tag.to_bytes(4, "little") + i.to_bytes(28, "little")


async def _drive(mode: str, keys: list, call) -> float:
    """Seconds to push every key (or item) through ``call`` in the given mode."""
    t0 = time.perf_counter()
    if mode == "single":
        for k in keys:
            await call([k])
    elif mode == "pipelined":
        for i in range(0, len(keys), PIPE):
            await call(keys[i:i + PIPE])
    else:
        async def worker(part):
            for k in part:
                await call([k])
        await asyncio.gather(*(worker(keys[i::CONC]) for i in range(CONC)))
    return time.perf_counter() - t0


class _Sides:
    """The tier and the bare client on one server, plus the workloads of one value size."""

    def __init__(self, url: str, size: int, nvalues: int) -> None:
        self.ns = _ns()
        self.codec = ValueCodec(self.ns, size)
        self.tier = RedisTier(url, self.codec, op_timeout=5.0, max_connections=CONC,
                              breaker=CircuitBreaker(threshold=1000))
        signed = ValueCodec(self.ns, size, signer=ValueSigner(os.urandom(32)))
        self.signed = RedisTier(url, signed, op_timeout=5.0, max_connections=CONC,
                                breaker=CircuitBreaker(threshold=1000))
        self.raw = aioredis.Redis.from_url(url, max_connections=CONC)
        self.size = size
        payload = os.urandom(size)
        hs = [_hash(0, i) for i in range(nvalues)]
        self.items = [(self.ns.key(h), self.codec.encode(h, [payload])) for h in hs]
        hs = [_hash(_SIGNED_TAG, i) for i in range(nvalues)]
        self.signed_items = [(self.ns.key(h), signed.encode(h, [payload])) for h in hs]
        self.nbytes = sum(len(v) for _, v in self.items)
        self._fresh = 0

    async def setup(self) -> None:
        await self.raw.flushall()
        pipe = self.raw.pipeline(transaction=False)
        for k, v in self.items + self.signed_items:
            pipe.set(k, v)
        await pipe.execute()

    async def aclose(self) -> None:
        await self.raw.flushall()
        await self.tier.aclose()
        await self.signed.aclose()
        await self.raw.aclose()

    def get(self, side: str, mode: str):
        tier = self.signed if side == "signed" else self.tier
        keys = [k for k, _ in (self.signed_items if side == "signed" else self.items)]

        async def tier_call(ks):
            assert None not in await tier.get_many(ks)

        async def raw_call(ks):
            vs = await (self.raw.get(ks[0]) if len(ks) == 1 else self.raw.mget(ks))
            assert vs is not None and (len(ks) == 1 or None not in vs)

        async def run() -> dict:
            s = await _drive(mode, keys, raw_call if side == "raw" else tier_call)
            return {"seconds": s, "mib_s": self.nbytes / s / 2**20}
        return run

    def put(self, side: str, mode: str):
        async def tier_call(items):
            assert await self.tier.put_many(items) == len(items)

        async def raw_call(items):
            pipe = self.raw.pipeline(transaction=False)
            for k, v in items:
                pipe.set(k, v, nx=True)
            assert all(await pipe.execute())

        async def run() -> dict:
            # fresh keys each call (SET NX stores them all); the values' headers name other
            # hashes, which a PUT never reads. Deleted after the timing, untimed.
            self._fresh += 1
            items = [(self.ns.key(_hash(self._fresh, i)), v)
                     for i, (_, v) in enumerate(self.items)]
            s = await _drive(mode, items, tier_call if side == "tier" else raw_call)
            await self.raw.unlink(*(k for k, _ in items))
            return {"seconds": s, "mib_s": self.nbytes / s / 2**20}
        return run


async def _throughput(url: str, size: int, total: int, timing: Timing, res: dict) -> None:
    sides = _Sides(url, size, max(PIPE, total // size // PIPE * PIPE))
    try:
        await sides.setup()
        for op in ("get", "put"):
            for mode in MODES:
                make = getattr(sides, op)
                arms = ("tier", "raw", "signed") if op == "get" else ("tier", "raw")
                runs = await aalternate({a: make(a, mode) for a in arms}, timing)
                key = f"{op}.{size >> 10}k.{mode}"
                put(res, f"{key}.tier_mib_s", stat(runs["tier"], "mib_s"))
                put(res, f"{key}.raw_mib_s", stat(runs["raw"], "mib_s"))
                put(res, f"{key}.ratio", ratio_stat(runs["tier"], "mib_s", runs["raw"], "mib_s"))
                if "signed" in runs:
                    put(res, f"{key}.signed_mib_s", stat(runs["signed"], "mib_s"))
                    put(res, f"{key}.signed_ratio",
                        ratio_stat(runs["signed"], "mib_s", runs["tier"], "mib_s"))
        errors = {**sides.tier.stats().errors, **sides.signed.stats().errors}
        assert not errors, errors
    finally:
        await sides.aclose()


async def _commands(r: aioredis.Redis) -> dict[str, int]:
    """Commands run so far by name, and ``reads``: socket reads Redis processed (this INFO's
    own included)."""
    stats = await r.info("commandstats")
    reads = (await r.info("stats"))["total_reads_processed"]
    return {**{name: int(v["calls"]) for name, v in stats.items()}, "reads": int(reads)}


async def _probe_and_round_trips(url: str, rounds: int, timing: Timing, res: dict) -> None:
    ns = _ns()
    codec = ValueCodec(ns, 1024)
    tier = RedisTier(url, codec)
    hs = [b"p" + i.to_bytes(31, "little") for i in range(64)]
    keys = ns.group_keys(hs)
    r = aioredis.Redis.from_url(url)
    try:
        assert await tier.put_many([(k, codec.encode(h, [b"\0" * 1024]))
                                    for k, h in zip(keys, hs)]) == 64
        for _ in range(20):  # warm the connection and the script cache
            assert await tier.probe(keys) == 64
        assert None not in await tier.get_many(keys)  # and the get's pooled connections
        await _probe_latency(tier, r, keys, rounds, timing, res)
        await _round_trips(tier, r, keys, res)
    finally:
        await r.aclose()
        await tier.aclose()


async def _probe_latency(tier: RedisTier, r: aioredis.Redis, keys: list, rounds: int,
                         timing: Timing, res: dict) -> None:
    """The tier's probe script against 64 pipelined EXISTS, alternating: p50 / p99 ms."""
    async def exists() -> dict:
        lat = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            pipe = r.pipeline(transaction=False)
            for k in keys:
                pipe.exists(k)
            await pipe.execute()
            lat.append(time.perf_counter() - t0)
        return _quantiles(lat)

    runs = await aalternate({"lua": remote_cluster.probe_arm(tier, keys, rounds),
                             "exists": exists}, timing)
    put_runs(res, runs["lua"], {"probe.lua_p50_ms": "p50_ms", "probe.lua_p99_ms": "p99_ms"})
    put_runs(res, runs["exists"], {"probe.exists_pipelined_p50_ms": "p50_ms",
                                   "probe.exists_pipelined_p99_ms": "p99_ms"})


async def _round_trips(tier: RedisTier, r: aioredis.Redis, keys: list, res: dict) -> None:
    """The client commands Redis ran for one call over 64 keys (a script's inner TOUCHes are
    not round trips; INFO is excluded)."""
    for name, call, cmds in (
            ("get_many_64", lambda: tier.get_many(keys),
             ("cmdstat_getrange", "cmdstat_mget", "cmdstat_get")),
            ("probe_64", lambda: tier.probe(keys), ("cmdstat_evalsha", "cmdstat_eval"))):
        before = await _commands(r)
        await call()
        after = await _commands(r)
        res[f"round_trips.{name}"] = sum(after.get(c, 0) - before.get(c, 0) for c in cmds)
        # the two INFO reads of the second _commands
        res[f"round_trips.{name}_reads"] = after["reads"] - before["reads"] - 2


def _quantiles(lat: list[float]) -> dict:
    xs = sorted(lat)
    return {"seconds": sum(xs), "p50_ms": xs[len(xs) // 2] * 1e3,
            "p99_ms": xs[min(len(xs) - 1, int(len(xs) * 0.99))] * 1e3}


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = bench_parser("remote", __doc__)
    ap.add_argument("--no-ttft", action="store_true", help="skip the TTFT-by-prefix section")
    ap.add_argument("--sizes", type=_lengths, default=None, metavar="KIB,KIB,...",
                    help="value sizes in KiB (default 64,512,1024,2048,4096; --quick 64,1024)")
    ap.add_argument("--ttft-repeats", type=int, default=None, metavar="N",
                    help="interleaved rounds per prefix length (default 5, --quick 2)")
    ap.add_argument("--ttft-blocks", type=_lengths, default=None, metavar="B,B,...",
                    help="prefix lengths in blocks (default 1,2,4,...,128; --quick 1,8,128)")
    ap.add_argument("--cluster", action="store_true",
                    help="the Redis Cluster section only (bench/remote_cluster.py)")
    args = ap.parse_args(argv)
    # (--cluster runs no TTFT section: its --ttft-repeats is never read)
    if not args.cluster and args.ttft_repeats is not None and args.ttft_repeats < 1:
        ap.error("--ttft-repeats: use N >= 1")
    return args


def _cluster(args: argparse.Namespace, timing: Timing) -> int:
    """--cluster: the Redis Cluster section only."""
    res = {"timing": timing_info(timing), "machine": machine(),
           "load_avg": list(os.getloadavg())}
    tune_process(engine_config(remote_cluster.SHARE_BLOCKS))
    res.update(asyncio.run(remote_cluster.cluster_vs_single(timing)))
    res["load_avg_end"] = list(os.getloadavg())
    remote_cluster.print_cluster(res)
    write_json(args.json, res)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    timing = timing_from_args(args)
    if args.cluster:
        return _cluster(args, timing)
    lengths = args.ttft_blocks or (remote_ttft.QUICK_LENGTHS if timing.quick
                                   else remote_ttft.LENGTHS)
    ttft_repeats = args.ttft_repeats or (2 if timing.quick else 5)
    total = (2 if timing.quick else 16) << 20  # bytes per call of a throughput workload
    sizes = (tuple(k << 10 for k in args.sizes) if args.sizes else
             QUICK_SIZES if timing.quick else SIZES)
    res: dict = {"timing": timing_info(timing), "machine": machine(),
                 "load_avg": list(os.getloadavg()), "hiredis": HIREDIS_AVAILABLE}
    # the start-up heap (torch, the engine's modules: ~390k objects) frozen, as bench/sched.py
    # and kvpool serve do (NOTE(gc-freeze)): bench.common's gc.collect() before every run
    # walked all of it, ~0.2 s a run
    gc.collect()
    gc.freeze()
    srv = RedisServer(maxmemory="1gb")
    srv.start()
    try:
        async def go() -> None:
            for size in sizes:
                await _throughput(srv.url, size, total, timing, res)
            await _probe_and_round_trips(srv.url, 100 if timing.quick else 1000, timing, res)
        asyncio.run(go())
        if not args.no_ttft:
            # as kvpool serve's entry point tunes it (one torch thread, 0.5 ms GIL switch);
            # last, so the throughput figures above keep the defaults they always had
            tune_process(engine_config(max(lengths)))
            res.update(asyncio.run(remote_ttft.ttft_by_prefix(srv.url, lengths, ttft_repeats)))
    finally:
        srv.stop()
    res["load_avg_end"] = list(os.getloadavg())
    _print(res, sizes)
    if not args.no_ttft:
        remote_ttft.print_ttft(res)
    write_json(args.json, res)
    return 0


def _lengths(text: str) -> tuple[int, ...]:
    try:
        out = tuple(int(x) for x in text.split(","))
    except ValueError:
        out = ()
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: comma-separated block counts >= 1")
    return out


def _print(res: dict, sizes) -> None:
    def cell(key: str, fmt: str = ".0f") -> str:
        return f"{res[key]:{fmt}} [{res[key + '.min']:{fmt}}-{res[key + '.max']:{fmt}}]"
    print(f"load average {res['load_avg'][0]:.2f} -> {res['load_avg_end'][0]:.2f}; "
          f"hiredis {res['hiredis']}")
    print(f"{'op':>4} {'value':>7} {'mode':>11} {'tier MiB/s':>18} {'raw MiB/s':>18} "
          f"{'tier/raw':>16}")
    for op in ("get", "put"):
        for size in sizes:
            for mode in MODES:
                k = f"{op}.{size >> 10}k.{mode}"
                print(f"{op:>4} {size >> 10:>6}K {mode:>11} {cell(k + '.tier_mib_s'):>18} "
                      f"{cell(k + '.raw_mib_s'):>18} {cell(k + '.ratio', '.2f'):>16}")
    print(f"{'get':>4} {'value':>7} {'mode':>11} {'signed MiB/s':>18} {'signed/tier':>18}")
    for size in sizes:
        for mode in MODES:
            k = f"get.{size >> 10}k.{mode}"
            print(f"{'get':>4} {size >> 10:>6}K {mode:>11} {cell(k + '.signed_mib_s'):>18} "
                  f"{cell(k + '.signed_ratio', '.3f'):>18}")
    print(f"64-key probe: Lua p50 {cell('probe.lua_p50_ms', '.3f')} ms, p99 "
          f"{cell('probe.lua_p99_ms', '.3f')} ms; 64 pipelined EXISTS p50 "
          f"{cell('probe.exists_pipelined_p50_ms', '.3f')} ms")
    print(f"Redis commands (socket reads) for 64 keys: get_many "
          f"{res['round_trips.get_many_64']} ({res['round_trips.get_many_64_reads']}), probe "
          f"{res['round_trips.probe_64']} ({res['round_trips.probe_64_reads']})")


if __name__ == "__main__":
    sys.exit(main())
